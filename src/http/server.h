// A small HTTP(S) server for what is read over HTTP rather than gRPC: Prometheus's
// /metrics on the coordinator and every agent, and the coordinator's dashboard.
// Connections are served by loop_server.h's event loop (h2o); the handlers, which may
// take locks or call other nodes, run on `threads` threads of their own.
//
// Security (docs/security.md): with TLS credentials every connection is HTTPS with
// this process's certificate; a client certificate of the cluster's CA may be shown
// (and is then verified) but is not required, since a browser has none: each
// handler decides who may read it, from the request's verified certificate name or
// its bearer token. Without credentials it serves plain HTTP (an insecure cluster).
//
// Bounds: a request's line and headers are at most 8 KiB, its path at most
// kMaxPathBytes (414), its body at most kMaxBodyBytes (413); a request must arrive
// whole within request_timeout_s of its first byte, or its connection is closed; at
// most kMaxConnections connections are open, kMaxConnectionsPerPeer from one address;
// at most `threads` requests are handled at once and kMaxQueuedRequests wait for a
// thread (past that: 503). A client that sends slowly, or not at all, holds only its
// own connection: no thread waits on it.
//
// Thread-safety: handlers run on the server's threads, several at once. Shutdown may
// be called from any thread, once.
#pragma once

#include <functional>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/status.h"
#include "http/loop_server.h"
#include "security/tls.h"


namespace meridian::http {

inline constexpr size_t kMaxBodyBytes = 64 << 10;
inline constexpr size_t kMaxPathBytes = 2048;
inline constexpr size_t kMaxQueuedRequests = 64;
// A scraper reading every agent through the coordinator (/sd/nodes) holds a
// connection per target for up to request_timeout_s after each scrape: 256 from one
// address leaves room for about 750 agents scraped every 15 s.
inline constexpr size_t kMaxConnections = 1024;
inline constexpr size_t kMaxConnectionsPerPeer = 256;

struct Request {
  std::string method;
  std::string path;
  std::vector<std::string> matches;  // the route's capture groups, matches[0] the path
  std::string bearer_token;   // from "Authorization: Bearer ...", else empty
  std::string peer_certificate;  // common name of a verified client certificate, else empty
  std::string peer;           // address:port
  std::string host;           // the Host header: how the client reached this server
};

struct Response {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

// A response with `status` and a one-line plain-text body (an error's reason).
Response TextResponse(int status, std::string text);

// A refusal with `status` and `why`, logged as the gRPC API's are ("audit: refused GET
// /metrics from PEER (certificate NAME): why"). `bearer`: a 401 says a token would do.
Response Refused(const Request& r, int status, const std::string& why, bool bearer);
// Prometheus's text format, as its content type says.
Response MetricsResponse(std::string body);

using Handler = std::function<Response(const Request&)>;

struct Route {
  std::string pattern;  // a regular expression the whole path must match (GET and HEAD)
  Handler handler;
};

struct ServerOptions {
  std::string listen = "127.0.0.1:0";  // host:port; port 0 picks a free one
  security::TlsCredentials tls;        // empty: plain HTTP
  int threads = 2;
  int request_timeout_s = 5;  // also how long a kept-alive connection may idle
  // Files served as they are under "/" (a built web front end); paths that would
  // leave the directory are refused. Empty: none. Routes take precedence.
  std::string static_dir;
};

class Server {
 public:
  static StatusOr<std::unique_ptr<Server>> Start(ServerOptions options, std::vector<Route> routes);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  int port() const { return port_; }
  // host:port as clients reach it.
  std::string address() const;
  // "https://host:port" (or http://).
  std::string url() const;
  void Shutdown();

 private:
  class Workers;
  Server();
  // Which route takes `path` (the first whose pattern matches it whole), its captures
  // in `match`; null for none.
  const Route* FindRoute(const std::string& path, std::smatch& match) const;
  std::string host_;
  int port_ = 0;
  bool tls_ = false;
  std::vector<Route> routes_;
  std::vector<std::regex> patterns_;  // routes_[i]'s pattern, compiled
  std::unique_ptr<Workers> workers_;
  std::unique_ptr<LoopServer> loop_;
};

}  // namespace meridian::http
