// Pools: the fleet's nodes grouped by everything the static filters and the scores
// look at (site, device type/count/memory, capacity, price, health). Nodes of one
// pool differ only in what is free, so each filter and score runs once per pool
// rather than once per node; that is what keeps a decision in microseconds at
// 100,000 nodes.
//
// Thread-safety: a PoolIndex is immutable once built and may be shared by calls.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <string_view>
#include <vector>

#include "common/ids.h"
#include "model/fleet.h"

namespace meridian::sched {

struct Pool {
  uint32_t index = 0;
  SiteId site;
  std::string_view device_type;  // "CPU" when the nodes have no accelerator
  uint32_t type_index = 0;       // dense over the distinct device types of the pools
  int32_t device_count = 0;
  int64_t device_memory_bytes = 0;
  int64_t cpu_milli = 0;         // capacity of each node
  int64_t memory_bytes = 0;
  int64_t price_micro_usd_per_hour = 0;
  model::NodeHealth health = model::NodeHealth::kHealthy;
  bool spot = false;
  bool emulated = false;
  std::map<std::string, std::string> labels;  // the nodes' (pools are keyed by them)
  std::vector<NodeId> nodes;     // in fleet order
};

// The pools of one fleet and the pool of each node. Building it is O(nodes); a
// caller that schedules the same fleet many times (the simulator, the
// coordinator's loop) builds it once and hands it to every Snapshot, so that a
// call costs what its queue costs, not what the fleet does; when a node changes
// (its health) or joins, Move and Add keep the index exact without a rebuild.
// Pools of an index are ordered by creation: by first node for Build, appended
// for pools that later changes create. Pool::device_type views strings the index
// owns: the index must outlive its pools' views, and it is not copyable.
class PoolIndex {
 public:
  PoolIndex() = default;
  PoolIndex(PoolIndex&&) = default;
  PoolIndex& operator=(PoolIndex&&) = default;
  PoolIndex(const PoolIndex&) = delete;
  PoolIndex& operator=(const PoolIndex&) = delete;

  std::vector<Pool> pools;
  std::vector<uint32_t> pool_of_node;  // by NodeId

  static PoolIndex Build(const model::Fleet& fleet);
  // The node `node`, just appended to `fleet`.
  void Add(const model::Fleet& fleet, NodeId node);
  // The node changed in something pools are keyed by (its health, say): it moves
  // to the pool that matches it now, made if needed. O(size of the two pools).
  void Move(const model::Fleet& fleet, NodeId node);

 private:
  using Key = std::tuple<uint32_t, std::string, int32_t, int64_t, int64_t, int64_t, int64_t, int, bool, bool,
                         std::map<std::string, std::string>>;
  static Key KeyOf(const model::Node& n);
  uint32_t PoolFor(const model::Node& n);

  std::map<Key, uint32_t> by_key_;
  std::map<std::string, uint32_t, std::less<>> type_index_;
};

}  // namespace meridian::sched
