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
  MERIDIAN_LOG_WARN("audit: refused GET {} from {} ({}): {}", r.path, r.peer,
                    r.peer_certificate.empty() ? "no certificate" : "certificate " + r.peer_certificate, why);
  http::Response out = http::TextResponse(status, why);
  if (status == 401) out.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"meridian\"");
  return out;
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

http::Response MetricsResponse(std::string body) {
  http::Response out;
  out.content_type = std::string(http::kMetricsContentType);
  out.body = std::move(body);
  return out;
}

// Reads node `name`'s /metrics from its agent: over TLS with the coordinator's
// certificate, the agent proving the certificate of that node (no host name: a
// node's certificate names the node).
StatusOr<http::Response> FetchNodeMetrics(Coordinator& coord, const security::TlsContext* tls,
                                          const std::string& name) {
  MERIDIAN_ASSIGN_OR_RETURN(auto where, coord.NodeMetricsUrl(name));
  const std::string& url = where.first;
  const size_t scheme = url.find("://");
  const std::string hostport = url.substr(scheme + 3);
  const size_t colon = hostport.rfind(':');
  int port = 0;
  if (colon == std::string::npos ||
      std::from_chars(hostport.data() + colon + 1, hostport.data() + hostport.size(), port).ec != std::errc()) {
    return FailedPreconditionError(fmt::format("node '{}' gave a metrics URL without a port: {}", name, url));
  }
  std::string host = hostport.substr(0, colon);
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  const bool https = url.rfind("https://", 0) == 0;
  if (https != (tls != nullptr)) {
    return FailedPreconditionError(fmt::format("node '{}' serves metrics at {}, {} TLS", name, url,
                                               https ? "with" : "without"));
  }
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<TcpStream> tcp, TcpStream::Connect(host, port, kNodeMetricsTimeoutUs));
  MERIDIAN_RETURN_IF_ERROR(tcp->SetTimeout(kNodeMetricsTimeoutUs));
  std::unique_ptr<ByteStream> stream;
  if (tls != nullptr) {
    MERIDIAN_ASSIGN_OR_RETURN(stream, tls->Connect(std::move(tcp)));
    if (stream->identity() != "node:" + name) {
      return UnauthenticatedError(fmt::format("{} presented the certificate of '{}', not of node '{}'", url,
                                              stream->identity(), name));
    }
  } else {
    stream = std::move(tcp);
  }
  return http::Get(*stream, hostport, "/metrics", kMaxNodeMetricsBytes);
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
  routes.push_back({"/metrics", [&coord, insecure](const http::Request& r) {
                      if (std::optional<http::Response> refused = CheckMonitor(coord, r, insecure)) return *refused;
                      http::Exposition e;
                      coord.WriteMetrics(e);
                      return MetricsResponse(e.text());
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
                      return MetricsResponse(std::move(got->body));
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
  return http::Server::Start(std::move(so), std::move(routes));
}

}  // namespace meridian::coordinator
