// Meridian's HTTP server: HTTP/1.1 and HTTP/2 (over TLS by ALPN, or cleartext by
// prior knowledge or Upgrade: h2c) on one port, served by h2o's event loop (Debian's
// libh2o-evloop) on one thread. A model replica and the gateway answer on it; so do
// the coordinator's and agents' /metrics and the dashboard (server.h, which runs its
// handlers on threads of its own).
//
// Bounds, each checked before what it bounds is read or kept: a request's line and
// headers at most 8 KiB (h2o's), its body at most max_body_bytes (413); a request
// must arrive whole within request_timeout_ms of its first byte, and a TLS handshake
// end within the same, or the connection is closed; at most max_connections are open
// at once, and at most max_connections_per_peer from one address (a connection past
// either is closed as it is accepted). A client that sends slowly holds only its own
// connection: no thread waits on it. When a token is set, a request without
// "Authorization: Bearer TOKEN" is answered 401 before any handler sees it.
//
// A handler runs on the loop thread and answers through its Reply, at once or later
// from any thread (a batch computed elsewhere). A reply to a client that has gone is
// dropped.
//
// Thread-safety: Start and Stop from one thread; Reply::Send from any thread, once;
// RunOnLoop from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "common/status.h"
#include "security/tls.h"

struct st_h2o_evloop_t;

namespace meridian::http {

struct HttpRequest {
  std::string_view method;
  std::string_view path;  // with its query, as sent
  std::string_view body;
  std::string_view content_type;  // its Content-Type header (empty: none)
  int version = 0x101;  // 0x100, 0x101 or 0x200 (HTTP/2)
  std::string_view normalized_path;  // without its query, dot segments resolved
  std::string_view authority;        // the Host header (HTTP/1) or :authority (HTTP/2)
  std::string_view authorization;    // the Authorization header, empty when none
  // With Options::describe_peers only (empty otherwise):
  std::string peer;              // the client's address:port
  std::string peer_certificate;  // the common name of its verified certificate, if shown
};

struct HttpResponse {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
  // Seconds for a Retry-After header (a shed request), 0 for none.
  int retry_after_s = 0;
  // The gateway's X-Meridian-Replica header: which replica answered (empty: none).
  std::string replica = {};
  std::vector<std::pair<std::string, std::string>> headers = {};  // any others
};

class LoopServer;

// What LoopServer::Options::also_accept says of a request.
struct Admission {
  enum class Kind { kAdmit, kRefuse, kLater };
  Kind kind = Kind::kRefuse;
  // kRefuse: the answer; a status of 0 answers the server's own 401.
  HttpResponse refusal = {0, ""};
  static Admission Admit() { return {Kind::kAdmit}; }
  static Admission Refuse(HttpResponse r = {0, ""}) { return {Kind::kRefuse, std::move(r)}; }
  static Admission Later() { return {Kind::kLater}; }
};
// Given kAdmit or kRefuse, once.
using Decide = std::function<void(Admission)>;

// What a handler owes its request. Send once; a Reply dropped unsent answers 500.
class Reply {
 public:
  ~Reply();
  void Send(HttpResponse response);

  // Made by the server only (Impl is its own).
  struct Impl;
  explicit Reply(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

 private:
  std::shared_ptr<Impl> impl_;
};

class LoopServer {
 public:
  using Handler = std::function<void(const HttpRequest&, std::unique_ptr<Reply>)>;

  struct Options {
    std::string host = "127.0.0.1";
    int port = 0;  // 0: a free one (see port())
    int64_t max_body_bytes = int64_t{1} << 20;
    std::string token;  // empty: no authentication (tests of the library alone)
    // HTTPS when both are given (PEM files: the certificate chain, its key): TLS 1.2
    // or newer, HTTP/2 chosen by ALPN ("h2"), HTTP/1.1 otherwise.
    std::string tls_cert_file;
    std::string tls_key_file;
    // The same as PEM text (a service's replicas get theirs in their environment);
    // used when the files are not given.
    std::string tls_cert_pem;
    std::string tls_key_pem;
    // Or HTTPS with the cluster's credentials (security::ConfigureHttpsServer): a
    // client certificate of its CA may be shown, and is then verified; its name
    // reaches the handler when describe_peers is set.
    security::TlsCredentials cluster_tls;
    bool describe_peers = false;
    int request_timeout_ms = 10'000;
    size_t max_connections = 4096;
    size_t max_connections_per_peer = 0;  // 0: no bound of its own
    // Files served as they are for what `routes` declines (a built web front end),
    // with `file_headers` added to every answer; paths that would leave the directory
    // are refused. Empty: none, and `routes` is not asked.
    std::string static_dir;
    std::vector<std::pair<std::string, std::string>> file_headers;
    std::function<bool(std::string_view method, std::string_view normalized_path)> routes;
    // Paths answered without the token (a load balancer's health check).
    std::vector<std::string> public_paths;
    // Other tokens, each for some paths: when set and the request's bearer token is not
    // `token`, this judges the request, given the path as the client sent it (with its
    // query: the handler routes by the same text) and the token. It runs on the loop
    // thread and may answer later (Admission::Later(), then `decide` once, from any
    // thread; the request waits, and is dropped if its client goes meanwhile). Tokens
    // are compared in constant time.
    std::function<Admission(std::string_view path, std::string_view token, Decide decide)> also_accept;
    std::string name = "meridian";  // the Server header
    // Runs on the loop thread as it ends, after the server's connections: whoever ran
    // clients or timers on the loop releases them here, before the loop is freed.
    std::function<void()> on_stop;
  };

  // Listens, then serves on its own thread until Stop or destruction.
  static StatusOr<std::unique_ptr<LoopServer>> Start(Options options, Handler handler);
  ~LoopServer();
  LoopServer(const LoopServer&) = delete;
  LoopServer& operator=(const LoopServer&) = delete;

  int port() const { return port_; }
  // The loop, for clients that run on it (the gateway's upstream connections).
  st_h2o_evloop_t* loop() const;
  // Runs `fn` on the loop thread soon; false (and `fn` dropped) once the loop has ended.
  bool RunOnLoop(std::function<void()> fn);
  // The same, and waits until it has run (not from the loop thread).
  bool RunOnLoopAndWait(const std::function<void()>& fn);
  // Stops accepting and serving; the loop thread has ended when it returns.
  void Stop();

  struct State;

 private:
  explicit LoopServer(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
  int port_ = 0;
  std::thread thread_;
};

// A JSON error body: {"error": message}, each byte of `message` that is not UTF-8
// written as U+FFFD.
HttpResponse JsonError(int status, std::string_view message);

}  // namespace meridian::http
