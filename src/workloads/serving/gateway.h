// A region's gateway: clients call it (HTTP/1.1 or HTTP/2, http/loop_server.h) and it
// forwards each request to one of the service's replicas over kept-alive HTTP/1.1
// connections, from its own event loop (no thread hand-over on the way).
//
// Which replica: among the healthy ones with room (fewer than max_inflight requests
// in flight), those of the gateway's own region first (when it has one); among them,
// the one with the least expected time: its measured round trip (each replica's
// /healthz is probed every probe_interval_ms) plus its requests in flight times its
// mean service time. So a near replica is preferred until it queues more than a far
// one's extra distance, and a region's traffic leaves it only when none of its own
// replicas is healthy with room (failover).
//
// When a replica fails (it refuses the connection, the connection breaks, it answers
// 503 saturated) the request is sent to another (at most max_attempts replicas in all;
// predictions have no side effects, so sending one twice is safe), and a replica whose
// connection failed is left out until a probe finds it healthy again. In front of
// replicas whose requests may act (a command's service: resend_unsafe false), a POST
// or PATCH that reached a replica is never sent to another: only one that was not
// sent (the connection refused) or of a method that may be repeated (GET, HEAD,
// OPTIONS, PUT, DELETE) is; the others get the failure (502), or the replica's 503. When every
// healthy replica is full the gateway sheds the request: 503, saying so, with
// Retry-After. When none is healthy: 503 naming how many it has and why.
//
//   GET /healthz      -> 200 {"status": "ok"} (no token needed: load balancers probe it)
//   GET /v1/gateway   -> the replicas as the gateway sees them, and its counters
//   anything else     -> forwarded
//
// A gateway by service (GatewayOptions::by_service: a region's gateway, for every
// service that runs) keeps the above for each service it is given (AddService), with
// the service's own replicas, token, TLS and region:
//
//   /v1/services/NAME/PATH -> forwarded to NAME's replicas as /PATH (query kept)
//   GET /v1/services       -> {"region": R, "services": [NAME, ...]}
//   GET /v1/gateway        -> {"region": R, "services": {NAME: what a one-service gateway says}}
//   anything else          -> 404, naming the form
//
// To its replicas the gateway speaks HTTPS when given their CA (ReplicaTls: a
// service's replicas share one certificate, for the name "NAME.service.meridian",
// signed by a CA of the service's own whose key `meridian serve` threw away): the
// replica must prove that name with a certificate of that CA, or no request (nor the
// replicas' token) is sent to it.
//
// Thread-safety: Start, AddService, RemoveService, the setters, Snapshot, InflightTo and
// destruction from any one thread at a time; the routing state lives on the loop
// thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "http/loop_server.h"
#include "workloads/serving/tenant_tokens.h"

namespace meridian::serving {

struct ReplicaEndpoint {
  std::string host;
  int port = 0;
  std::string region;
  friend bool operator==(const ReplicaEndpoint&, const ReplicaEndpoint&) = default;
};

// "HOST:PORT" or "HOST:PORT@REGION"; the error names the flag's value.
StatusOr<ReplicaEndpoint> ParseReplicaEndpoint(const std::string& text);

// How the gateway authenticates its replicas: TLS 1.3, the replica's certificate of
// `ca_pem` and for `server_name`. Empty `ca_pem`: plain HTTP (replicas on loopback,
// tests, a benchmark's).
struct ReplicaTls {
  std::string ca_pem;
  std::string server_name;
  bool enabled() const { return !ca_pem.empty(); }
  friend bool operator==(const ReplicaTls&, const ReplicaTls&) = default;
};

// The name a service's replicas prove: "NAME.service.meridian".
std::string ServiceTlsName(const std::string& service);
// A service's TLS credentials: a CA of its own, made here and its key dropped (it can
// sign nothing more), and the one certificate (P-256, for ServiceTlsName) and key
// that its replicas share, signed by it. Valid for `valid_for_us`.
struct ServiceCredentials {
  std::string ca_pem;
  std::string cert_pem, key_pem;
};
StatusOr<ServiceCredentials> MakeServiceCredentials(const std::string& service, int64_t valid_for_us);

struct GatewayOptions {
  std::string host = "127.0.0.1";
  int port = 0;
  std::string region;
  std::string token;          // clients' bearer token (empty: none asked, tests only)
  // A gateway of one service: the service's own clients' token (ReplicaSecrets::
  // client_token), which reaches the service's requests but not /v1/gateway; empty:
  // `token` alone. A gateway by service takes each service's from its ServiceRoute
  // (ServiceRoute::client_token), for /v1/services/NAME/ of that service alone.
  std::string service_token;
  // The service's tenant (its replica jobs'): a gateway given `identify_tokens` also
  // takes that tenant's own API tokens (the coordinator's: `meridian token create`),
  // and an admin's, for the service's requests. A gateway by service takes each
  // service's from its ServiceRoute. Empty: no tenant's token (an insecure cluster).
  std::string tenant;
  // Whose an API token is, asked of the coordinator with that token (TenantTokens:
  // answers kept, questions bounded and rate-limited). Empty: tenants' tokens refused.
  TenantTokens::Identify identify_tokens;
  TenantTokens::Options token_answers;
  std::string replica_token;  // what the gateway presents to replicas
  std::string tls_cert_file, tls_key_file;  // HTTPS for clients when given (http/loop_server.h)
  std::string tls_cert_pem, tls_key_pem;    // the same as PEM text
  ReplicaTls replica_tls;
  std::vector<ReplicaEndpoint> replicas;
  int32_t max_inflight = 64;  // a replica's requests in flight before it counts as full
  int32_t max_attempts = 3;   // replicas tried for one request
  // Whether a POST or PATCH that reached a replica may be sent to another (above).
  bool resend_unsafe = true;
  int64_t probe_interval_ms = 250;
  int64_t upstream_timeout_ms = 10'000;
  int64_t max_response_bytes = int64_t{16} << 20;
  // The path probed on each replica (printable ASCII from '/', at most 256 bytes); a
  // 200 answer is healthy.
  std::string health_path = "/healthz";
  // The replicas given at start take requests only once their first probe answers
  // (as those added later always do), and the gateway's own /healthz answers 503
  // while no replica is healthy: a replica's front for a command that serves HTTP,
  // which is healthy when its command is (`meridian replica --command-env`).
  bool front = false;
  // Routes each service given by AddService at /v1/services/NAME/ (above); `replicas`,
  // `replica_token`, `replica_tls` and `resend_unsafe` are then each service's.
  bool by_service = false;
};

// A service a gateway by service routes: its region here (its replicas of that region
// first), its replicas and how they are reached.
struct ServiceRoute {
  std::string region;
  std::vector<ReplicaEndpoint> replicas;
  std::string replica_token;
  ReplicaTls replica_tls;
  bool resend_unsafe = true;
  // The service's own clients' token: it reaches /v1/services/NAME/ of this service and
  // nothing else of the gateway (GatewayOptions::token reaches everything). Empty: none.
  std::string client_token;
  // Its tenant: that tenant's API tokens reach it too (GatewayOptions::tenant).
  std::string tenant = {};
};
inline constexpr size_t kMaxServiceRoutes = 1024;
inline constexpr size_t kMaxServiceRouteName = 128;
// Letters, digits, '-', '_' and '.' (not "." or ".."), 1 to kMaxServiceRouteName.
bool ValidServiceRouteName(std::string_view name);

Status CheckGatewayOptions(const GatewayOptions& options);

struct ReplicaView {
  ReplicaEndpoint endpoint;
  bool healthy = false;
  int32_t inflight = 0;
  int64_t rtt_us = 0;      // smoothed /healthz round trip (0: not measured yet)
  int64_t service_us = 0;  // smoothed time a forwarded request took
  int64_t served = 0;
  int64_t failures = 0;    // connections refused or broken, 503s
  // Requests in flight at the replica from all its callers, as its last health probe
  // answered ("inflight" in /healthz's body); -1: it does not say.
  int64_t reported_inflight = -1;
  bool tls = false;  // the gateway speaks HTTPS to it, checking its certificate
};

struct GatewayView {
  std::vector<ReplicaView> replicas;
  int64_t requests = 0;   // forwarded requests received
  int64_t retried = 0;    // sent again to another replica
  int64_t shed = 0;       // answered 503: every healthy replica full
  int64_t failed = 0;     // answered 502/503 otherwise: no healthy replica, attempts used up
  // Replicas taken out of the set and still kept (finishing requests, or to be taken
  // up again should they come back: one per endpoint, as a rule).
  int64_t removed_kept = 0;
};

class Gateway {
 public:
  static StatusOr<std::unique_ptr<Gateway>> Start(GatewayOptions options);
  ~Gateway();
  int port() const;
  // A gateway by service: routes `name` from now on (its replicas take requests once
  // their first probe answers). AlreadyExists when it does; ResourceExhausted past
  // kMaxServiceRoutes.
  Status AddService(const std::string& name, const ServiceRoute& route);
  // Stops routing `name`: its requests in flight are answered 503, later ones 404.
  void RemoveService(const std::string& name);
  // The services routed ("" alone for a gateway of one service).
  std::vector<std::string> Services();

  // Each of the following acts on `service`'s route ("": a gateway of one service's),
  // and does nothing when there is none.
  //
  // Replaces the replica set (a service scaled or re-placed): kept endpoints keep their
  // figures and connections; removed ones finish what they have in flight; new ones
  // take requests once their first health probe answers.
  void SetReplicas(std::vector<ReplicaEndpoint> replicas, const std::string& service = "");
  // Replaces the token presented to replicas (a service deleted and served again has
  // a new one); requests sent after the call carry it.
  void SetReplicaToken(const std::string& token, const std::string& service = "");
  // Replaces the service's own clients' token (GatewayOptions::service_token; a
  // service served again has a new one): the old one is refused from then on.
  void SetServiceToken(const std::string& token, const std::string& service = "");
  // Replaces the service's tenant (GatewayOptions::tenant; a service served again by
  // another tenant): the old tenant's tokens are refused from then on.
  void SetServiceTenant(const std::string& tenant, const std::string& service = "");
  // How tenants' tokens were judged (all zero without GatewayOptions::identify_tokens).
  TenantTokens::Counters TokenCounters() const;
  // Replaces how replicas are authenticated (a service served again has a new
  // certificate): the replicas in the set are connected to anew, each taking requests
  // once a probe answers; requests in flight finish as they were. NotFound without the route.
  Status SetReplicaTls(const ReplicaTls& tls, const std::string& service = "");
  // A front (GatewayOptions::front) being stopped: its /healthz answers 503 from now on,
  // so that the service's gateways send it nothing new; requests that come are served.
  void StartDraining();
  // Replaces GatewayOptions::resend_unsafe (a service served again as a command's, or
  // a model's); requests received after the call follow it.
  void SetResendUnsafe(bool resend_unsafe, const std::string& service = "");
  GatewayView Snapshot(const std::string& service = "");
  // Requests in flight to `endpoint`, whether it is in the set or was removed from it
  // (a replica draining: removed, so that no request is sent to it, and stopped when
  // this is 0).
  int32_t InflightTo(const ReplicaEndpoint& endpoint, const std::string& service = "");

  struct Impl;

 private:
  explicit Gateway(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

std::string GatewayViewJson(const GatewayView& view);

}  // namespace meridian::serving
