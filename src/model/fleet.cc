#include "model/fleet.h"

#include "model/accelerators.h"

namespace meridian::model {

std::string_view SiteKindName(SiteKind kind) {
  switch (kind) {
    case SiteKind::kCloud: return "cloud";
    case SiteKind::kDc: return "dc";
    case SiteKind::kEdge: return "edge";
  }
  return "cloud";
}

std::string_view NodeHealthName(NodeHealth health) {
  switch (health) {
    case NodeHealth::kHealthy: return "healthy";
    case NodeHealth::kDraining: return "draining";
    case NodeHealth::kUnhealthy: return "unhealthy";
  }
  return "unhealthy";
}

std::string_view Node::accelerator_type() const {
  return devices.empty() ? kCpuType : std::string_view(devices.front().type);
}

std::optional<SiteId> Fleet::FindSite(std::string_view name) const {
  for (const Site& s : sites) {
    if (s.name == name) return s.id;
  }
  return std::nullopt;
}

std::optional<TenantId> Fleet::FindTenant(std::string_view name) const {
  for (const Tenant& t : tenants) {
    if (t.name == name) return t.id;
  }
  return std::nullopt;
}

const Link* Fleet::FindLink(SiteId a, SiteId b) const {
  for (const Link& l : links) {
    if ((l.a == a && l.b == b) || (l.a == b && l.b == a)) return &l;
  }
  return nullptr;
}

int64_t Fleet::EgressMicroUsdPerGB(SiteId from, SiteId to) const {
  if (from == to) return 0;
  if (const Link* l = FindLink(from, to)) {
    return l->a == from ? l->egress_a_to_b_micro_usd_per_gb : l->egress_b_to_a_micro_usd_per_gb;
  }
  return site(from).egress_micro_usd_per_gb;
}

}  // namespace meridian::model
