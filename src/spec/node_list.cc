#include "spec/node_list.h"

#include <charconv>

#include <fmt/format.h>

#include "common/units.h"
#include "model/accelerators.h"

namespace meridian::spec {
namespace {

std::vector<std::string_view> SplitCsvLine(std::string_view line) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    size_t comma = line.find(',', start);
    out.push_back(line.substr(start, comma == std::string_view::npos ? comma : comma - start));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

bool ToInt(std::string_view s, int64_t* out) {
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

}  // namespace

StatusOr<std::vector<ListedNode>> ParseAlibabaNodeList(std::string_view csv, std::string_view file) {
  std::vector<ListedNode> nodes;
  size_t line_no = 0;
  size_t pos = 0;
  while (pos < csv.size()) {
    size_t nl = csv.find('\n', pos);
    std::string_view line = csv.substr(pos, nl == std::string_view::npos ? nl : nl - pos);
    pos = nl == std::string_view::npos ? csv.size() : nl + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    std::vector<std::string_view> f = SplitCsvLine(line);
    if (line_no == 1) {
      if (line != "sn,cpu_milli,memory_mib,gpu,model") {
        return InvalidArgumentError(fmt::format(
            "{}:1: expected the header 'sn,cpu_milli,memory_mib,gpu,model', got '{}'", file, line));
      }
      continue;
    }
    if (f.size() != 5) {
      return InvalidArgumentError(
          fmt::format("{}:{}: expected 5 fields, got {}", file, line_no, f.size()));
    }
    ListedNode n;
    n.name = std::string(f[0]);
    int64_t memory_mib = 0, gpus = 0;
    if (!ToInt(f[1], &n.cpu_milli) || n.cpu_milli <= 0) {
      return InvalidArgumentError(fmt::format("{}:{}: cpu_milli: expected a positive integer, got '{}'",
                                              file, line_no, f[1]));
    }
    if (!ToInt(f[2], &memory_mib) || memory_mib <= 0) {
      return InvalidArgumentError(fmt::format(
          "{}:{}: memory_mib: expected a positive integer, got '{}'", file, line_no, f[2]));
    }
    if (!ToInt(f[3], &gpus) || gpus < 0 || gpus > 64) {
      return InvalidArgumentError(fmt::format(
          "{}:{}: gpu: expected an integer from 0 to 64, got '{}'", file, line_no, f[3]));
    }
    n.memory_bytes = memory_mib * kMiB;
    n.gpus = static_cast<int32_t>(gpus);
    if (gpus > 0) {
      auto type = model::FindAcceleratorType(f[4]);
      if (!type) {
        return InvalidArgumentError(
            fmt::format("{}:{}: model: unknown GPU model '{}'", file, line_no, f[4]));
      }
      n.gpu_model = std::string(type->name);
    }
    nodes.push_back(std::move(n));
  }
  if (nodes.empty()) return InvalidArgumentError(fmt::format("{}: no nodes", file));
  return nodes;
}

}  // namespace meridian::spec
