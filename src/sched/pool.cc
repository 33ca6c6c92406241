#include "sched/pool.h"

#include <map>
#include <tuple>

namespace meridian::sched {

std::vector<Pool> BuildPools(const model::Fleet& fleet) {
  using Key = std::tuple<uint32_t, std::string_view, int32_t, int64_t, int64_t, int64_t, int64_t,
                         int, bool, bool>;
  std::map<Key, uint32_t> index;
  std::map<std::string_view, uint32_t> type_index;
  std::vector<Pool> pools;
  for (const model::Node& n : fleet.nodes) {
    int64_t dev_mem = n.devices.empty() ? 0 : n.devices.front().memory_bytes;
    bool emulated = !n.devices.empty() && n.devices.front().emulated;
    Key key{n.site.value(), n.accelerator_type(), static_cast<int32_t>(n.devices.size()), dev_mem,
            n.cpu_milli, n.memory_bytes, n.price_micro_usd_per_hour, static_cast<int>(n.health),
            n.spot, emulated};
    auto [it, inserted] = index.emplace(key, static_cast<uint32_t>(pools.size()));
    if (inserted) {
      Pool p;
      p.index = it->second;
      p.site = n.site;
      p.device_type = n.accelerator_type();
      p.type_index = type_index.try_emplace(p.device_type, static_cast<uint32_t>(type_index.size())).first->second;
      p.device_count = static_cast<int32_t>(n.devices.size());
      p.device_memory_bytes = dev_mem;
      p.cpu_milli = n.cpu_milli;
      p.memory_bytes = n.memory_bytes;
      p.price_micro_usd_per_hour = n.price_micro_usd_per_hour;
      p.health = n.health;
      p.spot = n.spot;
      p.emulated = emulated;
      pools.push_back(std::move(p));
    }
    pools[it->second].nodes.push_back(n.id);
  }
  return pools;
}

PoolIndex PoolIndex::Build(const model::Fleet& fleet) {
  PoolIndex out;
  out.pools = BuildPools(fleet);
  out.pool_of_node.resize(fleet.nodes.size());
  for (const Pool& p : out.pools) {
    for (NodeId n : p.nodes) out.pool_of_node[n.value()] = p.index;
  }
  return out;
}

}  // namespace meridian::sched
