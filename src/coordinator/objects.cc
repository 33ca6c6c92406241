// The coordinator's directory of objects: which live nodes hold a replica of which
// object, and object names. Agents report what they hold when they register and what
// they gain or drop in heartbeats; a dead node's replicas leave the directory with it.
#include <fmt/format.h>

#include "common/units.h"
#include "coordinator/coordinator.h"

namespace meridian::coordinator {
namespace {

bool LooksLikeId(const std::string& ref) {
  return ref.size() == 32 && ref.find_first_not_of("0123456789abcdef") == std::string::npos;
}

}  // namespace

void Coordinator::AddReplicaLocked(int32_t node, const std::string& id, int64_t size) {
  ObjectRt& o = objects_[id];
  o.size = size;
  o.nodes.insert(node);
  nodes_[node].objects.insert(id);
}

void Coordinator::DropReplicaLocked(int32_t node, const std::string& id) {
  nodes_[node].objects.erase(id);
  auto it = objects_.find(id);
  if (it == objects_.end()) return;
  it->second.nodes.erase(node);
  // A named object stays known (its name says what was lost); an unnamed one is gone.
  if (it->second.nodes.empty() && it->second.name.empty()) objects_.erase(it);
}

void Coordinator::DropAllReplicasLocked(int32_t node) {
  std::set<std::string> held;
  held.swap(nodes_[node].objects);
  for (const std::string& id : held) DropReplicaLocked(node, id);
}

model::ObjectLocation Coordinator::LocationLocked(const std::string& id, const ObjectRt& object) const {
  model::ObjectLocation l{id, object.name, object.size, {}};
  for (int32_t n : object.nodes) {
    const NodeRt& rt = nodes_[n];
    if (!rt.alive) continue;
    l.replicas.push_back(model::ObjectReplica{static_cast<uint32_t>(n), fleet_.nodes[n].name, rt.site,
                                              rt.transfer_address});
  }
  return l;
}

std::vector<model::EmulatedLink> Coordinator::LinksFrom(SiteId site) const {
  std::vector<model::EmulatedLink> out;
  for (size_t i = 0; i < fleet_.sites.size(); ++i) {
    SiteId other(static_cast<uint32_t>(i));
    if (other == site) continue;
    const model::Link* link = fleet_.FindLink(site, other);
    if (link == nullptr) continue;
    const bool forward = link->a == site;
    out.push_back(model::EmulatedLink{fleet_.site(other).name, link->rtt_us, link->bandwidth_bps,
                                      forward ? link->egress_a_to_b_micro_usd_per_gb
                                              : link->egress_b_to_a_micro_usd_per_gb});
  }
  return out;
}

StatusOr<model::ObjectLocation> Coordinator::Locate(const std::string& ref) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string id = ref;
  if (auto named = object_names_.find(ref); named != object_names_.end()) {
    id = named->second;
  } else if (!LooksLikeId(ref)) {
    return NotFoundError(fmt::format("no object named '{}'", ref));
  }
  auto it = objects_.find(id);
  if (it == objects_.end()) return NotFoundError(fmt::format("no object {} in the cluster", ref));
  model::ObjectLocation l = LocationLocked(id, it->second);
  if (l.replicas.empty()) {
    return NotFoundError(fmt::format("object {} ({}) was lost: no live node holds a replica", ref, id));
  }
  return l;
}

StatusOr<model::ObjectReplica> Coordinator::PlacePut(int64_t size, const std::string& site) {
  if (size < 0) return InvalidArgumentError("an object's size cannot be negative");
  std::lock_guard<std::mutex> lock(mu_);
  if (!site.empty() && !fleet_.FindSite(site)) {
    std::string known;
    for (const model::Site& s : fleet_.sites) known += (known.empty() ? "" : ", ") + s.name;
    return InvalidArgumentError(fmt::format("unknown site '{}' (sites: {})", site, known));
  }
  // The live node at the site holding the fewest objects, so puts spread out.
  int32_t best = -1;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const NodeRt& rt = nodes_[i];
    if (!rt.alive || rt.transfer_address.empty() || (!site.empty() && rt.site != site)) continue;
    if (best < 0 || rt.objects.size() < nodes_[best].objects.size()) best = static_cast<int32_t>(i);
  }
  if (best < 0) {
    return UnavailableError(site.empty() ? "no live node can store objects"
                                         : fmt::format("no live node at site {} can store objects", site));
  }
  return model::ObjectReplica{static_cast<uint32_t>(best), fleet_.nodes[best].name, nodes_[best].site,
                              nodes_[best].transfer_address};
}

StatusOr<model::ObjectLocation> Coordinator::Commit(const std::string& id, int64_t size, uint32_t node_id,
                                                    const std::string& name) {
  if (!LooksLikeId(id)) return InvalidArgumentError(fmt::format("'{}' is not an object id (32 hex digits)", id));
  if (LooksLikeId(name)) return InvalidArgumentError(fmt::format("name '{}' would read as an object id", name));
  std::lock_guard<std::mutex> lock(mu_);
  if (node_id >= nodes_.size() || !nodes_[node_id].alive) {
    return FailedPreconditionError(fmt::format("node {} is not a live node", node_id));
  }
  if (!name.empty()) {
    auto taken = object_names_.find(name);
    if (taken != object_names_.end() && taken->second != id) {
      return AlreadyExistsError(fmt::format("the name '{}' is taken by object {}", name, taken->second));
    }
  }
  AddReplicaLocked(static_cast<int32_t>(node_id), id, size);
  ObjectRt& o = objects_.at(id);
  if (!name.empty()) {
    object_names_[name] = id;
    o.name = name;
  }
  return LocationLocked(id, o);
}

std::vector<model::ObjectLocation> Coordinator::ListObjects() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<model::ObjectLocation> out;
  for (const auto& [id, o] : objects_) out.push_back(LocationLocked(id, o));
  return out;
}

}  // namespace meridian::coordinator
