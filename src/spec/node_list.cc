#include "spec/node_list.h"

#include <fmt/format.h>

#include "common/units.h"
#include "model/accelerators.h"
#include "model/fleet.h"
#include "spec/csv.h"

namespace meridian::spec {

StatusOr<std::vector<ListedNode>> ParseAlibabaNodeList(std::string_view csv, std::string_view file) {
  MERIDIAN_ASSIGN_OR_RETURN(CsvTable t, CsvTable::Parse(std::string(csv), std::string(file)));
  const std::vector<std::string_view> expected{"sn", "cpu_milli", "memory_mib", "gpu", "model"};
  if (t.header() != expected) {
    return InvalidArgumentError(
        fmt::format("{}:1: expected the header 'sn,cpu_milli,memory_mib,gpu,model'", file));
  }
  std::vector<ListedNode> nodes;
  for (size_t r = 0; r < t.rows(); ++r) {
    ListedNode n;
    n.name = std::string(t.field(r, 0));
    MERIDIAN_ASSIGN_OR_RETURN(n.cpu_milli, t.Int(r, 1));
    if (n.cpu_milli <= 0 || n.cpu_milli > model::kMaxNodeCpuMilli) {
      return t.Error(r, 1, fmt::format("expected 1 to {}", model::kMaxNodeCpuMilli));
    }
    MERIDIAN_ASSIGN_OR_RETURN(int64_t memory_mib, t.Int(r, 2));
    if (memory_mib <= 0 || memory_mib > model::kMaxNodeMemoryBytes / kMiB) {
      return t.Error(r, 2, fmt::format("expected 1 to {}", model::kMaxNodeMemoryBytes / kMiB));
    }
    MERIDIAN_ASSIGN_OR_RETURN(int64_t gpus, t.Int(r, 3));
    if (gpus < 0 || gpus > 64) return t.Error(r, 3, "expected an integer from 0 to 64");
    n.memory_bytes = memory_mib * kMiB;
    n.gpus = static_cast<int32_t>(gpus);
    if (gpus > 0) {
      auto type = model::FindAcceleratorType(t.field(r, 4));
      if (!type) return t.Error(r, 4, "unknown GPU model");
      n.gpu_model = std::string(type->name);
    }
    nodes.push_back(std::move(n));
  }
  if (nodes.empty()) return InvalidArgumentError(fmt::format("{}: no nodes", file));
  return nodes;
}

}  // namespace meridian::spec
