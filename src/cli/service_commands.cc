// meridian serve | services | service get|scale|delete (docs/serving.md, "Services").
//
// A service is the set of its replica jobs: replica k in region R is the job
// "serve/NAME/R/k", one task running `meridian replica` on port + k of its node. The
// jobs carry the service's spec and its replicas' secrets (token, TLS credentials) in their environment, so
// scaling starts replicas like the first ones; the coordinator holds no service
// object of its own.
#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/table.h"
#include "client/client.h"
#include "security/pki.h"
#include "spec/service_spec.h"
#include "workloads/serving/gateway.h"

namespace meridian::cli {
namespace {

using nlohmann::json;

// A service's TLS credentials outlive any run of it; `meridian serve` after `service
// delete` makes new ones.
constexpr int64_t kServiceCredentialsValidUs = int64_t{10} * 365 * 24 * 3600 * 1'000'000;

// Undoes a half-done change (best effort): cancels the jobs and deletes them, so no
// trace is left; says how many went.
int UndoSubmitted(client::Client& c, const std::vector<uint64_t>& jobs) {
  int undone = 0;
  for (uint64_t id : jobs) undone += c.Cancel(id).ok() && c.Delete(id).ok() ? 1 : 0;
  return undone;
}

// The cluster's checks of a region's replica jobs (the region, the model, the
// resources) before any is submitted: a plan of the first one.
Status CheckRegion(client::Client& c, const spec::ServiceSpec& spec, const std::string& region, int32_t ordinal,
                   const spec::ReplicaSecrets& secrets) {
  const std::string name = spec::ReplicaJobName(spec.name, region, ordinal);
  auto plan = c.Plan(spec::ReplicaJobYaml(spec, region, ordinal, secrets), name, "fifo", 1);
  if (!plan.ok()) {
    return Status(plan.status().code(), fmt::format("service '{}', region '{}': {}; nothing was started", spec.name,
                                                    region, plan.status().message()));
  }
  return OkStatus();
}

// Submits replica `ordinal` of `spec` in `region`, as `tenant`'s job (empty: the
// credential's).
StatusOr<uint64_t> SubmitReplica(client::Client& c, const spec::ServiceSpec& spec, const std::string& region,
                                 int32_t ordinal, const spec::ReplicaSecrets& secrets, uint64_t replaces,
                                 const std::string& tenant) {
  const std::string name = spec::ReplicaJobName(spec.name, region, ordinal);
  auto r = c.Submit(spec::ReplicaJobYaml(spec, region, ordinal, secrets, replaces, tenant), name);
  if (!r.ok()) {
    return Status(r.status().code(), fmt::format("service '{}', replica {} in region '{}': {}", spec.name, ordinal,
                                                 region, r.status().message()));
  }
  return r->job_id;
}

const spec::ServiceRegion* FindRegion(const spec::ServiceSpec& spec, const std::string& region) {
  for (const spec::ServiceRegion& r : spec.regions) {
    if (r.region == region) return &r;
  }
  return nullptr;
}

std::string RegionNames(const spec::ServiceSpec& spec) {
  std::string out;
  for (const spec::ServiceRegion& r : spec.regions) out += (out.empty() ? "" : ", ") + r.region;
  return out;
}

Status NoSuchService(const std::string& name) {
  return NotFoundError(fmt::format("no service '{}' runs (meridian services lists them; meridian serve FILE starts one)",
                                   name));
}

// Submits replicas (region, number) in order; on a failure, undoes those it submitted
// and says so.
Status SubmitReplicas(client::Client& c, const spec::ServiceSpec& spec,
                      const std::vector<std::pair<std::string, int32_t>>& replicas, const spec::ReplicaSecrets& secrets,
                      std::vector<uint64_t>* jobs, uint64_t replaces = 0, const std::string& tenant = "") {
  for (const auto& [region, ordinal] : replicas) {
    auto id = SubmitReplica(c, spec, region, ordinal, secrets, replaces, tenant);
    if (!id.ok()) {
      if (jobs->empty()) return id.status();
      const int undone = UndoSubmitted(c, *jobs);
      return Status(id.status().code(), fmt::format("{} (the {} replica jobs submitted before it: {} cancelled and "
                                                    "deleted)",
                                                    id.status().message(), jobs->size(), undone));
    }
    jobs->push_back(*id);
  }
  return OkStatus();
}

}  // namespace

StatusOr<spec::ServiceOfReplica> ServiceOf(client::Client& c, const ServiceReplica& r) {
  MERIDIAN_ASSIGN_OR_RETURN(auto job_spec, c.JobSpec(r.job));
  return spec::ServiceFromReplicaJob(job_spec.first, fmt::format("job {} ({})", r.job, r.job_name));
}

StatusOr<LiveService> FindService(client::Client& c, const std::string& name, bool with_tasks) {
  LiveService s;
  MERIDIAN_ASSIGN_OR_RETURN(s.replicas, ListServiceReplicas(c, name, with_tasks));
  if (s.replicas.empty()) return NoSuchService(name);
  MERIDIAN_ASSIGN_OR_RETURN(s.service, ServiceOf(c, s.replicas.front()));
  return s;
}

StatusOr<std::vector<ServiceReplica>> ListServiceReplicas(client::Client& c, const std::string& service,
                                                          bool with_tasks) {
  // Only the service's live replica jobs come back, not every job the cluster keeps.
  MERIDIAN_ASSIGN_OR_RETURN(std::vector<model::JobSummary> jobs,
                            c.ListJobs(0, spec::ReplicaJobNamePrefix(service), /*live_only=*/true));
  std::vector<ServiceReplica> out;
  for (const model::JobSummary& s : jobs) {
    if (model::IsTerminal(s.job.status)) continue;
    std::optional<spec::ReplicaJobId> id = spec::ParseReplicaJobName(s.job.name);
    if (!id || (!service.empty() && id->service != service)) continue;
    ServiceReplica r;
    r.job = s.job.id;
    r.job_name = s.job.name;
    r.tenant = s.job.tenant;
    r.service = id->service;
    r.region = id->region;
    r.ordinal = id->ordinal;
    r.job_status = s.job.status;
    out.push_back(std::move(r));
  }
  // A service is one tenant's: its oldest live replica job's. The coordinator refuses a
  // replica job of another tenant under the name of a service that runs; replica jobs
  // of another tenant under the same name (submitted before it did) are left out here,
  // so that no gateway mixes them in (their secrets, their tenant) nor counts them.
  std::map<std::string, std::pair<uint64_t, std::string>> owner;  // service -> (oldest job, its tenant)
  for (const ServiceReplica& r : out) {
    auto [it, added] = owner.try_emplace(r.service, r.job, r.tenant);
    if (!added && r.job < it->second.first) it->second = {r.job, r.tenant};
  }
  std::erase_if(out, [&owner](const ServiceReplica& r) { return r.tenant != owner[r.service].second; });
  std::sort(out.begin(), out.end(), [](const ServiceReplica& a, const ServiceReplica& b) {
    return std::tie(a.service, a.ordinal, a.job) < std::tie(b.service, b.ordinal, b.job);
  });
  if (!with_tasks || out.empty()) return out;
  MERIDIAN_ASSIGN_OR_RETURN(std::vector<model::NodeView> nodes, c.Nodes());
  std::map<std::string, const model::NodeView*> by_name;
  for (const model::NodeView& n : nodes) by_name[n.node.name] = &n;
  for (ServiceReplica& r : out) {
    auto view = c.GetJob(r.job, true);
    if (!view.ok()) {
      if (view.status().code() == StatusCode::kNotFound) continue;  // deleted since the list
      return view.status();
    }
    if (view->tasks.empty()) continue;
    const model::TaskRecord& t = view->tasks.front().record;
    r.task_status = t.status;
    r.attempt = t.attempt;
    r.node = t.node;
    r.site = t.site;
    auto n = by_name.find(t.node);
    if (n != by_name.end()) {
      r.host = n->second->host;
      r.node_alive = n->second->alive;
    }
  }
  return out;
}

StatusOr<bool> CancelReplicaJob(client::Client& c, uint64_t job) {
  auto cancelled = c.Cancel(job);
  if (cancelled.ok()) return true;
  const StatusCode code = cancelled.status().code();
  if (code == StatusCode::kFailedPrecondition || code == StatusCode::kNotFound) return false;
  return cancelled.status();
}

StatusOr<std::vector<uint64_t>> AddReplicas(client::Client& c, const spec::ServiceSpec& spec,
                                            const spec::ReplicaSecrets& secrets,
                                            const std::string& region, int32_t count,
                                            const std::vector<ServiceReplica>& live, uint64_t replaces) {
  // New replicas take the lowest numbers no live replica of the service has.
  std::set<int32_t> used;
  for (const ServiceReplica& r : live) used.insert(r.ordinal);
  std::vector<std::pair<std::string, int32_t>> replicas;
  int32_t ordinal = 0;
  for (int32_t k = 0; k < count; ++k) {
    while (used.count(ordinal) > 0) ++ordinal;
    used.insert(ordinal);
    replicas.emplace_back(region, ordinal);
  }
  // They are the service's tenant's (ListServiceReplicas keeps that tenant's alone).
  std::vector<uint64_t> submitted;
  MERIDIAN_RETURN_IF_ERROR(
      SubmitReplicas(c, spec, replicas, secrets, &submitted, replaces, live.empty() ? "" : live.front().tenant));
  return submitted;
}

Status RunServe(const ServeOptions& o, std::ostream& out) {
  MERIDIAN_ASSIGN_OR_RETURN(spec::ServiceSpec spec, spec::LoadServiceSpec(o.file));
  MERIDIAN_ASSIGN_OR_RETURN(auto c, ConnectClient(o.target));
  MERIDIAN_ASSIGN_OR_RETURN(std::vector<ServiceReplica> live, ListServiceReplicas(*c, spec.name, false));
  if (!live.empty()) {
    return FailedPreconditionError(fmt::format(
        "service '{}' runs already ({} replicas): change it with `meridian service scale`, or `meridian service "
        "delete {}` first",
        spec.name, live.size(), spec.name));
  }
  // The replicas' secrets: a token for their callers, and the service's own TLS
  // credentials (docs/serving.md, "TLS to the replicas"); and its clients' token at the
  // sites' gateways ("Who may call a service").
  spec::ReplicaSecrets secrets;
  MERIDIAN_ASSIGN_OR_RETURN(secrets.token, security::RandomHex(16));
  MERIDIAN_ASSIGN_OR_RETURN(secrets.client_token, security::RandomHex(32));
  MERIDIAN_ASSIGN_OR_RETURN(serving::ServiceCredentials tls,
                            serving::MakeServiceCredentials(spec.name, kServiceCredentialsValidUs));
  secrets.tls_ca_pem = std::move(tls.ca_pem);
  secrets.tls_cert_pem = std::move(tls.cert_pem);
  secrets.tls_key_pem = std::move(tls.key_pem);
  int32_t first = 0;
  for (const spec::ServiceRegion& region : spec.regions) {
    MERIDIAN_RETURN_IF_ERROR(CheckRegion(*c, spec, region.region, first, secrets));
    first += region.min;
  }
  std::vector<std::pair<std::string, int32_t>> replicas;
  for (const spec::ServiceRegion& region : spec.regions) {
    for (int32_t k = 0; k < region.min; ++k) replicas.emplace_back(region.region, static_cast<int32_t>(replicas.size()));
  }
  std::vector<uint64_t> submitted;
  MERIDIAN_RETURN_IF_ERROR(SubmitReplicas(*c, spec, replicas, secrets, &submitted));
  json regions = json::array();
  for (const spec::ServiceRegion& region : spec.regions) {
    json jobs = json::array();
    for (size_t i = 0; i < replicas.size(); ++i) {
      if (replicas[i].first == region.region) jobs.push_back(submitted[i]);
    }
    regions.push_back({{"region", region.region}, {"min", region.min}, {"max", region.max}, {"jobs", jobs}});
  }
  if (o.json) {
    out << json{{"service", spec.name}, {"replicas", submitted.size()}, {"regions", regions}}.dump(2) << '\n';
    return OkStatus();
  }
  out << fmt::format("service '{}': {} replicas submitted\n", spec.name, submitted.size());
  for (const json& r : regions) {
    out << fmt::format("  {}: jobs {} (min {}, max {})\n", r["region"].get<std::string>(), r["jobs"].dump(),
                       r["min"].get<int>(), r["max"].get<int>());
  }
  out << fmt::format("  meridian service get {}   # where they run\n", spec.name);
  out << fmt::format("  meridian service token {}   # its clients' token at the sites' gateways\n", spec.name);
  return OkStatus();
}

Status RunServices(const ServicesOptions& o, std::ostream& out) {
  MERIDIAN_ASSIGN_OR_RETURN(auto c, ConnectClient(o.target));
  MERIDIAN_ASSIGN_OR_RETURN(std::vector<ServiceReplica> live, ListServiceReplicas(*c, "", true));
  // service -> region -> (replicas, running)
  std::map<std::string, std::map<std::string, std::pair<int, int>>> services;
  for (const ServiceReplica& r : live) {
    auto& [replicas, running] = services[r.service][r.region];
    ++replicas;
    running += r.Serving() ? 1 : 0;
  }
  if (o.json) {
    json j = json::array();
    for (const auto& [name, regions] : services) {
      json rs = json::array();
      for (const auto& [region, n] : regions) rs.push_back({{"region", region}, {"replicas", n.first}, {"running", n.second}});
      j.push_back({{"name", name}, {"regions", rs}});
    }
    out << JsonText(j) << '\n';
    return OkStatus();
  }
  if (services.empty()) {
    out << "no services (meridian serve SERVICE.yaml starts one)\n";
    return OkStatus();
  }
  Table t({"service", "region", "replicas", "running"});
  for (const auto& [name, regions] : services) {
    for (const auto& [region, n] : regions) t.Add({name, region, std::to_string(n.first), std::to_string(n.second)});
  }
  t.Print(out);
  return OkStatus();
}

Status RunServiceGet(const ServiceOptions& o, std::ostream& out) {
  MERIDIAN_ASSIGN_OR_RETURN(auto c, ConnectClient(o.target));
  MERIDIAN_ASSIGN_OR_RETURN(LiveService found, FindService(*c, o.name, true));
  const std::vector<ServiceReplica>& live = found.replicas;
  const spec::ServiceSpec& spec = found.service.spec;
  json replicas = json::array();
  Table t({"replica", "region", "job", "state", "node", "site", "endpoint", "attempt"});
  for (const ServiceReplica& r : live) {
    const std::string state(r.task_status ? model::TaskStatusName(*r.task_status) : model::JobStatusName(r.job_status));
    const std::string endpoint = r.Serving() ? fmt::format("{}:{}", r.host, spec.port + r.ordinal) : "";
    replicas.push_back({{"replica", r.ordinal}, {"region", r.region}, {"job", r.job}, {"state", state},
                        {"node", r.node}, {"site", r.site}, {"endpoint", endpoint}, {"attempt", r.attempt}});
    t.Add({std::to_string(r.ordinal), r.region, std::to_string(r.job), state, r.node.empty() ? "-" : r.node,
           r.site.empty() ? "-" : r.site, endpoint.empty() ? "-" : endpoint, std::to_string(r.attempt)});
  }
  json regions = json::array();
  for (const spec::ServiceRegion& region : spec.regions) {
    regions.push_back({{"region", region.region}, {"min", region.min}, {"max", region.max}});
  }
  if (o.json) {
    json j{{"name", spec.name}, {"port", spec.port}, {"regions", regions}, {"replicas", replicas}};
    // A caller of the replicas themselves checks their certificate with the CA.
    const spec::ReplicaSecrets& secrets = found.service.secrets;
    j["tls"] = secrets.tls() ? json{{"name", serving::ServiceTlsName(spec.name)}, {"ca", secrets.tls_ca_pem}} : json();
    if (spec.command.empty()) {
      j["model"] = spec.model;
    } else {
      j["command"] = spec.command;
      j["health"] = spec.health_path;
    }
    out << JsonText(j) << '\n';
    return OkStatus();
  }
  const std::string handler =
      spec.command.empty() ? "model " + spec.model : fmt::format("command `{}` (health {})", spec.command, spec.health_path);
  out << fmt::format("service {}: {}, replica k on port {} + k ({}), regions {}\n", spec.name, handler, spec.port,
                     found.service.secrets.tls()
                         ? fmt::format("HTTPS as {}; --json has its CA", serving::ServiceTlsName(spec.name))
                         : "plain HTTP",
                     RegionNames(spec));
  t.Print(out);
  return OkStatus();
}

Status RunServiceToken(const ServiceOptions& o, std::ostream& out) {
  MERIDIAN_ASSIGN_OR_RETURN(auto c, ConnectClient(o.target));
  MERIDIAN_ASSIGN_OR_RETURN(LiveService found, FindService(*c, o.name, false));
  const std::string& token = found.service.secrets.client_token;
  if (token.empty()) {
    return FailedPreconditionError(fmt::format(
        "service '{}' was served before services had their own clients' token: only a gateway's own token reaches "
        "it; `meridian service delete {}` and serve it again for one",
        o.name, o.name));
  }
  if (o.json) {
    out << json{{"service", o.name}, {"token", token}}.dump(2) << '\n';
  } else {
    out << token << '\n';
  }
  return OkStatus();
}

Status RunServiceScale(const ServiceScaleOptions& o, std::ostream& out) {
  MERIDIAN_ASSIGN_OR_RETURN(auto c, ConnectClient(o.target));
  MERIDIAN_ASSIGN_OR_RETURN(LiveService found, FindService(*c, o.name, false));
  const std::vector<ServiceReplica>& live = found.replicas;
  const spec::ServiceOfReplica& service = found.service;
  const spec::ServiceSpec& spec = service.spec;
  const spec::ServiceRegion* region = FindRegion(spec, o.region);
  if (region == nullptr) {
    return InvalidArgumentError(
        fmt::format("--region '{}': service '{}' has no such region (it has {})", o.region, o.name, RegionNames(spec)));
  }
  if (o.replicas < region->min || o.replicas > region->max) {
    return InvalidArgumentError(fmt::format("--replicas {}: region '{}' of service '{}' takes {} to {}", o.replicas,
                                            o.region, o.name, region->min, region->max));
  }
  std::vector<const ServiceReplica*> here;
  for (const ServiceReplica& r : live) {
    if (r.region == o.region) here.push_back(&r);
  }
  if (o.replicas == 0 && here.size() == live.size()) {
    return FailedPreconditionError(fmt::format(
        "--replicas 0 would leave service '{}' without a replica (`meridian service delete {}` ends it)", o.name,
        o.name));
  }
  const int32_t now = static_cast<int32_t>(here.size());
  if (o.replicas > now) {
    MERIDIAN_RETURN_IF_ERROR(CheckRegion(*c, spec, o.region, 0, service.secrets));
    MERIDIAN_RETURN_IF_ERROR(AddReplicas(*c, spec, service.secrets, o.region, o.replicas - now, live).status());
  } else {
    // The newest replicas go first (the highest numbers).
    std::sort(here.begin(), here.end(), [](const ServiceReplica* a, const ServiceReplica* b) {
      return a->ordinal > b->ordinal;
    });
    for (int32_t k = 0; k < now - o.replicas; ++k) {
      auto cancelled = c->Cancel(here[static_cast<size_t>(k)]->job);
      if (!cancelled.ok()) return cancelled.status();
    }
  }
  out << fmt::format("service '{}', region '{}': {} -> {} replicas\n", o.name, o.region, now, o.replicas);
  return OkStatus();
}

// Cancels every live replica job of the service, then reads again until none is left:
// an autoscaling gateway may submit a replica between a read and the cancels (it
// cancels its own when it finds the service ended after it submitted, see
// serving::ScaleUpOutlivedItsService; together, no replica outlives the delete).
Status RunServiceDelete(const ServiceOptions& o, std::ostream& out) {
  constexpr int kMaxRounds = 20;
  MERIDIAN_ASSIGN_OR_RETURN(auto c, ConnectClient(o.target));
  size_t cancelled_jobs = 0;
  for (int round = 0;; ++round) {
    MERIDIAN_ASSIGN_OR_RETURN(std::vector<ServiceReplica> live, ListServiceReplicas(*c, o.name, false));
    if (live.empty()) break;
    if (round == kMaxRounds) {
      return AbortedError(fmt::format(
          "service '{}': {} replica jobs cancelled, yet {} more appeared after {} reads (is something submitting "
          "them? `meridian jobs` lists them); run `meridian service delete {}` again",
          o.name, cancelled_jobs, live.size(), kMaxRounds, o.name));
    }
    for (const ServiceReplica& r : live) {
      MERIDIAN_ASSIGN_OR_RETURN(const bool cancelled, CancelReplicaJob(*c, r.job));
      if (cancelled) ++cancelled_jobs;
    }
  }
  if (cancelled_jobs == 0) return NoSuchService(o.name);
  out << fmt::format("service '{}': its {} replica job{} cancelled\n", o.name, cancelled_jobs,
                     cancelled_jobs == 1 ? "" : "s");
  return OkStatus();
}

}  // namespace meridian::cli
