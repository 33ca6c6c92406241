#include "sim/fleet_builder.h"

#include <fmt/format.h>

namespace meridian::sim {

model::Fleet ScaleFleet(const model::Fleet& fleet, int factor) {
  model::Fleet out;
  out.sites = fleet.sites;
  out.links = fleet.links;
  out.tenants = fleet.tenants;
  out.nodes.reserve(fleet.nodes.size() * static_cast<size_t>(std::max(factor, 1)));
  for (int k = 0; k < factor; ++k) {
    for (const model::Node& n : fleet.nodes) {
      model::Node copy = n;
      copy.id = NodeId(static_cast<uint32_t>(out.nodes.size()));
      if (k > 0) copy.name = fmt::format("{}-x{}", n.name, k);
      out.nodes.push_back(std::move(copy));
    }
  }
  return out;
}

NodeId AddNodeLike(model::Fleet* fleet, NodeId like) {
  model::Node copy = fleet->node(like);
  copy.id = NodeId(static_cast<uint32_t>(fleet->nodes.size()));
  copy.name = fmt::format("{}-add-{}", fleet->node(like).name, fleet->nodes.size());
  copy.health = model::NodeHealth::kHealthy;
  fleet->nodes.push_back(std::move(copy));
  return fleet->nodes.back().id;
}

}  // namespace meridian::sim
