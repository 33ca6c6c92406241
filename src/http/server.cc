#include "http/server.h"

#include <openssl/ssl.h>

#include <charconv>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>

#include <fmt/format.h>
#include <httplib.h>

#include "common/logging.h"
#include "http/metrics.h"

namespace meridian::http {
namespace {

// httplib's pool with a bound: a connection waits in the queue for a thread, and once
// kMaxQueuedConnections wait, the accepting thread waits too (so the kernel's
// backlog, not memory, holds a flood of connections).
class BoundedPool final : public httplib::TaskQueue {
 public:
  explicit BoundedPool(int threads) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Work(); });
  }
  ~BoundedPool() override = default;

  void enqueue(std::function<void()> fn) override {
    std::unique_lock<std::mutex> lock(mu_);
    room_.wait(lock, [&] { return jobs_.size() < kMaxQueuedConnections || stopping_; });
    jobs_.push_back(std::move(fn));
    work_.notify_one();
  }

  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    work_.notify_all();
    room_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

 private:
  void Work() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> lock(mu_);
        work_.wait(lock, [&] { return !jobs_.empty() || stopping_; });
        if (jobs_.empty()) return;
        fn = std::move(jobs_.front());
        jobs_.pop_front();
        room_.notify_one();
      }
      fn();
    }
  }

  std::mutex mu_;
  std::condition_variable work_;
  std::condition_variable room_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

std::string_view StatusText(int status) {
  switch (status) {
    case 400: return "bad request";
    case 404: return "no such page";
    case 405: return "method not allowed (GET only)";
    case 413: return "request body too large";
    case 414: return "request line too long";
    default: return status >= 500 ? "internal error" : "refused";
  }
}

Request Translate(const httplib::Request& in) {
  Request r;
  r.method = in.method;
  r.path = in.path;
  for (const auto& m : in.matches) r.matches.push_back(m.str());
  const std::string auth = in.get_header_value("Authorization");
  constexpr std::string_view kBearer = "Bearer ";
  if (auth.size() > kBearer.size() && auth.compare(0, kBearer.size(), kBearer) == 0) {
    r.bearer_token = auth.substr(kBearer.size());
  }
  r.peer_certificate = security::VerifiedPeerName(const_cast<SSL*>(in.ssl));
  r.peer = fmt::format("{}:{}", in.remote_addr, in.remote_port);
  r.host = in.get_header_value("Host");
  return r;
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
  MERIDIAN_LOG_WARN("audit: refused GET {} from {} ({}): {}", r.path, r.peer,
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
  if (options.tls.enabled()) {
    Status configured;
    const security::TlsCredentials tls = options.tls;
    s->server_ = std::make_unique<httplib::SSLServer>([&configured, &tls](SSL_CTX& ctx) {
      configured = security::ConfigureHttpsServer(&ctx, tls);
      return configured.ok();
    });
    if (!configured.ok()) return configured.WithPrefix("HTTPS");
    s->tls_ = true;
  } else {
    s->server_ = std::make_unique<httplib::Server>();
  }
  httplib::Server& srv = *s->server_;
  const int threads = std::max(1, options.threads);
  srv.new_task_queue = [threads] { return new BoundedPool(threads); };
  srv.set_payload_max_length(kMaxBodyBytes);
  srv.set_read_timeout(options.read_timeout_s, 0);
  srv.set_write_timeout(options.read_timeout_s, 0);
  srv.set_keep_alive_timeout(1);
  srv.set_keep_alive_max_count(100);
  for (Route& route : routes) {
    srv.Get(route.pattern, [handler = std::move(route.handler)](const httplib::Request& in, httplib::Response& out) {
      Response r = handler(Translate(in));
      out.status = r.status;
      for (auto& [k, v] : r.headers) out.set_header(k, v);
      out.set_content(std::move(r.body), r.content_type.c_str());
    });
  }
  srv.set_error_handler([](const httplib::Request&, httplib::Response& out) {
    if (out.body.empty()) {
      out.set_content(fmt::format("{}\n", StatusText(out.status)), "text/plain; charset=utf-8");
    }
  });
  srv.set_exception_handler([](const httplib::Request& in, httplib::Response& out, std::exception_ptr e) {
    std::string what = "unknown";
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      what = ex.what();
    } catch (...) {
    }
    MERIDIAN_LOG_ERROR("HTTP {} {}: {}", in.method, in.path, what);
    out.status = 500;
    out.set_content("internal error\n", "text/plain; charset=utf-8");
  });
  if (!options.static_dir.empty()) {
    // The page may load only its own scripts and talk only to this server.
    httplib::Headers headers{{"Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'"},
                             {"X-Content-Type-Options", "nosniff"},
                             {"Referrer-Policy", "no-referrer"},
                             {"Cache-Control", "no-cache"}};
    if (!srv.set_mount_point("/", options.static_dir, headers)) {
      return InvalidArgumentError(fmt::format("cannot serve files from {}: no such directory", options.static_dir));
    }
  }
  if (port == 0) {
    port = srv.bind_to_any_port(s->host_);
    if (port <= 0) return UnavailableError(fmt::format("HTTP: cannot listen on {}", options.listen));
  } else if (!srv.bind_to_port(s->host_, port)) {
    return UnavailableError(fmt::format("HTTP: cannot listen on {} (in use?)", options.listen));
  }
  s->port_ = port;
  s->thread_ = std::thread([&srv] { srv.listen_after_bind(); });
  // Running before it is handed out: a stop() that came before the loop started
  // would be missed, and Shutdown would wait on it for ever.
  for (int i = 0; i < 5000 && !srv.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (!srv.is_running()) {
    srv.stop();
    s->thread_.join();
    return UnavailableError(fmt::format("HTTP: the listener on {} did not start", options.listen));
  }
  return s;
}

Server::~Server() { Shutdown(); }

std::string Server::address() const {
  // An IPv6 literal is bracketed in a URL.
  if (host_.find(':') != std::string::npos && host_.front() != '[') return fmt::format("[{}]:{}", host_, port_);
  return fmt::format("{}:{}", host_, port_);
}

std::string Server::url() const { return fmt::format("{}://{}", tls_ ? "https" : "http", address()); }

void Server::Shutdown() {
  if (server_ == nullptr) return;
  server_->stop();
  if (thread_.joinable()) thread_.join();
  server_.reset();
}

}  // namespace meridian::http
