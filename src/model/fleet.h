// The fleet: sites, the links between them, and the nodes with their devices.
// Plain value types; a Fleet is built (and validated) by src/spec/ or by a
// coordinator's registry and is then read-only.
//
// Thread-safety: value types; a const Fleet may be shared between threads.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/ids.h"
#include "common/status.h"

namespace meridian::model {

enum class SiteKind { kCloud, kDc, kEdge };
std::string_view SiteKindName(SiteKind kind);

struct Site {
  SiteId id;
  std::string name;      // unique in the fleet: "us-east"
  SiteKind kind = SiteKind::kCloud;
  std::string provider;  // "aws", "gcp", "onprem", ...
  std::string region;    // "us-east-1"; allowed-region rules match this or the name
  // What data leaving this site costs when no link says otherwise.
  int64_t egress_micro_usd_per_gb = 0;
};

// A link between two sites, symmetric in latency and bandwidth. Egress is charged by
// the sending side: a->b costs egress_a_to_b, b->a costs egress_b_to_a.
struct Link {
  SiteId a;
  SiteId b;
  int64_t rtt_us = 0;
  int64_t bandwidth_bps = 0;
  int64_t egress_a_to_b_micro_usd_per_gb = 0;
  int64_t egress_b_to_a_micro_usd_per_gb = 0;
  // How much a request's round trip varies: each waits rtt plus a uniform 0 to this
  // (emulated links only; the scheduler plans with rtt).
  int64_t jitter_us = 0;
};
inline constexpr int64_t kMaxLinkJitterUs = 60'000'000;

// One accelerator. A node's accelerators are all of one type.
struct Device {
  std::string type;       // canonical accelerator type, "A100"
  int32_t index = 0;      // on its node
  int64_t memory_bytes = 0;
  bool emulated = false;  // declared in config and executed on the CPU
  // For emulated devices: how much faster than the CPU the emulation pretends to be.
  double speed_factor = 1.0;
};

enum class NodeHealth { kHealthy, kDraining, kUnhealthy };
std::string_view NodeHealthName(NodeHealth health);

struct Node {
  NodeId id;
  std::string name;       // unique in the fleet: "us-east-a100-0"
  SiteId site;
  std::string group;      // the node group of the fleet file it came from
  int64_t cpu_milli = 0;
  int64_t memory_bytes = 0;
  int64_t disk_bytes = 0;
  std::vector<Device> devices;
  std::map<std::string, std::string> labels;
  int64_t price_micro_usd_per_hour = 0;
  bool spot = false;
  NodeHealth health = NodeHealth::kHealthy;

  // The type of the node's accelerators, or "CPU" when it has none.
  std::string_view accelerator_type() const;
};

// A tenant's limits and its weight in fair sharing. Zero limits mean unlimited.
struct Tenant {
  TenantId id;
  std::string name;
  int64_t weight = 1;
  int64_t max_gpu_milli = 0;    // every accelerator type together
  int64_t max_cpu_milli = 0;
  int64_t max_memory_bytes = 0;
  // Accelerators of one type ("H100": 2000): a type absent is limited by
  // max_gpu_milli only.
  std::map<std::string, int64_t, std::less<>> max_gpu_milli_by_type = {};
  // What its tasks may cost per day (UTC), by the nodes' prices; 0: no budget.
  int64_t budget_micro_usd_per_day = 0;
};

class Fleet {
 public:
  std::vector<Site> sites;
  std::vector<Link> links;
  std::vector<Node> nodes;
  std::vector<Tenant> tenants;

  std::optional<SiteId> FindSite(std::string_view name) const;
  std::optional<TenantId> FindTenant(std::string_view name) const;
  const Site& site(SiteId id) const { return sites.at(id.value()); }
  const Node& node(NodeId id) const { return nodes.at(id.value()); }
  // The link between two different sites, if one is declared.
  const Link* FindLink(SiteId a, SiteId b) const;
  // Egress price from `from` to `to` (the link's, else the sending site's).
  int64_t EgressMicroUsdPerGB(SiteId from, SiteId to) const;
};

// Limits on what one node may declare. A node spec arrives from an agent over the
// network as well as from fleet files, so each field is checked against what a real
// machine has before the scheduler counts on it.
inline constexpr int64_t kMaxNodeCpuMilli = int64_t{4096} * 1000;     // 4,096 cores
inline constexpr int64_t kMaxNodeMemoryBytes = int64_t{64} << 40;     // 64 TiB
inline constexpr int64_t kMaxNodeDiskBytes = int64_t{1} << 50;        // 1 PiB
inline constexpr size_t kMaxNodeDevices = 64;
inline constexpr int64_t kMaxDeviceMemoryBytes = int64_t{4} << 40;    // 4 TiB
inline constexpr int64_t kMaxNodePriceMicroUsdPerHour = int64_t{10'000} * 1'000'000;
inline constexpr size_t kMaxNodeLabels = 64;
inline constexpr size_t kMaxNameLength = 253;

// A name of a node, site, object or dataset: 1 to 253 characters of letters, digits,
// '.', '_', '-' and ':', not starting with '.' (so never "." or ".."). Names end up as
// keys, file names and log lines, so no '/', whitespace or control characters. `what`
// names the field in the error.
Status CheckName(std::string_view name, std::string_view what);

// Whether `ref` reads as an object id (32 lowercase hex digits): names of objects and
// datasets must not, so that a reference means one thing.
inline bool LooksLikeObjectId(std::string_view ref) {
  return ref.size() == 32 && ref.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

// Checks a node's declared resources: positive CPU and memory within the limits above,
// non-negative disk and price, at most 64 devices with sane memory and speed, bounded
// labels. Errors name the node and the field.
Status CheckNodeSpec(const Node& node);

}  // namespace meridian::model
