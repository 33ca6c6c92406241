#include "coordinator/http_api.h"

#include <charconv>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/logging.h"
#include "http/client.h"
#include "http/metrics.h"

namespace meridian::coordinator {
namespace {

// An agent's /metrics answer is at most this large.
constexpr size_t kMaxNodeMetricsBytes = 16 << 20;
constexpr int64_t kNodeMetricsTimeoutUs = 5'000'000;

http::Response Refuse(const http::Request& r, int status, const std::string& why) {
  return http::Refused(r, status, why, true);
}

// Whether the request may read the whole cluster's figures: nullopt if so, else the
// refusal.
std::optional<http::Response> CheckMonitor(Coordinator& coord, const http::Request& r, bool insecure) {
  if (insecure) return std::nullopt;
  if (r.peer_certificate.rfind("monitor:", 0) == 0) return std::nullopt;
  if (r.bearer_token.empty()) {
    return Refuse(r, 401,
                  "metrics need a monitoring certificate of the cluster's CA (meridian certs issue monitor --name "
                  "NAME) or an admin's token (Authorization: Bearer ...)");
  }
  StatusOr<model::Caller> caller = coord.Authenticate(r.bearer_token);
  if (!caller.ok()) return Refuse(r, 401, std::string(caller.status().message()));
  if (caller->role != model::Role::kAdmin) {
    return Refuse(r, 403,
                  fmt::format("{} may not read metrics: they are every tenant's (an admin's token, or a monitoring "
                              "certificate)",
                              caller->Describe()));
  }
  return std::nullopt;
}

// Reads node `name`'s /metrics from its agent: over TLS with the coordinator's
// certificate, the agent proving the certificate of that node (no host name: a
// node's certificate names the node).
StatusOr<http::Response> FetchNodeMetrics(Coordinator& coord, const security::TlsContext* tls,
                                          const std::string& name) {
  MERIDIAN_ASSIGN_OR_RETURN(auto where, coord.NodeMetricsUrl(name));
  // The agent's listener, as it gave it when it registered: no path of its own.
  const std::string& url = where.first;
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos || url.find('/', scheme + 3) != std::string::npos) {
    return FailedPreconditionError(fmt::format("node '{}' gave a metrics URL that is not SCHEME://HOST:PORT: {}", name, url));
  }
  StatusOr<http::Response> got =
      http::GetUrl(url, tls, "node:" + name, "/metrics", kMaxNodeMetricsBytes, kNodeMetricsTimeoutUs);
  if (!got.ok()) return got.status().WithPrefix(fmt::format("node '{}'", name));
  return got;
}

// The dashboard's reader: a user's token (any role but a join token's), or anyone on
// an insecure coordinator. Else the refusal.
StatusOr<model::Caller> CheckUser(Coordinator& coord, const http::Request& r, bool insecure, http::Response* refused) {
  if (insecure) return model::Caller{"", "", model::Role::kAdmin, "", true};
  if (r.bearer_token.empty()) {
    *refused = Refuse(r, 401, "the dashboard's data needs a user's token (Authorization: Bearer mrd_...)");
    return UnauthenticatedError("no token");
  }
  StatusOr<model::Caller> caller = coord.Authenticate(r.bearer_token);
  if (!caller.ok()) {
    *refused = Refuse(r, 401, std::string(caller.status().message()));
    return caller.status();
  }
  if (caller->role == model::Role::kAgent) {
    *refused = Refuse(r, 403, "a join token reads nothing");
    return PermissionDeniedError("join token");
  }
  return caller;
}

http::Response JsonResponse(const nlohmann::json& j) {
  http::Response out;
  out.content_type = "application/json";
  out.body = j.dump();
  out.headers.emplace_back("Cache-Control", "no-store");
  return out;
}

nlohmann::json SummaryJson(const model::JobSummary& s) {
  return {{"id", s.job.id},
          {"name", s.job.name},
          {"tenant", s.job.tenant},
          {"status", model::JobStatusName(s.job.status)},
          {"reason", s.job.reason},
          {"submitted_us", s.job.submitted_us},
          {"finished_us", s.job.finished_us},
          {"tasks", s.tasks_total},
          {"waiting", s.waiting},
          {"running", s.running},
          {"succeeded", s.succeeded},
          {"failed", s.failed},
          {"cancelled", s.cancelled},
          {"retries", s.retries}};
}

// Sites, links with what crossed them, nodes with what they hold, and the caller's
// newest jobs: the dashboard's main view.
nlohmann::json Overview(Coordinator& coord, const model::Caller& caller) {
  const model::Fleet fleet = coord.SitesAndLinks();
  const std::vector<model::NodeView> nodes = coord.ListNodes();
  nlohmann::json out;
  out["user"] = caller.insecure ? "(insecure coordinator)" : caller.Describe();
  nlohmann::json sites = nlohmann::json::array();
  for (const model::Site& s : fleet.sites) {
    sites.push_back({{"name", s.name},
                     {"kind", model::SiteKindName(s.kind)},
                     {"provider", s.provider},
                     {"region", s.region},
                     {"egress_usd_per_gb", static_cast<double>(s.egress_micro_usd_per_gb) / 1e6}});
  }
  out["sites"] = sites;
  nlohmann::json links = nlohmann::json::array();
  for (const model::Link& l : fleet.links) {
    links.push_back({{"a", fleet.site(l.a).name},
                     {"b", fleet.site(l.b).name},
                     {"rtt_ms", static_cast<double>(l.rtt_us) / 1000},
                     {"jitter_ms", static_cast<double>(l.jitter_us) / 1000},
                     {"bandwidth_bps", l.bandwidth_bps}});
  }
  out["links"] = links;
  // What the agents' transfer servers sent, by (from site, to site).
  std::map<std::pair<std::string, std::string>, std::pair<int64_t, int64_t>> traffic;
  nlohmann::json node_list = nlohmann::json::array();
  for (const model::NodeView& n : nodes) {
    for (const model::LinkTraffic& t : n.sent) {
      auto& [bytes, micro] = traffic[{n.site, t.to_site}];
      bytes += t.bytes;
      micro += t.egress_micro_usd;
    }
    std::map<std::string, int> types;
    bool emulated = false;
    for (const model::Device& d : n.node.devices) {
      ++types[d.type];
      emulated = emulated || d.emulated;
    }
    std::string devices;
    for (const auto& [type, count] : types) devices += (devices.empty() ? "" : ", ") + fmt::format("{} x{}", type, count);
    node_list.push_back({{"name", n.node.name},
                         {"site", n.site},
                         {"alive", n.alive},
                         {"devices", devices},
                         {"emulated", emulated},
                         {"device_count", n.node.devices.size()},
                         {"devices_busy", static_cast<double>(n.devices_allocated_milli) / 1000},
                         {"cpu_cores", static_cast<double>(n.node.cpu_milli) / 1000},
                         {"cpu_busy", static_cast<double>(n.cpu_allocated_milli) / 1000},
                         {"running", n.running},
                         {"load", n.load_average},
                         {"heartbeat_age_s", static_cast<double>(n.heartbeat_age_us) / 1e6}});
  }
  out["nodes"] = node_list;
  nlohmann::json wan = nlohmann::json::array();
  for (const auto& [k, v] : traffic) {
    wan.push_back({{"from", k.first}, {"to", k.second}, {"bytes", v.first},
                   {"egress_usd", static_cast<double>(v.second) / 1e6}});
  }
  out["traffic"] = wan;
  nlohmann::json jobs = nlohmann::json::array();
  for (const model::JobSummary& s : coord.ListJobs(50, rpc::JobFilter{caller.SeesAllTenants() ? std::string() : caller.tenant, "", false})) {
    jobs.push_back(SummaryJson(s));
  }
  out["jobs"] = jobs;
  return out;
}

// One job with its first tasks (where and when each ran) and what its inputs moved.
constexpr uint32_t kDashboardTasks = 2'000;

StatusOr<nlohmann::json> JobJson(Coordinator& coord, const model::Caller& caller, uint64_t id) {
  if (!caller.SeesAllTenants()) {
    MERIDIAN_ASSIGN_OR_RETURN(std::string tenant, coord.JobTenant(id));
    if (tenant != caller.tenant) {
      return PermissionDeniedError(fmt::format("job {} is not of tenant {}", id, caller.tenant));
    }
  }
  MERIDIAN_ASSIGN_OR_RETURN(model::JobView v, coord.GetJob(id, 0, kDashboardTasks));
  nlohmann::json out;
  out["job"] = SummaryJson(v.summary);
  nlohmann::json tasks = nlohmann::json::array();
  for (const model::TaskView& t : v.tasks) {
    tasks.push_back({{"name", t.name},
                     {"status", model::TaskStatusName(t.record.status)},
                     {"node", t.record.node},
                     {"site", t.record.site},
                     {"device", t.record.device_type},
                     {"attempt", t.record.attempt},
                     {"started_us", t.record.started_us},
                     {"finished_us", t.record.finished_us}});
  }
  out["tasks"] = tasks;
  out["more_tasks"] = v.next_task < static_cast<uint32_t>(v.summary.tasks_total);
  nlohmann::json traffic = nlohmann::json::array();
  for (const model::JobTraffic& t : v.traffic) {
    traffic.push_back({{"from", t.from_site}, {"to", t.to_site}, {"bytes", t.bytes}});
  }
  out["traffic"] = traffic;
  return out;
}

}  // namespace

StatusOr<std::unique_ptr<http::Server>> StartHttp(Coordinator& coord, const HttpOptions& options) {
  if (!options.insecure && !options.tls.enabled()) {
    return InvalidArgumentError("the coordinator's HTTP listener needs its TLS credentials (or --insecure)");
  }
  std::shared_ptr<security::TlsContext> tls;
  if (options.tls.enabled()) {
    MERIDIAN_ASSIGN_OR_RETURN(tls, security::TlsContext::Create(options.tls));
  }
  http::ServerOptions so;
  so.listen = options.listen;
  so.tls = options.tls;
  const bool insecure = options.insecure;
  std::vector<http::Route> routes;
  // Health, for supervisors and probes, behind the same gate as the metrics: the
  // process serves (healthz), and it leads with its state loaded (readyz: a standby
  // does not listen until it leads).
  routes.push_back({"/healthz", [&coord, insecure](const http::Request& r) {
                      if (std::optional<http::Response> refused = CheckMonitor(coord, r, insecure)) return *refused;
                      return http::TextResponse(200, "ok\n");
                    }});
  routes.push_back({"/readyz", [&coord, insecure](const http::Request& r) {
                      if (std::optional<http::Response> refused = CheckMonitor(coord, r, insecure)) return *refused;
                      return http::TextResponse(200, fmt::format("ready: leading, {} nodes alive\n", coord.LiveNodes()));
                    }});
  routes.push_back({"/metrics", [&coord, insecure](const http::Request& r) {
                      if (std::optional<http::Response> refused = CheckMonitor(coord, r, insecure)) return *refused;
                      http::Exposition e;
                      coord.WriteMetrics(e);
                      return http::MetricsResponse(e.text());
                    }});
  // An agent's metrics, read by the coordinator for a scraper that trusts the
  // coordinator's host name (an agent's certificate names its node, not a host).
  routes.push_back({"/nodes/([A-Za-z0-9._:-]+)/metrics", [&coord, insecure, tls](const http::Request& r) {
                      if (std::optional<http::Response> refused = CheckMonitor(coord, r, insecure)) return *refused;
                      StatusOr<http::Response> got = FetchNodeMetrics(coord, tls.get(), r.matches.at(1));
                      if (!got.ok()) {
                        const int status = got.status().code() == StatusCode::kNotFound ? 404 : 502;
                        return http::TextResponse(status, std::string(got.status().message()));
                      }
                      if (got->status != 200) {
                        return http::TextResponse(502, fmt::format("node '{}' answered {}: {}", r.matches.at(1),
                                                                   got->status, got->body.substr(0, 200)));
                      }
                      return http::MetricsResponse(std::move(got->body));
                    }});
  // Prometheus's HTTP service discovery (http_sd_configs): every live agent, as a
  // target behind this listener.
  routes.push_back({"/sd/nodes", [&coord, insecure](const http::Request& r) {
                      if (std::optional<http::Response> refused = CheckMonitor(coord, r, insecure)) return *refused;
                      if (r.host.empty()) return http::TextResponse(400, "the request has no Host header");
                      nlohmann::json targets = nlohmann::json::array();
                      for (const auto& [name, site] : coord.NodesWithMetrics()) {
                        targets.push_back({{"targets", {r.host}},
                                           {"labels",
                                            {{"__metrics_path__", "/nodes/" + name + "/metrics"},
                                             {"node", name},
                                             {"site", site}}}});
                      }
                      http::Response out;
                      out.content_type = "application/json";
                      out.body = targets.dump();
                      return out;
                    }});
  // The dashboard's data, for a user's token: what `meridian nodes` and `jobs` show
  // that user.
  routes.push_back({"/api/overview", [&coord, insecure](const http::Request& r) {
                      http::Response refused;
                      StatusOr<model::Caller> caller = CheckUser(coord, r, insecure, &refused);
                      if (!caller.ok()) return refused;
                      return JsonResponse(Overview(coord, *caller));
                    }});
  routes.push_back({"/api/jobs/([0-9]{1,19})", [&coord, insecure](const http::Request& r) {
                      http::Response refused;
                      StatusOr<model::Caller> caller = CheckUser(coord, r, insecure, &refused);
                      if (!caller.ok()) return refused;
                      uint64_t id = 0;
                      const std::string& digits = r.matches.at(1);
                      if (std::from_chars(digits.data(), digits.data() + digits.size(), id).ec != std::errc()) {
                        return http::TextResponse(404, "no such job");
                      }
                      StatusOr<nlohmann::json> j = JobJson(coord, *caller, id);
                      if (!j.ok()) {
                        const StatusCode code = j.status().code();
                        if (code == StatusCode::kPermissionDenied) {
                          return Refuse(r, 403, std::string(j.status().message()));
                        }
                        return http::TextResponse(code == StatusCode::kNotFound ? 404 : 500,
                                                  std::string(j.status().message()));
                      }
                      return JsonResponse(*j);
                    }});
  so.static_dir = options.web_dir;
  return http::Server::Start(std::move(so), std::move(routes));
}

}  // namespace meridian::coordinator
