#include "workloads/serving/gateway.h"

#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <h2o.h>  // H2O_USE_LIBUV=0 comes from CMake
#include <h2o/http1client.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "common/net.h"
#include "model/auth.h"
#include "security/pki.h"
#include "security/tls.h"

namespace meridian::serving {

namespace {

using Clock = std::chrono::steady_clock;

int64_t MicrosSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t).count();
}

void Smooth(double& average, int64_t sample_us) {
  average = average == 0.0 ? static_cast<double>(sample_us) : 0.8 * average + 0.2 * static_cast<double>(sample_us);
}

}  // namespace

StatusOr<ReplicaEndpoint> ParseReplicaEndpoint(const std::string& text) {
  ReplicaEndpoint e;
  std::string address = text;
  if (const size_t at = text.find('@'); at != std::string::npos) {
    address = text.substr(0, at);
    e.region = text.substr(at + 1);
    if (e.region.empty()) return InvalidArgumentError(fmt::format("replica '{}': empty region after '@'", text));
  }
  MERIDIAN_ASSIGN_OR_RETURN(auto host_port, SplitHostPort(address, fmt::format("replica '{}'", text)));
  e.host = host_port.first;
  e.port = host_port.second;
  return e;
}

std::string ServiceTlsName(const std::string& service) { return service + ".service.meridian"; }

StatusOr<ServiceCredentials> MakeServiceCredentials(const std::string& service, int64_t valid_for_us) {
  MERIDIAN_ASSIGN_OR_RETURN(security::KeyPair ca, security::MakeCa("service:" + service, valid_for_us));
  security::CertRequest request;
  request.common_name = "service:" + service;
  request.hosts = {ServiceTlsName(service)};
  request.valid_for_us = valid_for_us;
  request.server = true;
  MERIDIAN_ASSIGN_OR_RETURN(security::KeyPair replicas, security::Issue(ca, request));
  return ServiceCredentials{ca.cert_pem, replicas.cert_pem, replicas.key_pem};
}

Status CheckGatewayOptions(const GatewayOptions& o) {
  if (o.max_inflight < 1 || o.max_inflight > 100'000) {
    return InvalidArgumentError(fmt::format("max in flight {}: expected 1..100000 a replica", o.max_inflight));
  }
  if (o.max_attempts < 1 || o.max_attempts > 16) {
    return InvalidArgumentError(fmt::format("max attempts {}: expected 1..16", o.max_attempts));
  }
  if (o.probe_interval_ms < 10 || o.probe_interval_ms > 60'000) {
    return InvalidArgumentError(fmt::format("probe interval {} ms: expected 10..60000", o.probe_interval_ms));
  }
  if (o.upstream_timeout_ms < 10 || o.upstream_timeout_ms > 600'000) {
    return InvalidArgumentError(fmt::format("upstream timeout {} ms: expected 10..600000", o.upstream_timeout_ms));
  }
  if (o.replicas.size() > 10'000) return InvalidArgumentError("at most 10000 replicas behind one gateway");
  if (o.replica_tls.enabled() &&
      (o.replica_tls.server_name.empty() || o.replica_tls.server_name.size() > 253 ||
       !std::all_of(o.replica_tls.server_name.begin(), o.replica_tls.server_name.end(), [](char c) {
         return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-';
       }))) {
    return InvalidArgumentError(fmt::format("replicas' TLS name '{}': expected 1 to 253 of [a-z0-9.-]",
                                            o.replica_tls.server_name));
  }
  if (o.health_path.empty() || o.health_path[0] != '/' || o.health_path.size() > 256 ||
      !std::all_of(o.health_path.begin(), o.health_path.end(), [](char c) { return c > 0x20 && c < 0x7f; })) {
    return InvalidArgumentError(fmt::format("health path '{}': expected printable ASCII from '/', at most 256 bytes",
                                            o.health_path));
  }
  return OkStatus();
}

struct Upstream;

// A timer entry with its owner (h2o hands back the entry alone).
struct ProbeTimer {
  h2o_timeout_entry_t entry;  // first
  Upstream* owner;
};

struct Route;

struct Upstream {
  ReplicaEndpoint endpoint;
  std::string name;  // "host:port@region", the X-Meridian-Replica of its answers
  Route* route = nullptr;
  h2o_socketpool_t pool{};
  // Its own client contexts (the gateway's, with the TLS context of when it was added:
  // a connection in flight keeps using them after SetReplicaTls).
  h2o_http1client_ctx_t client_ctx{};
  h2o_http1client_ctx_t probe_ctx{};
  SSL_CTX* ssl = nullptr;  // a reference of its own; none: plain HTTP
  bool removed = false;
  bool healthy = true;  // until a probe or a request says otherwise (Add sets it)
  int32_t inflight = 0;
  double rtt_us = 0.0;
  double service_us = 0.0;
  int64_t served = 0;
  int64_t failures = 0;
  ProbeTimer timer{};
  h2o_http1client_t* probe = nullptr;
  Clock::time_point probe_sent;
  std::string probe_head;
  h2o_iovec_t probe_buf{};
  std::string probe_body;          // of the probe's answer so far (at most kMaxProbeBody)
  int64_t reported_inflight = -1;  // as the last probe's body said; -1: it did not
};

constexpr size_t kMaxProbeBody = 4096;

std::string BearerLine(const std::string& token) {
  return token.empty() ? "" : fmt::format("Authorization: Bearer {}\r\n", token);
}

// "inflight" of a replica's /healthz answer ({"status":"ok","inflight":N}); -1 when
// the body is not such (a command's health path, an older replica).
int64_t ReportedInflight(const std::string& body) {
  const nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return -1;
  auto it = j.find("inflight");
  if (it == j.end() || !it->is_number_integer()) return -1;
  const int64_t n = it->get<int64_t>();
  return n >= 0 && n <= 1'000'000'000 ? n : -1;
}

// One client request on its way through the replicas.
struct Forward {
  Route* route = nullptr;
  std::unique_ptr<http::Reply> reply;
  std::string body;
  std::string path;
  std::string method;
  std::string content_type_in;  // the client's, sent upstream
  std::vector<Upstream*> tried;
  bool reached = false;  // the request went out to `upstream` (it may have acted on it)
  Upstream* upstream = nullptr;
  h2o_http1client_t* client = nullptr;
  std::string head;
  h2o_iovec_t bufs[2]{};
  Clock::time_point sent;
  int status = 0;
  std::string content_type;
  std::string response;
  std::string last_error;
};

// One service's replicas and how they are reached (a gateway of one service has one,
// named ""; a gateway by service one per service). Lives on the loop thread.
struct Route {
  std::string service;
  // The gateway's, with the route's own region, replicas, token, TLS and resend_unsafe.
  GatewayOptions options;
  h2o_loop_t* loop = nullptr;
  h2o_timeout_t io_timeout{};
  h2o_timeout_t probe_io_timeout{};
  h2o_timeout_t probe_interval{};
  h2o_http1client_ctx_t client_ctx{};
  h2o_http1client_ctx_t probe_ctx{};
  SSL_CTX* replica_ssl = nullptr;  // when the replicas speak TLS: what each one added uses
  std::vector<std::unique_ptr<Upstream>> upstreams;  // live ones first in no order; removed ones kept
  std::set<Forward*> forwards;
  int64_t requests = 0, retried = 0, shed = 0, failed = 0;
  std::string bearer_line;  // "Authorization: Bearer T\r\n" or empty

  // On the loop thread: its timeouts and clients; the replicas of `options` added
  // (`healthy`: taking requests before their first probe answers).
  void Init(h2o_loop_t* on, SSL_CTX* ssl, bool healthy);
  // A client's request for the service, its path as the replicas see it.
  void Handle(const http::HttpRequest& req, std::string_view path, std::unique_ptr<http::Reply> reply);
  void Dispatch(Forward* f);
  // A removed replica of `e` taken up again (its pool, connections and figures), when
  // one can be: see the definition. False: Add one.
  bool Revive(const ReplicaEndpoint& e);
  // `u`'s health probe request, with the route's current replicas' token.
  void SetProbeRequest(Upstream& u) const;
  void Finish(Forward* f, http::HttpResponse response);
  void Failed(Forward* f, std::string error, bool broken);
  void Completed(Forward* f);
  // Whether `f`, having reached a replica, may be sent to another (GatewayOptions::resend_unsafe).
  bool MayResend(const Forward& f) const;
  // `healthy`: whether it takes requests before its first probe answers (replicas
  // given at start do; one added later, a replica just placed that may not listen
  // yet, waits for its probe).
  void Add(const ReplicaEndpoint& e, bool healthy);
  void Probe(Upstream* u);
  void ProbeDone(Upstream* u, bool ok);
  void Shutdown(std::string_view why);
  GatewayView View() const;
};

namespace {

h2o_http1client_body_cb OnHead(h2o_http1client_t* client, const char* errstr, int, int status, h2o_iovec_t,
                               h2o_header_t* headers, size_t num_headers, int);

int OnBody(h2o_http1client_t* client, const char* errstr) {
  auto* f = static_cast<Forward*>(client->data);
  if (errstr == nullptr || errstr == h2o_http1client_error_is_eos) {
    h2o_buffer_t* in = client->sock->input;
    if (static_cast<int64_t>(f->response.size() + in->size) > f->route->options.max_response_bytes) {
      f->client = nullptr;
      f->route->Failed(f, fmt::format("its answer is over {} bytes", f->route->options.max_response_bytes), false);
      return -1;
    }
    f->response.append(in->bytes, in->size);
    h2o_buffer_consume(&client->sock->input, in->size);
  }
  if (errstr == nullptr) return 0;
  f->client = nullptr;
  if (errstr == h2o_http1client_error_is_eos) {
    f->route->Completed(f);
  } else {
    f->route->Failed(f, errstr, true);
  }
  return 0;
}

h2o_http1client_body_cb OnHead(h2o_http1client_t* client, const char* errstr, int, int status, h2o_iovec_t,
                               h2o_header_t* headers, size_t num_headers, int) {
  auto* f = static_cast<Forward*>(client->data);
  if (errstr != nullptr && errstr != h2o_http1client_error_is_eos) {
    f->client = nullptr;
    f->route->Failed(f, errstr, true);
    return nullptr;
  }
  f->status = status;
  for (size_t i = 0; i < num_headers; ++i) {
    if (h2o_lcstris(headers[i].name->base, headers[i].name->len, H2O_STRLIT("content-type"))) {
      f->content_type.assign(headers[i].value.base, headers[i].value.len);
    }
  }
  if (errstr == h2o_http1client_error_is_eos) {
    f->client = nullptr;
    f->route->Completed(f);
    return nullptr;
  }
  return OnBody;
}

h2o_http1client_head_cb OnConnect(h2o_http1client_t* client, const char* errstr, h2o_iovec_t** reqbufs,
                                  size_t* reqbufcnt, int* method_is_head) {
  auto* f = static_cast<Forward*>(client->data);
  if (errstr != nullptr) {
    f->client = nullptr;
    f->route->Failed(f, errstr, true);
    return nullptr;
  }
  f->reached = true;
  *reqbufs = f->bufs;
  *reqbufcnt = f->body.empty() ? 1 : 2;
  *method_is_head = 0;
  return OnHead;
}

int OnProbeBody(h2o_http1client_t* client, const char* errstr) {
  auto* u = static_cast<Upstream*>(client->data);
  if (errstr == nullptr || errstr == h2o_http1client_error_is_eos) {
    h2o_buffer_t* in = client->sock->input;
    if (u->probe_body.size() < kMaxProbeBody) {
      u->probe_body.append(in->bytes, std::min(in->size, kMaxProbeBody - u->probe_body.size()));
    }
    h2o_buffer_consume(&client->sock->input, in->size);
  }
  if (errstr == nullptr) return 0;
  u->probe = nullptr;
  const bool ok = errstr == h2o_http1client_error_is_eos;
  u->reported_inflight = ok ? ReportedInflight(u->probe_body) : -1;
  u->route->ProbeDone(u, ok);
  return 0;
}

h2o_http1client_body_cb OnProbeHead(h2o_http1client_t* client, const char* errstr, int, int status, h2o_iovec_t,
                                    h2o_header_t*, size_t, int) {
  auto* u = static_cast<Upstream*>(client->data);
  if ((errstr != nullptr && errstr != h2o_http1client_error_is_eos) || status != 200) {
    // A body of a refusal is not read: the connection is closed with the client.
    u->probe = nullptr;
    u->route->ProbeDone(u, false);
    return nullptr;
  }
  if (errstr == h2o_http1client_error_is_eos) {
    u->probe = nullptr;
    u->reported_inflight = -1;
    u->route->ProbeDone(u, true);
    return nullptr;
  }
  u->probe_body.clear();
  return OnProbeBody;
}

h2o_http1client_head_cb OnProbeConnect(h2o_http1client_t* client, const char* errstr, h2o_iovec_t** reqbufs,
                                       size_t* reqbufcnt, int* method_is_head) {
  auto* u = static_cast<Upstream*>(client->data);
  if (errstr != nullptr) {
    u->probe = nullptr;
    u->route->ProbeDone(u, false);
    return nullptr;
  }
  *reqbufs = &u->probe_buf;
  *reqbufcnt = 1;
  *method_is_head = 0;
  return OnProbeHead;
}

void OnProbeTimer(h2o_timeout_entry_t* entry) {
  Upstream* u = reinterpret_cast<ProbeTimer*>(entry)->owner;
  u->route->Probe(u);
}

}  // namespace

void Route::SetProbeRequest(Upstream& u) const {
  u.probe_head = fmt::format("GET {} HTTP/1.1\r\nHost: {}:{}\r\n{}\r\n", options.health_path, u.endpoint.host,
                             u.endpoint.port, bearer_line);
  u.probe_buf = h2o_iovec_init(u.probe_head.data(), u.probe_head.size());
}

void Route::Add(const ReplicaEndpoint& e, bool healthy) {
  auto u = std::make_unique<Upstream>();
  u->endpoint = e;
  u->healthy = healthy;
  u->name = e.region.empty() ? fmt::format("{}:{}", e.host, e.port) : fmt::format("{}:{}@{}", e.host, e.port, e.region);
  u->route = this;
  u->ssl = replica_ssl;
  if (u->ssl != nullptr) SSL_CTX_up_ref(u->ssl);
  u->client_ctx = client_ctx;
  u->client_ctx.ssl_ctx = u->ssl;
  u->probe_ctx = probe_ctx;
  u->probe_ctx.ssl_ctx = u->ssl;
  // Resolved once, here: the pool then connects to the address without a resolver.
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(e.port);
  if (getaddrinfo(e.host.c_str(), port.c_str(), &hints, &found) != 0 || found == nullptr) {
    u->healthy = false;
    u->removed = true;  // never connectable: kept only to be reported
    ++u->failures;
  } else {
    h2o_socketpool_init_by_address(&u->pool, found->ai_addr, found->ai_addrlen, u->ssl != nullptr ? 1 : 0,
                                   static_cast<size_t>(options.max_inflight) + 1);
    if (u->ssl != nullptr) {
      // A pool of an address names its peer, for TLS (SNI and the certificate's name),
      // by the address: the replicas' certificate names the service instead.
      const std::string& name = options.replica_tls.server_name;
      free(u->pool.peer.host.base);
      u->pool.peer.host = h2o_strdup(nullptr, name.data(), name.size());
    }
    h2o_socketpool_set_timeout(&u->pool, loop, 30'000);
    freeaddrinfo(found);
  }
  SetProbeRequest(*u);
  u->timer.owner = u.get();
  u->timer.entry.cb = OnProbeTimer;
  Upstream* raw = u.get();
  upstreams.push_back(std::move(u));
  if (!raw->removed) Probe(raw);
}

// A replica that leaves the set is kept (a request in flight, its pool's connections
// and its probe may still use it); when it comes back, that one is taken up again
// instead of a new one added beside it: a set that changes all day (an autoscaled
// service) kept one more each time, and each request looked through them all. Not
// one whose probe is still out (its request's buffer is in use), nor one of another
// TLS context (SetReplicaTls's replicas are connected to anew), nor one that never
// resolved.
bool Route::Revive(const ReplicaEndpoint& e) {
  for (const auto& u : upstreams) {
    if (!u->removed || !(u->endpoint == e) || u->probe != nullptr || u->pool.capacity == 0 || u->ssl != replica_ssl) {
      continue;
    }
    u->removed = false;
    u->healthy = false;  // until its probe answers, as a replica added
    u->reported_inflight = -1;
    SetProbeRequest(*u);
    Probe(u.get());
    return true;
  }
  return false;
}

void Route::Probe(Upstream* u) {
  if (u->removed || u->probe != nullptr) return;
  u->probe_sent = Clock::now();
  h2o_http1client_connect_with_pool(&u->probe, u, &u->probe_ctx, &u->pool, OnProbeConnect);
}

void Route::ProbeDone(Upstream* u, bool ok) {
  if (ok) {
    Smooth(u->rtt_us, MicrosSince(u->probe_sent));
    u->healthy = true;
  } else {
    u->healthy = false;
    u->reported_inflight = -1;
  }
  if (!u->removed) h2o_timeout_link(loop, &probe_interval, &u->timer.entry);
}

namespace {

// A client context for the replicas: TLS 1.3; their certificate must be of `tls`'s CA
// (the only one trusted) and carry its name. OpenSSL checks the name in the handshake,
// and h2o checks it again after.
StatusOr<SSL_CTX*> ReplicaClientTls(const ReplicaTls& tls) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (ctx == nullptr) return InternalError("cannot make a TLS context");
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  Status trusted = security::TrustCas(ctx, tls.ca_pem);
  if (!trusted.ok()) {
    SSL_CTX_free(ctx);
    return InvalidArgumentError(fmt::format("the replicas' CA: {}", trusted.message()));
  }
  X509_VERIFY_PARAM* param = SSL_CTX_get0_param(ctx);
  X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
  if (X509_VERIFY_PARAM_set1_host(param, tls.server_name.c_str(), tls.server_name.size()) != 1) {
    SSL_CTX_free(ctx);
    return InvalidArgumentError(fmt::format("the replicas' TLS name '{}'", tls.server_name));
  }
  return ctx;
}

}  // namespace

void Route::Handle(const http::HttpRequest& req, std::string_view path, std::unique_ptr<http::Reply> reply) {
  // The method and path go into the request line sent upstream: printable ASCII only
  // (HTTP/2 carries them as header values, which h2o does not restrict so).
  auto printable = [](std::string_view v) {
    return !v.empty() && std::all_of(v.begin(), v.end(), [](char c) { return c > 0x20 && c < 0x7f; });
  };
  if (!printable(req.method) || !printable(path) || path.size() > 2048) {
    reply->Send(http::JsonError(400, "the method or path is not printable ASCII of at most 2048 bytes"));
    return;
  }
  // The content type goes upstream as a header line too (spaces allowed: "; charset").
  const bool content_type_ok = req.content_type.size() <= 256 &&
                               std::all_of(req.content_type.begin(), req.content_type.end(),
                                           [](char c) { return c >= 0x20 && c < 0x7f; });
  if (!content_type_ok) {
    reply->Send(http::JsonError(400, "the Content-Type is not printable ASCII of at most 256 bytes"));
    return;
  }
  ++requests;
  auto* f = new Forward();
  f->route = this;
  f->reply = std::move(reply);
  f->body.assign(req.body);
  f->path.assign(path);
  f->method.assign(req.method);
  f->content_type_in = req.content_type.empty() ? std::string("application/json") : std::string(req.content_type);
  forwards.insert(f);
  Dispatch(f);
}

void Route::Dispatch(Forward* f) {
  // The gateway's own region first: another region's replica only when none of its
  // own is healthy with room (a region's traffic stays in it until it cannot).
  Upstream* best = nullptr;
  double best_cost = 0.0;
  bool best_local = false;
  int healthy_untried = 0;
  for (const auto& u : upstreams) {
    if (u->removed || !u->healthy) continue;
    if (std::find(f->tried.begin(), f->tried.end(), u.get()) != f->tried.end()) continue;
    ++healthy_untried;
    if (u->inflight >= options.max_inflight) continue;
    const bool local = !options.region.empty() && u->endpoint.region == options.region;
    const double cost = u->rtt_us + u->inflight * u->service_us;
    if (best == nullptr || (local && !best_local) || (local == best_local && cost < best_cost)) {
      best = u.get();
      best_cost = cost;
      best_local = local;
    }
  }
  if (best == nullptr) {
    if (healthy_untried > 0) {
      ++shed;
      http::HttpResponse busy = http::JsonError(
          503, fmt::format("all {} healthy replicas are saturated ({} requests in flight each); retry later",
                           healthy_untried, options.max_inflight));
      busy.retry_after_s = 1;
      Finish(f, std::move(busy));
      return;
    }
    ++failed;
    int live = 0;
    for (const auto& u : upstreams) live += u->removed ? 0 : 1;
    if (f->tried.empty()) {
      http::HttpResponse none = http::JsonError(503, fmt::format("no healthy replica: {} known, none answering its health probe",
                                                     live));
      none.retry_after_s = 1;
      Finish(f, std::move(none));
    } else {
      std::string names;
      for (const Upstream* u : f->tried) {
        names += fmt::format("{}{}:{}", names.empty() ? "" : ", ", u->endpoint.host, u->endpoint.port);
      }
      Finish(f, http::JsonError(502, fmt::format("replicas {} failed; the last: {}", names, f->last_error)));
    }
    return;
  }
  if (!f->tried.empty()) ++retried;
  f->tried.push_back(best);
  f->upstream = best;
  f->reached = false;
  ++best->inflight;
  f->status = 0;
  f->content_type.clear();
  f->response.clear();
  f->head = fmt::format("{} {} HTTP/1.1\r\nHost: {}:{}\r\nContent-Length: {}\r\nContent-Type: {}\r\n{}\r\n", f->method,
                        f->path, best->endpoint.host, best->endpoint.port, f->body.size(), f->content_type_in,
                        bearer_line);
  f->bufs[0] = h2o_iovec_init(f->head.data(), f->head.size());
  f->bufs[1] = h2o_iovec_init(f->body.data(), f->body.size());
  f->sent = Clock::now();
  h2o_http1client_connect_with_pool(&f->client, f, &best->client_ctx, &best->pool, OnConnect);
}

void Route::Failed(Forward* f, std::string error, bool broken) {
  Upstream* u = f->upstream;
  --u->inflight;
  ++u->failures;
  if (broken) u->healthy = false;  // until its probe answers again
  f->last_error = fmt::format("{}:{}: {}", u->endpoint.host, u->endpoint.port, error);
  if (f->reached && !MayResend(*f)) {
    ++failed;
    Finish(f, http::JsonError(502, fmt::format("{}; the request had reached it and is not sent again ({} may act twice)",
                                         f->last_error, f->method)));
    return;
  }
  if (static_cast<int32_t>(f->tried.size()) >= options.max_attempts) {
    ++failed;
    Finish(f, http::JsonError(502, fmt::format("{} replicas tried; the last failed: {}", f->tried.size(), f->last_error)));
    return;
  }
  Dispatch(f);
}

bool Route::MayResend(const Forward& f) const {
  if (options.resend_unsafe) return true;
  static constexpr std::string_view kIdempotent[] = {"GET", "HEAD", "OPTIONS", "PUT", "DELETE"};
  return std::find(std::begin(kIdempotent), std::end(kIdempotent), f.method) != std::end(kIdempotent);
}

void Route::Completed(Forward* f) {
  if (f->status == 503 && MayResend(*f)) {
    // A saturated replica: another may have room.
    Failed(f, "saturated (503)", false);
    return;
  }
  Upstream* u = f->upstream;
  --u->inflight;
  ++u->served;
  Smooth(u->service_us, MicrosSince(f->sent));
  http::HttpResponse r;
  r.status = f->status;
  r.body = std::move(f->response);
  if (!f->content_type.empty()) r.content_type = f->content_type;
  r.replica = u->name;
  Finish(f, std::move(r));
}

void Route::Finish(Forward* f, http::HttpResponse response) {
  f->reply->Send(std::move(response));
  forwards.erase(f);
  delete f;
}

void Route::Shutdown(std::string_view why) {
  for (Forward* f : forwards) {
    if (f->client != nullptr) h2o_http1client_cancel(f->client);
    f->reply->Send(http::JsonError(503, std::string(why)));
    delete f;
  }
  forwards.clear();
  for (const auto& u : upstreams) {
    if (u->probe != nullptr) h2o_http1client_cancel(u->probe);
    u->probe = nullptr;
    if (h2o_timeout_is_linked(&u->timer.entry)) h2o_timeout_unlink(&u->timer.entry);
    if (u->pool.capacity != 0) h2o_socketpool_dispose(&u->pool);
    if (u->ssl != nullptr) SSL_CTX_free(u->ssl);
    u->ssl = nullptr;
  }
  if (replica_ssl != nullptr) SSL_CTX_free(replica_ssl);
  replica_ssl = nullptr;
  h2o_timeout_dispose(loop, &probe_interval);
  h2o_timeout_dispose(loop, &probe_io_timeout);
  h2o_timeout_dispose(loop, &io_timeout);
}

GatewayView Route::View() const {
  GatewayView v;
  for (const auto& u : upstreams) {
    if (u->removed) {
      ++v.removed_kept;
      continue;
    }
    ReplicaView r;
    r.endpoint = u->endpoint;
    r.healthy = u->healthy;
    r.inflight = u->inflight;
    r.rtt_us = static_cast<int64_t>(u->rtt_us);
    r.service_us = static_cast<int64_t>(u->service_us);
    r.served = u->served;
    r.failures = u->failures;
    r.reported_inflight = u->reported_inflight;
    r.tls = u->pool.is_ssl != 0;
    v.replicas.push_back(r);
  }
  v.requests = requests;
  v.retried = retried;
  v.shed = shed;
  v.failed = failed;
  return v;
}

namespace {
nlohmann::json ViewJson(const GatewayView& v) {
  nlohmann::json replicas = nlohmann::json::array();
  for (const ReplicaView& r : v.replicas) {
    replicas.push_back({{"address", fmt::format("{}:{}", r.endpoint.host, r.endpoint.port)},
                        {"region", r.endpoint.region},
                        {"healthy", r.healthy},
                        {"inflight", r.inflight},
                        {"rtt_us", r.rtt_us},
                        {"service_us", r.service_us},
                        {"served", r.served},
                        {"failures", r.failures},
                        {"reported_inflight", r.reported_inflight},
                        {"tls", r.tls}});
  }
  return nlohmann::json{{"replicas", replicas},
                        {"requests", v.requests},
                        {"retried", v.retried},
                        {"shed", v.shed},
                        {"failed", v.failed},
                        {"removed_kept", v.removed_kept}};
}
}  // namespace

std::string GatewayViewJson(const GatewayView& v) { return ViewJson(v).dump() + "\n"; }


void Route::Init(h2o_loop_t* on, SSL_CTX* ssl, bool healthy) {
  loop = on;
  h2o_timeout_init(loop, &io_timeout, static_cast<uint64_t>(options.upstream_timeout_ms));
  h2o_timeout_init(loop, &probe_io_timeout, static_cast<uint64_t>(std::max<int64_t>(1000, 4 * options.probe_interval_ms)));
  h2o_timeout_init(loop, &probe_interval, static_cast<uint64_t>(options.probe_interval_ms));
  client_ctx.loop = loop;
  client_ctx.io_timeout = &io_timeout;
  probe_ctx.loop = loop;
  probe_ctx.io_timeout = &probe_io_timeout;
  replica_ssl = ssl;
  bearer_line = BearerLine(options.replica_token);
  for (const ReplicaEndpoint& e : options.replicas) Add(e, healthy);
}

bool ValidServiceRouteName(std::string_view name) {
  return !name.empty() && name.size() <= kMaxServiceRouteName &&
         std::all_of(name.begin(), name.end(), [](char c) {
           return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
                  c == '.';
         }) &&
         name != "." && name != "..";
}

namespace {

constexpr std::string_view kServicesPrefix = "/v1/services/";

// Whether a tenant's token reaches a service of `tenant` (`service` names it): its
// tenant's or an admin's; otherwise why not, as the client is told.
http::Admission JudgeTenantToken(const TokenAnswer& a, const std::string& tenant, const std::string& service) {
  if (a.ok()) {
    if (a->admin || a->tenant == tenant) return http::Admission::Admit();
    return http::Admission::Refuse(http::JsonError(
        401, fmt::format("user {} of tenant {} may not call {}: it is another tenant's", a->user, a->tenant, service)));
  }
  switch (a.status().code()) {
    case StatusCode::kResourceExhausted: {
      http::HttpResponse r = http::JsonError(429, fmt::format("the bearer token is not known to this gateway yet, and {}; retry later",
                                                  a.status().message()));
      r.retry_after_s = 1;
      return http::Admission::Refuse(std::move(r));
    }
    case StatusCode::kUnauthenticated:
    case StatusCode::kPermissionDenied:
      return http::Admission::Refuse(
          http::JsonError(401, fmt::format("{} does not take this bearer token: {}", service, a.status().message())));
    default: {
      http::HttpResponse r = http::JsonError(
          503, fmt::format("the bearer token cannot be checked with the coordinator now ({}); retry later", a.status().message()));
      r.retry_after_s = 1;
      return http::Admission::Refuse(std::move(r));
    }
  }
}

// NAME of /v1/services/NAME[/PATH][?QUERY], the path as the client sent it (routing and
// a service's clients' token go by the same text); nullopt for another path.
std::optional<std::string_view> ServiceOfPath(std::string_view path) {
  if (!path.starts_with(kServicesPrefix)) return std::nullopt;
  const std::string_view rest = path.substr(kServicesPrefix.size());
  return rest.substr(0, rest.find_first_of("/?"));
}

}  // namespace

struct Gateway::Impl {
  GatewayOptions options;
  std::unique_ptr<http::LoopServer> server;
  h2o_loop_t* loop = nullptr;
  // On the loop thread: the one service's, named "", or one per service (by_service).
  std::map<std::string, std::unique_ptr<Route>, std::less<>> routes;
  std::atomic<bool> draining{false};
  // Tenants' tokens (GatewayOptions::identify_tokens); after `server`, so that it is
  // gone, its thread joined, before the server it answers through.
  std::unique_ptr<TenantTokens> tenants;

  void Handle(const http::HttpRequest& req, std::unique_ptr<http::Reply> reply);
  void Shutdown() {
    for (auto& [name, r] : routes) r->Shutdown("the gateway is stopping");
  }
  // Runs `fn` on the loop with the route of `service`; false when it has none.
  template <typename Fn>
  bool OnRoute(const std::string& service, Fn&& fn) {
    bool found = false;
    server->RunOnLoopAndWait([&] {
      auto it = routes.find(service);
      if (it == routes.end()) return;
      found = true;
      fn(*it->second);
    });
    return found;
  }
};

void Gateway::Impl::Handle(const http::HttpRequest& req, std::unique_ptr<http::Reply> reply) {
  if (req.path == "/healthz") {
    if (draining) {
      reply->Send(http::JsonError(503, "draining: the replica is stopping"));
      return;
    }
    // As a model's replica does: the requests in flight through it (a command's
    // front: to its command).
    int64_t inflight = 0;
    bool any = false;
    for (const auto& [name, r] : routes) {
      for (const auto& u : r->upstreams) {
        inflight += u->inflight;
        any = any || (!u->removed && u->healthy);
      }
    }
    if (options.front && !any) {
      reply->Send(http::JsonError(503, "the replica's command does not answer its health probe yet"));
      return;
    }
    reply->Send(http::HttpResponse{200, fmt::format("{{\"status\":\"ok\",\"inflight\":{}}}\n", inflight)});
    return;
  }
  if (!options.by_service) {
    Route& only = *routes.begin()->second;
    if (req.path == "/v1/gateway") {
      reply->Send(http::HttpResponse{200, GatewayViewJson(only.View())});
    } else {
      only.Handle(req, req.path, std::move(reply));
    }
    return;
  }
  if (req.path == "/v1/gateway" || req.path == "/v1/services") {
    // Each service's view, or its name alone.
    const bool views = req.path == "/v1/gateway";
    nlohmann::json services = views ? nlohmann::json::object() : nlohmann::json::array();
    for (const auto& [name, r] : routes) {
      if (views) {
        services[name] = ViewJson(r->View());
      } else {
        services.push_back(name);
      }
    }
    reply->Send(http::HttpResponse{200, nlohmann::json{{"region", options.region}, {"services", services}}.dump() + "\n"});
    return;
  }
  // /v1/services/NAME[/PATH][?QUERY]: NAME's replicas get /PATH[?QUERY] ("/" for none).
  const std::optional<std::string_view> named = ServiceOfPath(req.path);
  if (!named) {
    reply->Send(http::JsonError(404, "no such path here: a service's requests go to /v1/services/NAME/PATH (GET "
                               "/v1/services lists the services)"));
    return;
  }
  const std::string_view name = *named;
  std::string path(req.path.substr(kServicesPrefix.size() + name.size()));
  if (path.empty() || path.front() == '?') path.insert(0, "/");
  auto it = routes.find(name);
  if (it == routes.end()) {
    reply->Send(http::JsonError(404, ValidServiceRouteName(name)
                                   ? fmt::format("no service '{}' at this gateway (GET /v1/services lists those it "
                                                 "routes; meridian services, those that run)",
                                                 name)
                                   : std::string("no such service: a service's name is letters, digits, '-', '_' "
                                                 "and '.', at most 128")));
    return;
  }
  it->second->Handle(req, path, std::move(reply));
}

Gateway::Gateway(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

StatusOr<std::unique_ptr<Gateway>> Gateway::Start(GatewayOptions options) {
  MERIDIAN_RETURN_IF_ERROR(CheckGatewayOptions(options));
  if (options.by_service && (!options.replicas.empty() || options.front)) {
    return InvalidArgumentError("a gateway by service is given each service's replicas by AddService, and fronts no command");
  }
  auto impl = std::make_unique<Impl>();
  Impl* g = impl.get();
  g->options = std::move(options);
  SSL_CTX* replica_ssl = nullptr;
  if (!g->options.by_service && g->options.replica_tls.enabled()) {
    MERIDIAN_ASSIGN_OR_RETURN(replica_ssl, ReplicaClientTls(g->options.replica_tls));
  }
  http::LoopServer::Options http;
  http.host = g->options.host;
  http.port = g->options.port;
  http.token = g->options.token;
  http.tls_cert_file = g->options.tls_cert_file;
  http.tls_key_file = g->options.tls_key_file;
  http.tls_cert_pem = g->options.tls_cert_pem;
  http.tls_key_pem = g->options.tls_key_pem;
  http.public_paths = {"/healthz"};
  // A service's clients' token reaches that service's requests, nothing else (a
  // gateway of one service: all but its own view).
  // With identify_tokens, its tenant's own API tokens (and an admin's) too.
  http.also_accept = [g](std::string_view path, std::string_view token, http::Decide decide) {
    std::optional<std::string_view> name;
    if (g->options.by_service) {
      name = ServiceOfPath(path);
    } else if (path != "/v1/gateway") {
      name = "";
    }
    if (!name) return http::Admission::Refuse();
    auto it = g->routes.find(*name);
    if (it == g->routes.end()) return http::Admission::Refuse();
    const GatewayOptions& route = it->second->options;
    if (!route.service_token.empty() && security::ConstantTimeEquals(token, route.service_token)) {
      return http::Admission::Admit();
    }
    // Not an API token's shape: the service's own token mistyped, or a guess.
    if (g->tenants == nullptr || route.tenant.empty() || !model::SplitApiToken(token)) return http::Admission::Refuse();
    std::string service = name->empty() ? "this service" : fmt::format("service {}", *name);
    auto judge = [tenant = route.tenant, service = std::move(service)](const TokenAnswer& a) {
      return JudgeTenantToken(a, tenant, service);
    };
    std::optional<TokenAnswer> known =
        g->tenants->Find(token, [judge, decide = std::move(decide)](const TokenAnswer& a) { decide(judge(a)); });
    return known ? judge(*known) : http::Admission::Later();
  };
  http.name = "meridian-gateway";
  http.on_stop = [g] { g->Shutdown(); };
  auto server = http::LoopServer::Start(http, [g](const http::HttpRequest& req, std::unique_ptr<http::Reply> r) {
    g->Handle(req, std::move(r));
  });
  if (!server.ok()) {
    if (replica_ssl != nullptr) SSL_CTX_free(replica_ssl);
    return server.status();
  }
  g->server = std::move(*server);
  if (g->options.identify_tokens) {
    g->tenants = std::make_unique<TenantTokens>(g->options.identify_tokens, g->options.token_answers);
  }
  g->server->RunOnLoopAndWait([g, replica_ssl] {
    g->loop = g->server->loop();
    if (g->options.by_service) return;
    auto route = std::make_unique<Route>();
    route->options = g->options;
    route->Init(g->loop, replica_ssl, !g->options.front);
    g->routes.emplace("", std::move(route));
  });
  return std::unique_ptr<Gateway>(new Gateway(std::move(impl)));
}

Gateway::~Gateway() {
  if (impl_->server != nullptr) impl_->server->Stop();
}

int Gateway::port() const { return impl_->server->port(); }

Status Gateway::AddService(const std::string& name, const ServiceRoute& service) {
  Impl* g = impl_.get();
  if (!g->options.by_service) {
    return FailedPreconditionError("a gateway of one service routes no other (GatewayOptions::by_service)");
  }
  if (!ValidServiceRouteName(name)) {
    return InvalidArgumentError(fmt::format("service name '{}': expected letters, digits, '-', '_' and '.', at most {}",
                                            name.substr(0, kMaxServiceRouteName), kMaxServiceRouteName));
  }
  GatewayOptions o = g->options;
  o.by_service = false;
  o.region = service.region;
  o.replica_token = service.replica_token;
  o.service_token = service.client_token;
  o.tenant = service.tenant;
  o.replica_tls = service.replica_tls;
  o.resend_unsafe = service.resend_unsafe;
  o.replicas = service.replicas;
  MERIDIAN_RETURN_IF_ERROR(CheckGatewayOptions(o).WithPrefix(fmt::format("service '{}'", name)));
  SSL_CTX* ssl = nullptr;
  if (o.replica_tls.enabled()) {
    MERIDIAN_ASSIGN_OR_RETURN(ssl, ReplicaClientTls(o.replica_tls));
  }
  Status added = OkStatus();
  g->server->RunOnLoopAndWait([&] {
    if (g->routes.count(name) != 0) {
      added = AlreadyExistsError(fmt::format("service '{}' is routed already", name));
    } else if (g->routes.size() >= kMaxServiceRoutes) {
      added = ResourceExhaustedError(fmt::format("service '{}': this gateway routes {} services already, its most",
                                                 name, kMaxServiceRoutes));
    } else {
      auto route = std::make_unique<Route>();
      route->service = name;
      route->options = std::move(o);
      route->Init(g->loop, ssl, false);
      ssl = nullptr;  // the route's now
      g->routes.emplace(name, std::move(route));
    }
  });
  if (ssl != nullptr) SSL_CTX_free(ssl);
  return added;
}

void Gateway::RemoveService(const std::string& name) {
  Impl* g = impl_.get();
  g->server->RunOnLoopAndWait([g, &name] {
    auto it = g->routes.find(name);
    if (it == g->routes.end() || name.empty()) return;
    it->second->Shutdown(fmt::format("service '{}' is no longer served", name));
    g->routes.erase(it);
  });
}

std::vector<std::string> Gateway::Services() {
  Impl* g = impl_.get();
  std::vector<std::string> names;
  g->server->RunOnLoopAndWait([g, &names] {
    for (const auto& [name, r] : g->routes) names.push_back(name);
  });
  return names;
}

void Gateway::SetReplicas(std::vector<ReplicaEndpoint> replicas, const std::string& service) {
  impl_->OnRoute(service, [&replicas](Route& r) {
    for (const auto& u : r.upstreams) {
      if (!u->removed && std::find(replicas.begin(), replicas.end(), u->endpoint) == replicas.end()) {
        u->removed = true;
        if (h2o_timeout_is_linked(&u->timer.entry)) h2o_timeout_unlink(&u->timer.entry);
      }
    }
    for (const ReplicaEndpoint& e : replicas) {
      const bool known = std::any_of(r.upstreams.begin(), r.upstreams.end(), [&](const auto& u) {
        return !u->removed && u->endpoint == e;
      });
      if (!known && !r.Revive(e)) r.Add(e, false);
    }
  });
}

void Gateway::SetReplicaToken(const std::string& token, const std::string& service) {
  std::string line = BearerLine(token);
  impl_->OnRoute(service, [&token, &line](Route& r) {
    r.options.replica_token = token;
    r.bearer_line = std::move(line);
  });
}

void Gateway::SetServiceToken(const std::string& token, const std::string& service) {
  impl_->OnRoute(service, [&token](Route& r) { r.options.service_token = token; });
}

void Gateway::SetServiceTenant(const std::string& tenant, const std::string& service) {
  impl_->OnRoute(service, [&tenant](Route& r) { r.options.tenant = tenant; });
}

TenantTokens::Counters Gateway::TokenCounters() const {
  return impl_->tenants == nullptr ? TenantTokens::Counters{} : impl_->tenants->counters();
}

Status Gateway::SetReplicaTls(const ReplicaTls& tls, const std::string& service) {
  GatewayOptions checked = impl_->options;
  checked.replica_tls = tls;
  MERIDIAN_RETURN_IF_ERROR(CheckGatewayOptions(checked));
  SSL_CTX* ssl = nullptr;
  if (tls.enabled()) {
    MERIDIAN_ASSIGN_OR_RETURN(ssl, ReplicaClientTls(tls));
  }
  const bool found = impl_->OnRoute(service, [&tls, &ssl](Route& r) {
    // The replicas added before keep their reference (and their connections in flight).
    if (r.replica_ssl != nullptr) SSL_CTX_free(r.replica_ssl);
    r.replica_ssl = ssl;
    ssl = nullptr;
    r.options.replica_tls = tls;
    // Each replica anew: its pool's connections were made the old way.
    std::vector<ReplicaEndpoint> live;
    for (const auto& u : r.upstreams) {
      if (u->removed) continue;
      live.push_back(u->endpoint);
      u->removed = true;
      if (h2o_timeout_is_linked(&u->timer.entry)) h2o_timeout_unlink(&u->timer.entry);
    }
    for (const ReplicaEndpoint& e : live) r.Add(e, false);
  });
  if (ssl != nullptr) SSL_CTX_free(ssl);
  return found ? OkStatus() : NotFoundError(fmt::format("service '{}' is not routed here", service));
}

void Gateway::StartDraining() { impl_->draining = true; }

void Gateway::SetResendUnsafe(bool resend_unsafe, const std::string& service) {
  impl_->OnRoute(service, [resend_unsafe](Route& r) { r.options.resend_unsafe = resend_unsafe; });
}

int32_t Gateway::InflightTo(const ReplicaEndpoint& endpoint, const std::string& service) {
  int32_t inflight = 0;
  impl_->OnRoute(service, [&endpoint, &inflight](Route& r) {
    for (const auto& u : r.upstreams) {
      if (u->endpoint == endpoint) inflight += u->inflight;
    }
  });
  return inflight;
}

GatewayView Gateway::Snapshot(const std::string& service) {
  GatewayView view;
  impl_->OnRoute(service, [&view](Route& r) { view = r.View(); });
  return view;
}

}  // namespace meridian::serving
