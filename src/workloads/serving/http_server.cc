#include "workloads/serving/http_server.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <h2o.h>  // H2O_USE_LIBUV=0 comes from CMake: h2o's own event loop

#include "common/logging.h"
#include "common/net.h"
#include "common/subprocess.h"
#include "security/pki.h"
#include "security/tls.h"

namespace meridian::serving {

namespace {

// A function run on the loop thread: every cross-thread hand-over is one of these.
struct LoopTask {
  h2o_multithread_message_t message;  // first: the queue links through it
  std::function<void()> fn;
};

const char* Reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Payload Too Large";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "Status";
  }
}

}  // namespace

struct HttpServer::State {
  Options options;
  Handler handler;
  h2o_globalconf_t config{};
  h2o_context_t context{};
  h2o_accept_ctx_t accept{};
  h2o_evloop_t* loop = nullptr;
  h2o_socket_t* listener = nullptr;
  h2o_multithread_queue_t* queue = nullptr;
  h2o_multithread_receiver_t receiver{};
  std::string bearer;  // "Bearer TOKEN", or empty
  std::atomic<bool> stopping{false};
  std::mutex post_mu;  // a post and the loop's end do not cross
  bool stopped = false;  // GUARDED_BY(post_mu): nothing more is posted
  std::thread::id loop_thread;
  std::set<h2o_socket_t*> open;  // accepted connections, loop thread only
  SSL_CTX* ssl = nullptr;
};

struct Reply::Impl {
  HttpServer::State* server = nullptr;
  h2o_req_t* req = nullptr;  // null once the request is gone (its pool disposed)
  bool sent = false;         // loop thread only, as is req

  // On the loop thread.
  void SendNow(const HttpResponse& r) {
    if (sent || req == nullptr) return;
    sent = true;
    req->res.status = r.status;
    req->res.reason = Reason(r.status);
    const h2o_iovec_t type = h2o_strdup(&req->pool, r.content_type.data(), r.content_type.size());
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, nullptr, type.base, type.len);
    if (r.retry_after_s > 0) {
      const std::string after = std::to_string(r.retry_after_s);
      const h2o_iovec_t v = h2o_strdup(&req->pool, after.data(), after.size());
      h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_RETRY_AFTER, nullptr, v.base, v.len);
    }
    if (!r.replica.empty()) {
      static constexpr char kName[] = "x-meridian-replica";
      const h2o_iovec_t v = h2o_strdup(&req->pool, r.replica.data(), r.replica.size());
      h2o_add_header_by_str(&req->pool, &req->res.headers, kName, sizeof(kName) - 1, 0, nullptr, v.base, v.len);
    }
    h2o_send_inline(req, r.body.data(), r.body.size());
  }
};

namespace {

// Lives in the request's pool: when h2o disposes the request, its Reply learns so.
struct ReplyAnchor {
  std::shared_ptr<Reply::Impl> impl;
};

void DisposeAnchor(void* p) {
  auto* anchor = static_cast<ReplyAnchor*>(p);
  anchor->impl->req = nullptr;
  anchor->~ReplyAnchor();
}

struct HandlerSlot {
  h2o_handler_t super;  // first: h2o hands us this pointer
  HttpServer::State* state;
};

bool Post(HttpServer::State* s, std::function<void()> fn) {
  std::lock_guard lock(s->post_mu);
  if (s->stopped) return false;
  auto* task = new LoopTask{};
  task->fn = std::move(fn);
  h2o_multithread_send_message(&s->receiver, &task->message);
  return true;
}

void OnMessages(h2o_multithread_receiver_t*, h2o_linklist_t* messages) {
  while (!h2o_linklist_is_empty(messages)) {
    auto* message = H2O_STRUCT_FROM_MEMBER(h2o_multithread_message_t, link, messages->next);
    h2o_linklist_unlink(&message->link);
    std::unique_ptr<LoopTask> task(reinterpret_cast<LoopTask*>(message));
    task->fn();
  }
}

// Hands an admitted request to the handler (on the loop thread).
void Dispatch(HttpServer::State* s, const std::shared_ptr<Reply::Impl>& impl) {
  h2o_req_t* req = impl->req;
  HttpRequest request;
  request.method = std::string_view(req->method.base, req->method.len);
  request.path = std::string_view(req->path.base, req->path.len);
  if (req->entity.base != nullptr) request.body = std::string_view(req->entity.base, req->entity.len);
  if (const ssize_t at = h2o_find_header(&req->headers, H2O_TOKEN_CONTENT_TYPE, -1); at >= 0) {
    request.content_type = std::string_view(req->headers.entries[at].value.base, req->headers.entries[at].value.len);
  }
  request.version = req->version;
  s->handler(request, std::unique_ptr<Reply>(new Reply(impl)));
}

// Carries out also_accept's verdict (on the loop thread).
void Admit(HttpServer::State* s, const std::shared_ptr<Reply::Impl>& impl, const Admission& verdict, bool had_token) {
  if (impl->req == nullptr) return;  // its client went while it waited
  if (verdict.kind == Admission::Kind::kAdmit) {
    Dispatch(s, impl);
  } else if (verdict.refusal.status != 0) {
    impl->SendNow(verdict.refusal);
  } else {
    impl->SendNow(JsonError(401, had_token ? "the bearer token is not this service's"
                                           : "no 'Authorization: Bearer TOKEN' header: this service needs its token"));
  }
}

int OnRequest(h2o_handler_t* self, h2o_req_t* req) {
  HttpServer::State* s = reinterpret_cast<HandlerSlot*>(self)->state;
  auto impl = std::make_shared<Reply::Impl>();
  impl->server = s;
  impl->req = req;
  auto* anchor = static_cast<ReplyAnchor*>(h2o_mem_alloc_shared(&req->pool, sizeof(ReplyAnchor), DisposeAnchor));
  new (anchor) ReplyAnchor{impl};
  const std::string_view path(req->path_normalized.base, req->path_normalized.len);
  const auto& open = s->options.public_paths;
  if (!s->bearer.empty() && std::find(open.begin(), open.end(), path) == open.end()) {
    const ssize_t at = h2o_find_header(&req->headers, H2O_TOKEN_AUTHORIZATION, -1);
    const std::string_view given =
        at < 0 ? std::string_view() : std::string_view(req->headers.entries[at].value.base, req->headers.entries[at].value.len);
    if (at < 0 || !security::ConstantTimeEquals(given, s->bearer)) {
      Admission verdict;
      if (at >= 0 && s->options.also_accept && given.starts_with("Bearer ")) {
        Decide later = [s, impl](Admission decided) {
          Post(s, [s, impl, decided = std::move(decided)] { Admit(s, impl, decided, true); });
        };
        verdict = s->options.also_accept(std::string_view(req->path.base, req->path.len), given.substr(7),
                                         std::move(later));
        if (verdict.kind == Admission::Kind::kLater) return 0;
      }
      Admit(s, impl, verdict, at >= 0);
      return 0;
    }
  }
  Dispatch(s, impl);
  return 0;
}

// What a connection's close callback needs (h2o calls it after freeing the socket).
struct OpenSocket {
  HttpServer::State* state;
  h2o_socket_t* sock;  // a key only, once closed
};

void OnSocketClose(void* data) {
  std::unique_ptr<OpenSocket> open(static_cast<OpenSocket*>(data));
  open->state->open.erase(open->sock);
}

void OnAccept(h2o_socket_t* listener, const char* err) {
  if (err != nullptr) return;
  auto* s = static_cast<HttpServer::State*>(listener->data);
  h2o_socket_t* sock = h2o_evloop_socket_accept(listener);
  if (sock == nullptr) return;
  s->open.insert(sock);
  sock->on_close.cb = OnSocketClose;
  sock->on_close.data = new OpenSocket{s, sock};
  h2o_accept(&s->accept, sock);
}

// Runs the loop until every accepted connection has closed or `ms` have passed.
void DrainFor(HttpServer::State* s, int ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (!s->open.empty() && std::chrono::steady_clock::now() < deadline) h2o_evloop_run(s->loop, 10);
}

StatusOr<SSL_CTX*> ServerTls(const HttpServer::Options& o) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == nullptr) return InternalError("cannot make a TLS context");
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  auto fail = [&](std::string what) -> Status {
    const unsigned long e = ERR_get_error();
    char reason[256] = "";
    if (e != 0) ERR_error_string_n(e, reason, sizeof(reason));
    ERR_clear_error();
    SSL_CTX_free(ctx);
    return InvalidArgumentError(fmt::format("{}: {}", what, reason));
  };
  if (o.tls_cert_file.empty()) {
    Status used = security::UseCertificate(ctx, o.tls_cert_pem, o.tls_key_pem);
    if (!used.ok()) return fail(std::string(used.message()));
  } else {
    const std::string& cert = o.tls_cert_file;
    const std::string& key = o.tls_key_file;
    if (SSL_CTX_use_certificate_chain_file(ctx, cert.c_str()) != 1) return fail(fmt::format("--tls-cert '{}'", cert));
    if (SSL_CTX_use_PrivateKey_file(ctx, key.c_str(), SSL_FILETYPE_PEM) != 1) {
      return fail(fmt::format("--tls-key '{}'", key));
    }
    if (SSL_CTX_check_private_key(ctx) != 1) return fail("the TLS key is not the certificate's");
  }
  h2o_ssl_register_alpn_protocols(ctx, h2o_http2_alpn_protocols);
  return ctx;
}

}  // namespace

Reply::~Reply() {
  if (impl_ == nullptr) return;
  // An unsent reply (a handler's bug or an exception) still answers its client.
  Send(JsonError(500, "the handler returned no response"));
}

void Reply::Send(HttpResponse response) {
  std::shared_ptr<Impl> impl = std::move(impl_);
  if (impl == nullptr) return;
  if (std::this_thread::get_id() == impl->server->loop_thread) {
    impl->SendNow(response);
    return;
  }
  Post(impl->server, [impl, response = std::move(response)] { impl->SendNow(response); });
}

HttpResponse JsonError(int status, std::string_view message) {
  HttpResponse r;
  r.status = status;
  // The message may quote what a client sent (a path), in any bytes: JSON text is
  // UTF-8, and a throw here would end the loop thread.
  r.body = nlohmann::json{{"error", message}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  return r;
}

HttpServer::HttpServer(std::unique_ptr<State> state) : state_(std::move(state)) {}

StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(Options options, Handler handler) {
  if (options.max_body_bytes < 1) return InvalidArgumentError("max_body_bytes must be positive");
  // h2o writes to its sockets with writev(): a client that closes while its answer is
  // written would otherwise kill the whole process with SIGPIPE (seen: `bench serve`,
  // under TSan, when wrk closed its connections at the end of a run).
  IgnoreBrokenPipes();
  MERIDIAN_ASSIGN_OR_RETURN(auto listener, TcpListener::Listen(options.host, options.port));
  const int port = listener->port();
  const int fd = listener->ReleaseFd();
  fcntl(fd, F_SETFL, O_NONBLOCK);

  if (options.tls_cert_file.empty() != options.tls_key_file.empty() ||
      options.tls_cert_pem.empty() != options.tls_key_pem.empty()) {
    return InvalidArgumentError("TLS needs both a certificate and its key (--tls-cert and --tls-key)");
  }
  SSL_CTX* ssl = nullptr;
  if (!options.tls_cert_file.empty() || !options.tls_cert_pem.empty()) {
    MERIDIAN_ASSIGN_OR_RETURN(ssl, ServerTls(options));
  }
  auto state = std::make_unique<State>();
  State* s = state.get();
  s->ssl = ssl;
  s->options = std::move(options);
  s->handler = std::move(handler);
  if (!s->options.token.empty()) s->bearer = "Bearer " + s->options.token;
  h2o_config_init(&s->config);
  s->config.server_name = h2o_iovec_init(s->options.name.data(), s->options.name.size());
  s->config.max_request_entity_size = static_cast<size_t>(s->options.max_body_bytes);
  h2o_hostconf_t* host = h2o_config_register_host(&s->config, h2o_iovec_init(H2O_STRLIT("default")), 65535);
  h2o_pathconf_t* path = h2o_config_register_path(host, "/", 0);
  auto* slot = reinterpret_cast<HandlerSlot*>(h2o_create_handler(path, sizeof(HandlerSlot)));
  slot->super.on_req = OnRequest;
  slot->state = s;
  s->loop = h2o_evloop_create();
  h2o_context_init(&s->context, s->loop, &s->config);
  s->accept.ctx = &s->context;
  s->accept.hosts = s->config.hosts;
  s->accept.ssl_ctx = s->ssl;
  s->queue = h2o_multithread_create_queue(s->loop);
  h2o_multithread_register_receiver(s->queue, &s->receiver, OnMessages);
  s->listener = h2o_evloop_socket_create(s->loop, fd, H2O_SOCKET_FLAG_DONT_READ);
  s->listener->data = s;
  h2o_socket_read_start(s->listener, OnAccept);

  std::unique_ptr<HttpServer> server(new HttpServer(std::move(state)));
  server->port_ = port;
  std::mutex started_mu;
  std::condition_variable started_cv;
  bool started = false;
  server->thread_ = std::thread([s, &started_mu, &started_cv, &started] {
    {
      // Notified under the lock: Start's waiter owns the condition and may return
      // (destroying it) as soon as it sees `started`.
      std::lock_guard lock(started_mu);
      s->loop_thread = std::this_thread::get_id();
      started = true;
      started_cv.notify_all();
    }
    while (!s->stopping.load()) h2o_evloop_run(s->loop, INT32_MAX);
    // Close the listener and ask open connections to finish (HTTP/2's GOAWAY); then
    // shut the sockets of those still open (idle kept-alive ones), which h2o closes as
    // it reads their end.
    h2o_socket_read_stop(s->listener);
    h2o_socket_close(s->listener);
    h2o_context_request_shutdown(&s->context);
    DrainFor(s, 50);
    for (h2o_socket_t* sock : s->open) shutdown(h2o_socket_get_fd(sock), SHUT_RDWR);
    DrainFor(s, 1000);
    if (s->options.on_stop) s->options.on_stop();
    std::lock_guard lock(s->post_mu);
    s->stopped = true;
  });
  std::unique_lock lock(started_mu);
  started_cv.wait(lock, [&] { return started; });
  return server;
}

st_h2o_evloop_t* HttpServer::loop() const { return state_->loop; }

bool HttpServer::RunOnLoopAndWait(const std::function<void()>& fn) {
  // A mutex and a condition rather than std::promise, whose wait ThreadSanitizer
  // cannot follow.
  struct Done {
    std::mutex mu;
    std::condition_variable cv;
    bool ran = false;
  };
  auto done = std::make_shared<Done>();
  if (!RunOnLoop([done, &fn] {
        fn();
        std::lock_guard lock(done->mu);
        done->ran = true;
        done->cv.notify_all();
      })) {
    return false;
  }
  std::unique_lock lock(done->mu);
  done->cv.wait(lock, [&] { return done->ran; });
  return true;
}

bool HttpServer::RunOnLoop(std::function<void()> fn) {
  return Post(state_.get(), std::move(fn));
}

void HttpServer::Stop() {
  if (!thread_.joinable()) return;
  State* s = state_.get();
  Post(s, [s] { s->stopping.store(true); });
  thread_.join();
  if (!s->open.empty()) {
    // Connections that did not close in time keep the loop's memory: leaking it is
    // safer than freeing what they point into (the process is usually exiting).
    MERIDIAN_LOG_WARN("http server on port {}: connections still open at stop", port_);
    (void)state_.release();
    return;
  }
  // Run what was posted meanwhile (replies to gone requests: dropped).
  h2o_evloop_run(s->loop, 0);
  // request_shutdown armed HTTP/2's graceful-shutdown timer; no connection needs it now.
  if (h2o_timeout_is_linked(&s->context.http2._graceful_shutdown_timeout)) {
    h2o_timeout_unlink(&s->context.http2._graceful_shutdown_timeout);
  }
  h2o_multithread_unregister_receiver(s->queue, &s->receiver);
  h2o_multithread_destroy_queue(s->queue);
  h2o_context_dispose(&s->context);
  h2o_evloop_run(s->loop, 0);  // frees the sockets closed above (the queue's, the pools')
  h2o_evloop_destroy(s->loop);
  h2o_config_dispose(&s->config);
  if (s->ssl != nullptr) SSL_CTX_free(s->ssl);
}

HttpServer::~HttpServer() { Stop(); }

}  // namespace meridian::serving
