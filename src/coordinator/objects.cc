// The coordinator's directory of objects: which live nodes hold a replica of which
// object, and object names. Agents report what they hold when they register and what
// they gain or drop in heartbeats; a dead node's replicas leave the directory with it.
#include <fmt/format.h>

#include "common/logging.h"
#include "common/units.h"
#include "coordinator/coordinator.h"
#include "security/ticket.h"

namespace meridian::coordinator {
namespace {

// How long a ticket lets a client fetch: long enough for a large object over a slow
// link, short enough that a leaked one soon reads nothing.
constexpr int64_t kTicketLifeUs = 3'600'000'000;

Status NotYours(const model::Caller& c, std::string_view what) {
  return PermissionDeniedError(fmt::format("{} is not of tenant '{}': {} may not read it", what, c.tenant, c.Describe()));
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
    if (!Readable(n)) continue;
    l.replicas.push_back(model::ObjectReplica{static_cast<uint32_t>(n), fleet_.nodes[n].name, rt.site,
                                              rt.transfer_address});
  }
  return l;
}

bool Coordinator::MayReadLocked(const model::Caller& caller, const ObjectRt* o) const {
  return caller.SeesAllTenants() || (o != nullptr && o->tenants.count(caller.tenant) > 0);
}

bool Coordinator::NameIsOfLocked(const std::string& name, const std::string& tenant) const {
  auto owner = name_tenants_.find(name);
  return owner != name_tenants_.end() && owner->second == tenant;
}

bool Coordinator::NameIsCallersLocked(const model::Caller& caller, const std::string& name) const {
  return caller.SeesAllTenants() || NameIsOfLocked(name, caller.tenant);
}

std::string Coordinator::ReadTicketLocked(const std::string& tenant, const std::vector<std::string>& ids,
                                          int64_t life_us) const {
  security::Ticket t{security::TicketKind::kRead, tenant, security::UnixNowUs() + life_us, ids, 0};
  // Ids were checked before they reached the directory, and a dataset has fewer
  // shards than a ticket may name; anything else is a bug, answered with no ticket.
  StatusOr<std::string> signed_ticket = security::SignTicket(t, ticket_key_);
  if (!signed_ticket.ok()) {
    MERIDIAN_LOG_ERROR("read ticket: {}", signed_ticket.status().message());
    return "";
  }
  return *std::move(signed_ticket);
}

std::optional<model::Dataset> Coordinator::DatasetForJobLocked(const std::string& name,
                                                              const std::string& tenant) const {
  auto found = datasets_.find(name);
  if (found == datasets_.end() || (!tenant.empty() && !NameIsOfLocked(name, tenant))) return std::nullopt;
  const std::vector<model::HeldObject>& shards = found->second;
  model::Dataset d;
  d.name = name;
  for (size_t i = 0; i < shards.size(); ++i) {
    model::ObjectRef ref;
    ref.name = fmt::format("{}/{}", name, i);
    ref.size_bytes = shards[i].size;
    ref.object_id = shards[i].id;
    if (auto it = objects_.find(shards[i].id); it != objects_.end()) {
      for (const model::ObjectReplica& r : LocationLocked(shards[i].id, it->second).replicas) {
        if (auto site = fleet_.FindSite(r.site)) ref.locations.push_back(*site);
      }
    }
    d.shards.push_back(std::move(ref));
  }
  return d;
}

spec::DatasetResolver Coordinator::DatasetResolverFor(const std::string& tenant) {
  return [this, tenant](const std::string& name) {
    // The raw lock: a job parsed with what this finds is queued to be stored after it.
    std::lock_guard<std::mutex> lock(mu_.raw());
    return DatasetForJobLocked(name, tenant);
  };
}

spec::DatasetResolver Coordinator::DatasetResolverLocked(const std::string& tenant) const {
  return [this, tenant](const std::string& name) { return DatasetForJobLocked(name, tenant); };
}

std::optional<model::ObjectRef> Coordinator::ObjectForJobLocked(const std::string& id,
                                                                const std::string& tenant) const {
  auto it = objects_.find(id);
  if (!model::LooksLikeObjectId(id) || it == objects_.end()) return std::nullopt;
  if (!tenant.empty() && !it->second.tenants.count(tenant)) return std::nullopt;
  model::ObjectRef ref;
  ref.size_bytes = it->second.size;
  ref.object_id = id;
  for (const model::ObjectReplica& r : LocationLocked(id, it->second).replicas) {
    if (auto site = fleet_.FindSite(r.site)) ref.locations.push_back(*site);
  }
  if (ref.locations.empty()) return std::nullopt;  // no live node holds it
  return ref;
}

spec::ObjectResolver Coordinator::ObjectResolverFor(const std::string& tenant) {
  return [this, tenant](const std::string& id) {
    // The raw lock: a job parsed with what this finds is queued to be stored after it.
    std::lock_guard<std::mutex> lock(mu_.raw());
    return ObjectForJobLocked(id, tenant);
  };
}

spec::ObjectResolver Coordinator::AcceptedObjectResolverLocked() const {
  return [this](const std::string& id) -> std::optional<model::ObjectRef> {
    if (std::optional<model::ObjectRef> known = ObjectForJobLocked(id, "")) return known;
    model::ObjectRef ref;  // its agents have not registered again yet
    ref.object_id = id;
    if (auto it = objects_.find(id); it != objects_.end()) ref.size_bytes = it->second.size;
    return ref;
  };
}

void Coordinator::NoteObjectReadersLocked(uint64_t job_id, const model::Job& job) {
  for (const model::Task& t : job.tasks) {
    for (const model::ObjectRef& in : t.inputs) {
      if (in.name.rfind("object://", 0) == 0) object_readers_[in.object_id].insert(job_id);
    }
  }
}

void Coordinator::ForgetObjectReadersLocked(uint64_t job_id) {
  for (auto it = object_readers_.begin(); it != object_readers_.end();) {
    it->second.erase(job_id);
    it = it->second.empty() ? object_readers_.erase(it) : std::next(it);
  }
}

std::vector<model::EmulatedLink> Coordinator::LinksFrom(SiteId site) const {
  std::vector<model::EmulatedLink> out;
  for (size_t i = 0; i < fleet_.sites.size(); ++i) {
    SiteId other(static_cast<uint32_t>(i));
    if (other == site) continue;
    const model::Link* link = fleet_.FindLink(site, other);
    if (link == nullptr) continue;
    const bool forward = link->a == site;
    out.push_back(model::EmulatedLink{fleet_.site(other).name, link->rtt_us,
                                      options_.emulate_wan_bandwidth ? link->bandwidth_bps : 0,
                                      forward ? link->egress_a_to_b_micro_usd_per_gb
                                              : link->egress_b_to_a_micro_usd_per_gb,
                                      link->jitter_us});
  }
  return out;
}

int64_t Coordinator::EgressMicroUsd(const std::string& from, const std::string& to, int64_t bytes) const {
  if (from == to) return 0;
  std::optional<SiteId> a = fleet_.FindSite(from), b = fleet_.FindSite(to);
  if (!a || !b) return 0;
  const model::Link* link = fleet_.FindLink(*a, *b);
  if (link == nullptr) return 0;
  const int64_t per_gb = link->a == *a ? link->egress_a_to_b_micro_usd_per_gb : link->egress_b_to_a_micro_usd_per_gb;
  return static_cast<int64_t>(static_cast<double>(bytes) / 1e9 * static_cast<double>(per_gb));
}

std::vector<model::SiteBytes> Coordinator::InputBytesBySite(const model::Job& job) const {
  std::set<std::string> seen;
  std::map<std::string, int64_t> by_site;
  for (const model::Task& t : job.tasks) {
    for (const model::ObjectRef& in : t.inputs) {
      if (in.locations.empty() || !seen.insert(in.object_id.empty() ? in.name : in.object_id).second) continue;
      by_site[fleet_.site(in.locations.front()).name] += in.size_bytes;
    }
  }
  std::vector<model::SiteBytes> out;
  for (const auto& [site, bytes] : by_site) out.push_back(model::SiteBytes{site, bytes});
  return out;
}

StatusOr<model::ObjectLocation> Coordinator::Locate(const model::Caller& caller, const std::string& ref,
                                                    uint64_t job_id, const std::string& task) {
  // A task's output, through its job: readable by whoever may see the job, even once
  // the job is no longer in memory (read back from the store).
  bool job_output = false;
  if (job_id != 0) {
    if (!model::LooksLikeObjectId(ref)) return InvalidArgumentError("a job's output is named by its object id");
    MERIDIAN_ASSIGN_OR_RETURN(const std::string tenant, JobTenant(job_id));
    if (!caller.SeesAllTenants() && tenant != caller.tenant) {
      return PermissionDeniedError(fmt::format("job {} is not of tenant '{}': {} may not read its outputs", job_id,
                                               caller.tenant, caller.Describe()));
    }
    MERIDIAN_ASSIGN_OR_RETURN(const uint32_t index, FindTaskIndex(job_id, task));
    std::optional<std::string> output_object;
    {
      std::lock_guard lock(mu_);
      auto it = jobs_.find(job_id);
      if (it != jobs_.end() && it->second.job) output_object = it->second.tasks[index].rec.output_object;
    }
    if (!output_object) {  // only in the store now
      MERIDIAN_ASSIGN_OR_RETURN(std::vector<model::TaskView> page, store_->TaskPage(job_id, index, 1, 1));
      output_object = page.empty() ? "" : page.front().record.output_object;
    }
    if (*output_object != ref) {
      return PermissionDeniedError(fmt::format("object {} is not the output of task '{}' of job {}", ref, task, job_id));
    }
    job_output = true;
  }
  std::lock_guard lock(mu_);
  std::string id = ref;
  if (auto named = object_names_.find(ref); named != object_names_.end()) {
    id = named->second;
    if (!NameIsCallersLocked(caller, ref)) return NotYours(caller, fmt::format("object '{}'", ref));
  } else if (!model::LooksLikeObjectId(ref)) {
    return NotFoundError(fmt::format("no object named '{}'", ref));
  }
  auto it = objects_.find(id);
  if (it == objects_.end()) return NotFoundError(fmt::format("no object {} in the cluster", ref));
  if (!job_output && !object_names_.count(ref) && !MayReadLocked(caller, &it->second)) {
    return NotYours(caller, fmt::format("object {}", ref));
  }
  model::ObjectLocation l = LocationLocked(id, it->second);
  if (l.replicas.empty()) {
    return NotFoundError(fmt::format("object {} ({}) was lost: no live node holds a replica", ref, id));
  }
  l.ticket = ReadTicketLocked(caller.tenant, {id}, kTicketLifeUs);
  return l;
}

StatusOr<model::ObjectReplica> Coordinator::PlacePut(const model::Caller& caller, int64_t size,
                                                     const std::string& site) {
  if (size < 0) return InvalidArgumentError("an object's size cannot be negative");
  std::lock_guard lock(mu_);
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
  MERIDIAN_ASSIGN_OR_RETURN(
      std::string signed_ticket,
      security::SignTicket({security::TicketKind::kPut, caller.tenant, security::UnixNowUs() + kTicketLifeUs, {}, size},
                           ticket_key_));
  return model::ObjectReplica{static_cast<uint32_t>(best), fleet_.nodes[best].name, nodes_[best].site,
                              nodes_[best].transfer_address, std::move(signed_ticket)};
}

StatusOr<model::ObjectLocation> Coordinator::Commit(const model::Caller& caller, const std::string& id, int64_t size,
                                                    uint32_t node_id, const std::string& name,
                                                    const std::string& receipt) {
  if (!model::LooksLikeObjectId(id)) return InvalidArgumentError(fmt::format("'{}' is not an object id (32 hex digits)", id));
  if (!name.empty()) MERIDIAN_RETURN_IF_ERROR(model::CheckName(name, "object name"));
  if (model::LooksLikeObjectId(name)) return InvalidArgumentError(fmt::format("name '{}' would read as an object id", name));
  std::lock_guard lock(mu_);
  if (node_id >= nodes_.size() || !nodes_[node_id].alive) {
    return FailedPreconditionError(fmt::format("node {} is not a live node", node_id));
  }
  // The caller may claim an object it put (the receipt says so), or one its tenant
  // reads already; another tenant's object is not to be had by naming its id.
  auto existing = objects_.find(id);
  const bool put_it = security::CheckPutReceipt(ticket_key_, caller.tenant, id, receipt);
  if (!put_it && !caller.SeesAllTenants() && (existing == objects_.end() || !existing->second.tenants.count(caller.tenant))) {
    return PermissionDeniedError(fmt::format(
        "object {}: no put receipt of tenant '{}' for it, and the tenant reads no such object; put it with "
        "`meridian object put`",
        id, caller.tenant));
  }
  if (!put_it && !caller.insecure && !nodes_[node_id].objects.count(id)) {
    return FailedPreconditionError(fmt::format(
        "node {} does not hold object {}, and no put receipt says this client sent it there", node_id, id));
  }
  if (!name.empty()) {
    auto taken = object_names_.find(name);
    if (taken != object_names_.end() && taken->second != id) {
      return AlreadyExistsError(fmt::format("the name '{}' is taken by object {}", name, taken->second));
    }
  }
  if (!name.empty() && datasets_.count(name)) {
    return AlreadyExistsError(fmt::format("the name '{}' is taken by a dataset", name));
  }
  if (!name.empty() && object_names_.count(name) && !NameIsCallersLocked(caller, name)) {
    return NotYours(caller, fmt::format("object '{}'", name));
  }
  if (!name.empty() && !object_names_.count(name)) {
    store::StoreBatch batch;
    batch.names.push_back(model::ObjectName{name, -1, model::HeldObject{id, size}, caller.tenant});
    Commit(std::move(batch));
    name_tenants_[name] = caller.tenant;
  }
  AddReplicaLocked(static_cast<int32_t>(node_id), id, size);
  ObjectRt& o = objects_.at(id);
  o.tenants.insert(caller.tenant);
  // A put (its receipt, or a trusted plaintext client's word): one reference on that
  // node, which DeleteObject may undo.
  if (put_it || caller.insecure) o.puts[caller.tenant].push_back(static_cast<int32_t>(node_id));
  if (!name.empty()) {
    object_names_[name] = id;
    o.name = name;
  }
  model::ObjectLocation l = LocationLocked(id, o);
  l.ticket = ReadTicketLocked(caller.tenant, {id}, kTicketLifeUs);
  return l;
}

void Coordinator::LoadNames(const std::vector<model::ObjectName>& names) {
  for (const model::ObjectName& n : names) {
    name_tenants_[n.name] = n.tenant;
    if (n.shard < 0) {
      object_names_[n.name] = n.object.id;
      ObjectRt& o = objects_[n.object.id];
      o.size = n.object.size;
      o.name = n.name;
      o.tenants.insert(n.tenant);
      continue;
    }
    objects_[n.object.id].tenants.insert(n.tenant);
    dataset_objects_.insert(n.object.id);
    std::vector<model::HeldObject>& shards = datasets_[n.name];
    if (shards.size() <= static_cast<size_t>(n.shard)) shards.resize(n.shard + 1);
    shards[n.shard] = n.object;
  }
}

Status Coordinator::CheckOutputDatasetsLocked(const model::Job& job, const std::string& spec_name) const {
  for (const model::Task& t : job.tasks) {
    const std::string& name = t.output_dataset;
    if (name.empty() || t.index > 0) continue;  // each task's copies once
    if (datasets_.count(name) || object_names_.count(name)) {
      return InvalidArgumentError(fmt::format("{}: task '{}': output_dataset '{}': the name is taken (names are never "
                                              "reused); choose another",
                                              spec_name, t.name, name));
    }
    if (auto r = output_datasets_reserved_.find(name); r != output_datasets_reserved_.end()) {
      return InvalidArgumentError(fmt::format("{}: task '{}': output_dataset '{}': job {}, still running, writes it",
                                              spec_name, t.name, name, r->second));
    }
  }
  return OkStatus();
}

void Coordinator::ReserveOutputDatasetsLocked(uint64_t job_id, const model::Job& job) {
  for (const model::Task& t : job.tasks) {
    if (!t.output_dataset.empty()) output_datasets_reserved_.emplace(t.output_dataset, job_id);
  }
}

void Coordinator::ReleaseOutputDatasetsLocked(uint64_t job_id) {
  std::erase_if(output_datasets_reserved_, [&](const auto& e) { return e.second == job_id; });
}

Status Coordinator::DefineOutputDatasetsLocked(JobRt& job, store::StoreBatch& batch) {
  if (!job.job) return OkStatus();
  std::map<std::string, std::vector<model::HeldObject>> made;  // by name, shards in task order
  for (size_t i = 0; i < job.tasks.size(); ++i) {
    const model::Task& spec = job.job->tasks[i];
    if (spec.output_dataset.empty()) continue;
    const TaskRt& t = job.tasks[i];
    const std::string& id = t.rec.output_object;
    if (id.empty()) {
      return FailedPreconditionError(fmt::format("output_dataset '{}': task '{}' wrote no output (a dataset's shard "
                                                 "is a task's output, kept as an object on its node)",
                                                 spec.output_dataset, spec.name));
    }
    auto o = objects_.find(id);
    if (o == objects_.end() || !HasLiveReplicaLocked(id)) {
      return FailedPreconditionError(fmt::format("output_dataset '{}': the output of task '{}' was lost with node {}",
                                                 spec.output_dataset, spec.name, t.rec.node));
    }
    made[spec.output_dataset].push_back(model::HeldObject{id, o->second.size});
  }
  for (const auto& [name, shards] : made) {
    if (datasets_.count(name) || object_names_.count(name)) {
      return FailedPreconditionError(fmt::format("output_dataset '{}': the name was taken while the job ran", name));
    }
  }
  for (auto& [name, shards] : made) {
    for (size_t i = 0; i < shards.size(); ++i) {
      batch.names.push_back(model::ObjectName{name, static_cast<int32_t>(i), shards[i], job.rec.tenant});
      objects_[shards[i].id].tenants.insert(job.rec.tenant);
      dataset_objects_.insert(shards[i].id);
    }
    name_tenants_[name] = job.rec.tenant;
    MERIDIAN_LOG_INFO("job {} made dataset {} ({} shards)", job.rec.id, name, shards.size());
    datasets_[name] = std::move(shards);
  }
  return OkStatus();
}

model::DatasetView Coordinator::DatasetLocked(const std::string& name) const {
  model::DatasetView d{name, {}};
  for (const model::HeldObject& shard : datasets_.at(name)) {
    auto it = objects_.find(shard.id);
    d.shards.push_back(it != objects_.end() ? LocationLocked(shard.id, it->second)
                                            : model::ObjectLocation{shard.id, "", shard.size, {}});
  }
  return d;
}

StatusOr<model::DatasetView> Coordinator::DefineDataset(const model::Caller& caller, const std::string& name,
                                                        const std::vector<model::HeldObject>& shards) {
  MERIDIAN_RETURN_IF_ERROR(model::CheckName(name, "dataset name"));
  if (model::LooksLikeObjectId(name)) return InvalidArgumentError(fmt::format("dataset name '{}' would read as an object id", name));
  if (shards.empty()) return InvalidArgumentError("a dataset needs at least one shard");
  std::lock_guard lock(mu_);
  if (datasets_.count(name) || object_names_.count(name)) {
    return AlreadyExistsError(fmt::format("the name '{}' is taken; dataset names are never reused", name));
  }
  store::StoreBatch batch;
  for (size_t i = 0; i < shards.size(); ++i) {
    auto o = objects_.find(shards[i].id);
    if (!HasLiveReplicaLocked(shards[i].id) || !MayReadLocked(caller, o == objects_.end() ? nullptr : &o->second)) {
      return FailedPreconditionError(fmt::format("shard {} ({}) is not in the cluster: put it first", i, shards[i].id));
    }
    batch.names.push_back(model::ObjectName{name, static_cast<int32_t>(i),
                                            model::HeldObject{shards[i].id, o->second.size}, caller.tenant});
  }
  std::vector<model::HeldObject>& stored = datasets_[name];
  for (const model::ObjectName& n : batch.names) stored.push_back(n.object);
  Commit(std::move(batch));
  name_tenants_[name] = caller.tenant;
  for (const model::HeldObject& shard : shards) {
    objects_[shard.id].tenants.insert(caller.tenant);
    dataset_objects_.insert(shard.id);
  }
  return DatasetLocked(name);
}

StatusOr<model::DatasetView> Coordinator::GetDataset(const model::Caller& caller, const std::string& name) {
  std::lock_guard lock(mu_);
  if (!datasets_.count(name)) return NotFoundError(fmt::format("no dataset '{}'", name));
  if (!NameIsCallersLocked(caller, name)) {
    return NotYours(caller, fmt::format("dataset '{}'", name));
  }
  model::DatasetView d = DatasetLocked(name);
  std::vector<std::string> ids;
  for (const model::ObjectLocation& shard : d.shards) ids.push_back(shard.id);
  const std::string ticket = ReadTicketLocked(caller.tenant, ids, kTicketLifeUs);
  for (model::ObjectLocation& shard : d.shards) shard.ticket = ticket;
  return d;
}

std::vector<model::DatasetView> Coordinator::ListDatasets(const model::Caller& caller) {
  std::lock_guard lock(mu_);
  std::vector<model::DatasetView> out;
  for (const auto& [name, shards] : datasets_) {
    if (NameIsCallersLocked(caller, name)) out.push_back(DatasetLocked(name));
  }
  return out;
}

StatusOr<model::ObjectLocation> Coordinator::DeleteObject(const model::Caller& caller, const std::string& id) {
  if (!model::LooksLikeObjectId(id)) {
    return InvalidArgumentError(fmt::format("'{}' is not an object id (32 hex digits); objects are deleted by id", id));
  }
  std::lock_guard lock(mu_);
  auto it = objects_.find(id);
  if (it == objects_.end()) return NotFoundError(fmt::format("no object {} in the cluster", id));
  if (!MayReadLocked(caller, &it->second)) return NotYours(caller, fmt::format("object {}", id));
  ObjectRt& o = it->second;
  if (dataset_objects_.count(id)) {
    return FailedPreconditionError(fmt::format("object {} is a shard of a dataset; datasets are kept for good", id));
  }
  if (!o.name.empty()) {
    return FailedPreconditionError(fmt::format("object {} is named '{}'; named objects are kept (names are never "
                                               "reused)", id, o.name));
  }
  auto mine = o.puts.find(caller.tenant);
  if (mine == o.puts.end() || mine->second.empty()) {
    return FailedPreconditionError(fmt::format(
        "{} has no put of object {} to undo (only puts since the coordinator last started are; a task's output goes "
        "with its job: meridian delete JOB)",
        caller.tenant.empty() ? std::string("this client") : fmt::format("tenant '{}'", caller.tenant), id));
  }
  size_t puts = 0;
  for (const auto& [tenant, nodes] : o.puts) puts += nodes.size();
  if (auto readers = object_readers_.find(id); puts == 1 && readers != object_readers_.end()) {
    // The last put: an unfinished job that reads it would lose its input.
    return FailedPreconditionError(fmt::format("job {} reads object {} (object://{}) and has not finished; delete "
                                               "the object after it ends",
                                               *readers->second.begin(), id, id));
  }
  const int32_t node = mine->second.back();
  mine->second.pop_back();
  if (mine->second.empty()) o.puts.erase(mine);
  model::ObjectLocation l = LocationLocked(id, o);
  if (node >= 0 && static_cast<size_t>(node) < nodes_.size() && nodes_[node].alive) {
    // The node drops its reference; once none is left it drops the object and says
    // so in its heartbeat, which takes the replica out of the directory.
    OutboxLocked(node).release_objects.push_back(id);
    FlushOutboxesLocked();
  }
  return l;
}

std::vector<model::ObjectLocation> Coordinator::ListObjects(const model::Caller& caller) {
  std::lock_guard lock(mu_);
  std::vector<model::ObjectLocation> out;
  for (const auto& [id, o] : objects_) {
    if (MayReadLocked(caller, &o)) out.push_back(LocationLocked(id, o));
  }
  return out;
}

}  // namespace meridian::coordinator
