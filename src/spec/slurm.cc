#include "spec/slurm.h"

#include <algorithm>
#include <cctype>
#include <charconv>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "model/accelerators.h"
#include "model/fleet.h"

namespace meridian::spec {
namespace {

std::vector<std::string_view> Words(std::string_view text) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    size_t start = i;
    while (i < text.size() && !std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    if (i > start) out.push_back(text.substr(start, i - start));
  }
  return out;
}

bool StartsWith(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

StatusOr<int64_t> Number(std::string_view s, std::string_view what) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < 0) {
    return InvalidArgumentError(fmt::format("slurm job: {}: expected a number, got '{}'", what, s));
  }
  return v;
}

// Splits at commas outside brackets and parentheses.
std::vector<std::string_view> TopLevel(std::string_view s) {
  std::vector<std::string_view> out;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || (s[i] == ',' && depth == 0)) {
      if (i > start) out.push_back(s.substr(start, i - start));
      start = i + 1;
    } else if (s[i] == '[' || s[i] == '(') {
      ++depth;
    } else if ((s[i] == ']' || s[i] == ')') && depth > 0) {
      --depth;
    }
  }
  return out;
}

// "0-3,8" -> 5.
StatusOr<int32_t> CountIds(std::string_view ids) {
  int64_t n = 0;
  for (std::string_view part : TopLevel(ids)) {
    size_t dash = part.find('-');
    MERIDIAN_ASSIGN_OR_RETURN(int64_t lo, Number(part.substr(0, dash), "CPU_IDs"));
    int64_t hi = lo;
    if (dash != std::string_view::npos) {
      MERIDIAN_ASSIGN_OR_RETURN(hi, Number(part.substr(dash + 1), "CPU_IDs"));
    }
    if (hi < lo || hi - lo > 1'000'000) {
      return InvalidArgumentError(fmt::format("slurm job: CPU_IDs: bad range '{}'", part));
    }
    n += hi - lo + 1;
    if (n > 1'000'000) return InvalidArgumentError("slurm job: CPU_IDs: more than 1,000,000 CPUs");
  }
  return static_cast<int32_t>(n);
}

// "gpu:a100:2(IDX:0-1),gpu:t4:1(IDX:3)" or "gpu:2(IDX:0-1)".
StatusOr<std::vector<SlurmGres>> ParseGres(std::string_view text) {
  std::vector<SlurmGres> out;
  if (text.empty() || text == "(null)" || text == "N/A") return out;
  for (std::string_view item : TopLevel(text)) {
    item = item.substr(0, item.find('('));
    std::vector<std::string_view> f;
    for (size_t start = 0;;) {
      size_t colon = item.find(':', start);
      f.push_back(item.substr(start, colon == std::string_view::npos ? std::string_view::npos : colon - start));
      if (colon == std::string_view::npos) break;
      start = colon + 1;
    }
    SlurmGres g;
    g.name = std::string(f[0]);
    g.count = 1;
    // name[:type][:count]: the last field is the count when it is a number.
    StatusOr<int64_t> last = Number(f.back(), "GRES");
    const bool counted = f.size() > 1 && last.ok();
    const int64_t count = counted ? *last : 0;
    if (f.size() > 3 || g.name.empty() || (f.size() == 3 && !counted)) {
      return InvalidArgumentError(fmt::format("slurm job: GRES: expected NAME[:TYPE][:COUNT], got '{}'", item));
    }
    if (counted) {
      if (count > 1024) return InvalidArgumentError(fmt::format("slurm job: GRES '{}': more than 1024", item));
      g.count = static_cast<int32_t>(count);
    }
    if (f.size() == 3 || (f.size() == 2 && !counted)) g.type = std::string(f[1]);
    out.push_back(std::move(g));
  }
  return out;
}

}  // namespace

StatusOr<std::vector<std::string>> ExpandHostlist(std::string_view list, size_t max_hosts) {
  std::vector<std::string> out;
  for (std::string_view item : TopLevel(list)) {
    const size_t open = item.find('[');
    if (open == std::string_view::npos) {
      out.emplace_back(item);
    } else {
      const size_t close = item.find(']', open);
      if (close == std::string_view::npos || item.find('[', open + 1) < close ||
          item.find('[', close) != std::string_view::npos) {
        return InvalidArgumentError(
            fmt::format("hostlist '{}': expected PREFIX[RANGES]SUFFIX with one bracket", item));
      }
      const std::string_view prefix = item.substr(0, open);
      const std::string_view suffix = item.substr(close + 1);
      for (std::string_view range : TopLevel(item.substr(open + 1, close - open - 1))) {
        const size_t dash = range.find('-');
        const std::string_view lo_text = range.substr(0, dash);
        MERIDIAN_ASSIGN_OR_RETURN(int64_t lo, Number(lo_text, "hostlist"));
        int64_t hi = lo;
        if (dash != std::string_view::npos) {
          MERIDIAN_ASSIGN_OR_RETURN(hi, Number(range.substr(dash + 1), "hostlist"));
        }
        if (hi < lo || static_cast<size_t>(hi - lo) >= max_hosts) {
          return InvalidArgumentError(fmt::format("hostlist '{}': bad range '{}'", item, range));
        }
        for (int64_t k = lo; k <= hi; ++k) {
          if (out.size() >= max_hosts) break;
          // Zero-padded as the range's first bound is ("01-10" -> 01 ... 10).
          out.push_back(fmt::format("{}{:0{}}{}", prefix, k, lo_text.size(), suffix));
        }
      }
    }
    if (out.size() >= max_hosts) {
      return InvalidArgumentError(fmt::format("hostlist names more than {} hosts", max_hosts));
    }
  }
  return out;
}

StatusOr<SlurmAllocation> ParseSlurmJob(std::string_view text, std::string_view node) {
  if (text.size() > kMaxSlurmJobText) {
    return InvalidArgumentError(fmt::format("slurm job: {} bytes of scontrol output, more than the {} read",
                                            text.size(), kMaxSlurmJobText));
  }
  SlurmAllocation a;
  a.node = std::string(node);
  const std::vector<std::string_view> w = Words(text);
  bool found = false;
  std::vector<std::string> groups;  // the hostlists seen, for the error
  for (size_t i = 0; i < w.size(); ++i) {
    if (StartsWith(w[i], "JobId=")) a.job_id = std::string(w[i].substr(6));
    if (StartsWith(w[i], "Partition=")) a.partition = std::string(w[i].substr(10));
    // A node group: "Nodes=LIST CPU_IDs=... Mem=... GRES=...".
    if (!StartsWith(w[i], "Nodes=") || i + 1 >= w.size() || !StartsWith(w[i + 1], "CPU_IDs=")) continue;
    const std::string_view list = w[i].substr(6);
    groups.emplace_back(list);
    MERIDIAN_ASSIGN_OR_RETURN(std::vector<std::string> hosts, ExpandHostlist(list));
    if (std::find(hosts.begin(), hosts.end(), node) == hosts.end()) continue;
    if (found) return InvalidArgumentError(fmt::format("slurm job: node {} is in two node groups", node));
    found = true;
    for (size_t k = i + 1; k < w.size() && !StartsWith(w[k], "Nodes="); ++k) {
      if (StartsWith(w[k], "CPU_IDs=")) {
        MERIDIAN_ASSIGN_OR_RETURN(a.cpus, CountIds(w[k].substr(8)));
      } else if (StartsWith(w[k], "Mem=")) {
        MERIDIAN_ASSIGN_OR_RETURN(int64_t mib, Number(w[k].substr(4), "Mem"));
        if (mib > (int64_t{1} << 40)) return InvalidArgumentError("slurm job: Mem: more than 2^40 MiB");
        a.memory_bytes = mib << 20;
      } else if (StartsWith(w[k], "GRES=")) {
        MERIDIAN_ASSIGN_OR_RETURN(a.gres, ParseGres(w[k].substr(5)));
      } else {
        break;  // the group ended
      }
    }
  }
  if (!found) {
    return NotFoundError(fmt::format("slurm job {}: no node group names {} (groups: {})",
                                     a.job_id.empty() ? "?" : a.job_id, node,
                                     groups.empty() ? "none; is this scontrol show job -d?" : fmt::format("{}", fmt::join(groups, " "))));
  }
  if (a.cpus <= 0) return InvalidArgumentError(fmt::format("slurm job {}: node {} has no CPU_IDs", a.job_id, node));
  if (a.partition.empty()) return InvalidArgumentError(fmt::format("slurm job {}: no Partition=", a.job_id));
  return a;
}

StatusOr<NodeConfig> NodeFromSlurm(const SlurmAllocation& allocation, const SlurmNodeOptions& options,
                                   std::string* note) {
  NodeConfig c;
  c.node.name = allocation.node;
  MERIDIAN_RETURN_IF_ERROR(model::CheckName(c.node.name, "slurm node name"));
  c.site = options.site.empty() ? allocation.partition : options.site;
  MERIDIAN_RETURN_IF_ERROR(model::CheckName(c.site, "site (the slurm partition unless --site)"));
  c.node.cpu_milli = int64_t{allocation.cpus} * 1000;
  c.node.memory_bytes = allocation.memory_bytes;
  if (c.node.memory_bytes <= 0) {
    return InvalidArgumentError(fmt::format("slurm job {}: node {} has no Mem= (ask for memory: sbatch --mem)",
                                            allocation.job_id, allocation.node));
  }
  c.node.labels["slurm-job"] = allocation.job_id;
  c.node.labels["slurm-partition"] = allocation.partition;
  std::vector<std::string> left_out;
  for (const SlurmGres& g : allocation.gres) {
    if (g.name != "gpu") {
      left_out.push_back(fmt::format("GRES {} (not a GPU)", g.name));
      continue;
    }
    std::string type;
    if (g.type.empty()) {
      type = options.untyped_gpu;
      if (type.empty()) {
        left_out.push_back(fmt::format("{} GPUs of no type (CUDA's are taken; else give --gpu-type)", g.count));
        continue;
      }
    } else {
      auto mapped = options.gpu_types.find(g.type);
      type = mapped != options.gpu_types.end() ? mapped->second : g.type;
    }
    auto known = model::FindAcceleratorType(type);
    if (!known || known->klass == model::AcceleratorClass::kCpu) {
      return InvalidArgumentError(fmt::format(
          "slurm GRES gpu:{}: no accelerator type '{}' (known: {}); map it with --gpu-types {}=TYPE",
          g.type.empty() ? "(untyped)" : g.type, type, model::KnownAcceleratorTypeNames(),
          g.type.empty() ? "TYPE" : g.type));
    }
    for (int32_t k = 0; k < g.count; ++k) {
      c.node.devices.push_back(model::Device{std::string(known->name), static_cast<int32_t>(c.node.devices.size()),
                                             known->default_memory_bytes, true, 1.0});
    }
  }
  if (note != nullptr) *note = left_out.empty() ? "" : fmt::format("left out: {}", fmt::join(left_out, "; "));
  return c;
}

StatusOr<std::map<std::string, std::string>> ParseGpuTypeMap(std::string_view text) {
  std::map<std::string, std::string> out;
  for (std::string_view item : TopLevel(text)) {
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0 || eq + 1 == item.size()) {
      return InvalidArgumentError(fmt::format("--gpu-types: expected GRES_TYPE=TYPE[,...], got '{}'", item));
    }
    auto known = model::FindAcceleratorType(item.substr(eq + 1));
    if (!known) {
      return InvalidArgumentError(fmt::format("--gpu-types: unknown accelerator type '{}' (known: {})",
                                              item.substr(eq + 1), model::KnownAcceleratorTypeNames()));
    }
    out[std::string(item.substr(0, eq))] = std::string(known->name);
  }
  return out;
}

}  // namespace meridian::spec
