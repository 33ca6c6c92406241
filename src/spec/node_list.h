// Node lists from real clusters, read into fleet nodes. Today: the Alibaba GPU 2023
// trace's node list (alibaba/clusterdata cluster-trace-gpu-v2023,
// openb_node_list_*.csv: sn,cpu_milli,memory_mib,gpu,model; Weng et al., "Beware of
// Fragmentation", USENIX ATC 2023).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace meridian::spec {

struct ListedNode {
  std::string name;
  int64_t cpu_milli = 0;
  int64_t memory_bytes = 0;
  int32_t gpus = 0;
  std::string gpu_model;  // canonical accelerator type, empty when gpus == 0
};

// Errors name the file and line.
StatusOr<std::vector<ListedNode>> ParseAlibabaNodeList(std::string_view csv, std::string_view file);

}  // namespace meridian::spec
