#include "http/server.h"

#include <charconv>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <mutex>
#include <regex>

#include <fmt/format.h>

#include "common/logging.h"
#include "http/metrics.h"

namespace meridian::http {

// The threads handlers run on, with a bounded queue: a request past the bound is
// answered 503 at once rather than kept.
class Server::Workers {
 public:
  explicit Workers(int threads) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Work(); });
  }
  // Drops what waits (each waiting request's Reply, dropped, answers 500 or, once the
  // loop has ended, nothing) and joins the threads after their current handler.
  ~Workers() {
    std::deque<std::function<void()>> dropped;
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
      dropped.swap(jobs_);
    }
    work_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  Workers(const Workers&) = delete;
  Workers& operator=(const Workers&) = delete;

  // False when kMaxQueuedRequests already wait (`fn` is then not kept).
  bool Submit(std::function<void()> fn) {
    {
      std::lock_guard lock(mu_);
      if (stopping_ || jobs_.size() >= kMaxQueuedRequests) return false;
      jobs_.push_back(std::move(fn));
    }
    work_.notify_one();
    return true;
  }

 private:
  void Work() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock lock(mu_);
        work_.wait(lock, [&] { return !jobs_.empty() || stopping_; });
        if (stopping_) return;
        fn = std::move(jobs_.front());
        jobs_.pop_front();
      }
      fn();
    }
  }

  std::mutex mu_;
  std::condition_variable work_;
  std::deque<std::function<void()>> jobs_;  // GUARDED_BY(mu_)
  bool stopping_ = false;                   // GUARDED_BY(mu_)
  std::vector<std::thread> threads_;
};

namespace {

HttpResponse ToWire(Response r) {
  HttpResponse out;
  out.status = r.status;
  out.body = std::move(r.body);
  out.content_type = std::move(r.content_type);
  out.headers = std::move(r.headers);
  return out;
}

}  // namespace

Response TextResponse(int status, std::string text) {
  Response r;
  r.status = status;
  r.body = std::move(text);
  r.body += '\n';
  return r;
}

Response Refused(const Request& r, int status, const std::string& why, bool bearer) {
  MERIDIAN_LOG_WARN("audit: refused {} {} from {} ({}): {}", r.method, r.path, r.peer,
                    r.peer_certificate.empty() ? "no certificate" : "certificate " + r.peer_certificate, why);
  Response out = TextResponse(status, why);
  if (bearer && status == 401) out.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"meridian\"");
  return out;
}

Response MetricsResponse(std::string body) {
  Response out;
  out.content_type = std::string(kMetricsContentType);
  out.body = std::move(body);
  return out;
}

StatusOr<std::unique_ptr<Server>> Server::Start(ServerOptions options, std::vector<Route> routes) {
  const size_t colon = options.listen.rfind(':');
  if (colon == std::string::npos) {
    return InvalidArgumentError(fmt::format("HTTP listen address '{}': expected HOST:PORT", options.listen));
  }
  std::unique_ptr<Server> s(new Server());
  s->host_ = options.listen.substr(0, colon);
  // "[::1]:8080": the brackets are the address's, not the host's.
  if (s->host_.size() > 2 && s->host_.front() == '[' && s->host_.back() == ']') {
    s->host_ = s->host_.substr(1, s->host_.size() - 2);
  }
  int port = -1;
  const std::string_view digits = std::string_view(options.listen).substr(colon + 1);
  if (std::from_chars(digits.data(), digits.data() + digits.size(), port).ptr != digits.data() + digits.size() ||
      digits.empty()) {
    port = -1;
  }
  if (port < 0 || port > 65535) {
    return InvalidArgumentError(fmt::format("HTTP listen address '{}': the port must be 0 to 65535", options.listen));
  }
  if (options.threads < 1) return InvalidArgumentError("HTTP: threads must be positive");
  if (options.request_timeout_s < 1) return InvalidArgumentError("HTTP: request_timeout_s must be positive");
  for (const Route& route : routes) {
    try {
      s->patterns_.emplace_back(route.pattern);
    } catch (const std::regex_error& e) {
      return InvalidArgumentError(fmt::format("HTTP route '{}': {}", route.pattern, e.what()));
    }
  }
  if (!options.static_dir.empty() && !std::filesystem::is_directory(options.static_dir)) {
    return InvalidArgumentError(fmt::format("cannot serve files from {}: no such directory", options.static_dir));
  }
  s->tls_ = options.tls.enabled();
  s->routes_ = std::move(routes);
  s->workers_ = std::make_unique<Workers>(options.threads);

  LoopServer::Options lo;
  lo.host = s->host_;
  lo.port = port;
  lo.max_body_bytes = static_cast<int64_t>(kMaxBodyBytes);
  lo.cluster_tls = options.tls;
  lo.describe_peers = true;
  lo.request_timeout_ms = options.request_timeout_s * 1000;
  lo.max_connections = kMaxConnections;
  lo.max_connections_per_peer = kMaxConnectionsPerPeer;
  lo.name = "meridian";
  if (!options.static_dir.empty()) {
    lo.static_dir = options.static_dir;
    // The page may load only its own scripts and talk only to this server.
    lo.file_headers = {{"content-security-policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'"},
                       {"x-content-type-options", "nosniff"},
                       {"referrer-policy", "no-referrer"},
                       {"cache-control", "no-cache"}};
    // What no route takes is a file's (h2o's file handler: GET and HEAD, no listings).
    lo.routes = [server = s.get()](std::string_view, std::string_view path) {
      if (path.size() > kMaxPathBytes) return true;
      std::smatch match;
      return server->FindRoute(std::string(path), match) != nullptr;
    };
  }
  Server* server = s.get();
  auto started = LoopServer::Start(std::move(lo), [server](const HttpRequest& in, std::unique_ptr<Reply> reply) {
    if (in.normalized_path.size() > kMaxPathBytes) {
      reply->Send(ToWire(TextResponse(414, fmt::format("the path is over {} bytes", kMaxPathBytes))));
      return;
    }
    // HEAD is a GET whose answer's body is left out (h2o leaves it out).
    if (in.method != "GET" && in.method != "HEAD") {
      reply->Send(ToWire(TextResponse(405, "method not allowed (GET and HEAD only)")));
      return;
    }
    Request r;
    r.method = std::string(in.method);
    r.path = std::string(in.normalized_path);
    std::smatch match;
    const Route* route = server->FindRoute(r.path, match);
    if (route == nullptr) {
      reply->Send(ToWire(TextResponse(404, "no such page")));
      return;
    }
    for (const auto& m : match) r.matches.push_back(m.str());
    constexpr std::string_view kBearer = "Bearer ";
    if (in.authorization.size() > kBearer.size() && in.authorization.starts_with(kBearer)) {
      r.bearer_token = std::string(in.authorization.substr(kBearer.size()));
    }
    r.peer_certificate = in.peer_certificate;
    r.peer = in.peer;
    r.host = std::string(in.authority);
    auto shared_reply = std::make_shared<std::unique_ptr<Reply>>(std::move(reply));
    const bool queued = server->workers_->Submit([route, r = std::move(r), shared_reply] {
      Response out;
      try {
        out = route->handler(r);
      } catch (const std::exception& e) {
        MERIDIAN_LOG_ERROR("HTTP {} {}: {}", r.method, r.path, e.what());
        out = TextResponse(500, "internal error");
      }
      (*shared_reply)->Send(ToWire(std::move(out)));
    });
    if (!queued) {
      Response busy = TextResponse(503, fmt::format("busy: {} requests already wait for this server", kMaxQueuedRequests));
      busy.headers.emplace_back("retry-after", "1");
      (*shared_reply)->Send(ToWire(std::move(busy)));
    }
  });
  if (!started.ok()) {
    if (started.status().code() == StatusCode::kInvalidArgument) return started.status().WithPrefix("HTTPS");
    return UnavailableError(fmt::format("HTTP: cannot listen on {} ({})", options.listen, started.status().message()));
  }
  s->loop_ = std::move(*started);
  s->port_ = s->loop_->port();
  return s;
}

Server::Server() = default;

const Route* Server::FindRoute(const std::string& path, std::smatch& match) const {
  for (size_t i = 0; i < routes_.size(); ++i) {
    if (std::regex_match(path, match, patterns_[i])) return &routes_[i];
  }
  return nullptr;
}
Server::~Server() { Shutdown(); }

std::string Server::address() const {
  // An IPv6 literal is bracketed in a URL.
  if (host_.find(':') != std::string::npos && host_.front() != '[') return fmt::format("[{}]:{}", host_, port_);
  return fmt::format("{}:{}", host_, port_);
}

std::string Server::url() const { return fmt::format("{}://{}", tls_ ? "https" : "http", address()); }

void Server::Shutdown() {
  if (loop_ == nullptr) return;
  // The loop first (no new request reaches a worker), then the workers (a reply sent
  // now is dropped), then the loop's memory, which their replies point into.
  loop_->Stop();
  workers_.reset();
  loop_.reset();
}

}  // namespace meridian::http
