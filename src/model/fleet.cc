#include "model/fleet.h"

#include <cmath>

#include <fmt/format.h>

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

Status CheckName(std::string_view name, std::string_view what) {
  if (name.empty()) return InvalidArgumentError(fmt::format("{}: a name must not be empty", what));
  if (name.size() > kMaxNameLength) {
    return InvalidArgumentError(fmt::format("{}: a name has at most {} characters, got {}", what, kMaxNameLength,
                                            name.size()));
  }
  if (name.front() == '.') {
    return InvalidArgumentError(fmt::format("{}: '{}': a name must not start with '.'", what, name));
  }
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-' || c == ':';
    if (!ok) {
      return InvalidArgumentError(fmt::format(
          "{}: {:?} has the character {:?}; names use letters, digits, '.', '_', '-' and ':'", what, name, c));
    }
  }
  return OkStatus();
}

Status CheckNodeSpec(const Node& node) {
  MERIDIAN_RETURN_IF_ERROR(CheckName(node.name, "node name"));
  auto bad = [&](std::string_view field, std::string_view want) {
    return InvalidArgumentError(fmt::format("node '{}': {}: {}", node.name, field, want));
  };
  if (node.cpu_milli <= 0 || node.cpu_milli > kMaxNodeCpuMilli) {
    return bad("cpu", fmt::format("expected 1m to {} cores, got {}m", kMaxNodeCpuMilli / 1000, node.cpu_milli));
  }
  if (node.memory_bytes <= 0 || node.memory_bytes > kMaxNodeMemoryBytes) {
    return bad("memory", fmt::format("expected 1 byte to 64 TiB, got {} bytes", node.memory_bytes));
  }
  if (node.disk_bytes < 0 || node.disk_bytes > kMaxNodeDiskBytes) {
    return bad("disk", fmt::format("expected 0 to 1 PiB, got {} bytes", node.disk_bytes));
  }
  if (node.price_micro_usd_per_hour < 0 || node.price_micro_usd_per_hour > kMaxNodePriceMicroUsdPerHour) {
    return bad("price", fmt::format("expected $0 to $10000 an hour, got {} micro-USD", node.price_micro_usd_per_hour));
  }
  if (node.devices.size() > kMaxNodeDevices) {
    return bad("devices", fmt::format("at most {} devices, got {}", kMaxNodeDevices, node.devices.size()));
  }
  for (size_t i = 0; i < node.devices.size(); ++i) {
    const Device& d = node.devices[i];
    const std::string at = fmt::format("devices[{}]", i);
    if (d.type.empty() || d.type.size() > 64) return bad(at, "a device type of 1 to 64 characters");
    if (d.memory_bytes < 0 || d.memory_bytes > kMaxDeviceMemoryBytes) {
      return bad(at, fmt::format("memory: expected 0 to 4 TiB, got {} bytes", d.memory_bytes));
    }
    if (!std::isfinite(d.speed_factor) || d.speed_factor <= 0 || d.speed_factor > 1000) {
      return bad(at, fmt::format("speed: expected a number above 0 and at most 1000, got {}", d.speed_factor));
    }
  }
  if (node.labels.size() > kMaxNodeLabels) {
    return bad("labels", fmt::format("at most {} labels, got {}", kMaxNodeLabels, node.labels.size()));
  }
  for (const auto& [k, v] : node.labels) {
    if (k.empty() || k.size() > 253 || v.size() > 1024) {
      return bad("labels", fmt::format("label {:?}: keys have 1 to 253 characters, values at most 1024", k));
    }
  }
  return OkStatus();
}

}  // namespace meridian::model
