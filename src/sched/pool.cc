#include "sched/pool.h"

#include "common/status.h"

namespace meridian::sched {

PoolIndex::Key PoolIndex::KeyOf(const model::Node& n) {
  int64_t dev_mem = n.devices.empty() ? 0 : n.devices.front().memory_bytes;
  bool emulated = !n.devices.empty() && n.devices.front().emulated;
  return Key{n.site.value(), std::string(n.accelerator_type()), static_cast<int32_t>(n.devices.size()),
             dev_mem, n.cpu_milli, n.memory_bytes, n.price_micro_usd_per_hour, static_cast<int>(n.health),
             n.spot, emulated, n.labels};
}

uint32_t PoolIndex::PoolFor(const model::Node& n) {
  auto [it, inserted] = by_key_.try_emplace(KeyOf(n), static_cast<uint32_t>(pools.size()));
  if (!inserted) return it->second;
  Pool p;
  p.index = it->second;
  p.site = n.site;
  // A view into the key, which the map keeps in place for the index's lifetime.
  p.device_type = std::get<1>(it->first);
  p.type_index = type_index_.try_emplace(std::string(p.device_type), static_cast<uint32_t>(type_index_.size()))
                     .first->second;
  p.device_count = static_cast<int32_t>(n.devices.size());
  p.device_memory_bytes = n.devices.empty() ? 0 : n.devices.front().memory_bytes;
  p.cpu_milli = n.cpu_milli;
  p.memory_bytes = n.memory_bytes;
  p.price_micro_usd_per_hour = n.price_micro_usd_per_hour;
  p.health = n.health;
  p.spot = n.spot;
  p.emulated = !n.devices.empty() && n.devices.front().emulated;
  p.labels = n.labels;
  pools.push_back(std::move(p));
  return it->second;
}

PoolIndex PoolIndex::Build(const model::Fleet& fleet) {
  PoolIndex out;
  out.pool_of_node.resize(fleet.nodes.size());
  for (const model::Node& n : fleet.nodes) {
    uint32_t p = out.PoolFor(n);
    out.pools[p].nodes.push_back(n.id);
    out.pool_of_node[n.id.value()] = p;
  }
  return out;
}

void PoolIndex::Add(const model::Fleet& fleet, NodeId node) {
  MERIDIAN_CHECK(node.value() == pool_of_node.size());
  uint32_t p = PoolFor(fleet.node(node));
  pools[p].nodes.push_back(node);  // the newest node: fleet order holds
  pool_of_node.push_back(p);
}

void PoolIndex::Move(const model::Fleet& fleet, NodeId node) {
  const uint32_t from = pool_of_node.at(node.value());
  const uint32_t to = PoolFor(fleet.node(node));
  if (from == to) return;
  std::vector<NodeId>& a = pools[from].nodes;
  a.erase(std::lower_bound(a.begin(), a.end(), node));
  std::vector<NodeId>& b = pools[to].nodes;
  b.insert(std::lower_bound(b.begin(), b.end(), node), node);
  pool_of_node[node.value()] = to;
}

}  // namespace meridian::sched
