#include "http/loop_server.h"

#include <fcntl.h>
#include <netdb.h>
#include <sys/socket.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <h2o.h>  // H2O_USE_LIBUV=0 comes from CMake: h2o's own event loop

#include "common/logging.h"
#include "common/net.h"
#include "common/subprocess.h"
#include "security/pki.h"
#include "security/tls.h"

namespace meridian::http {

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
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Payload Too Large";
    case 414: return "URI Too Long";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "Status";
  }
}

// An accepted connection, until h2o closes it (its close callback frees this).
struct OpenSocket {
  LoopServer::State* state;
  h2o_socket_t* sock;  // a key only, once closed
  std::string address;  // the peer's address:port
  std::string peer;     // its address without the port, by which connections are counted
  std::string peer_certificate;  // a verified client certificate's name, once shaken hands
};

}  // namespace

struct LoopServer::State {
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
  std::map<h2o_socket_t*, OpenSocket*> open;  // accepted connections, loop thread only
  std::map<std::string, size_t> open_by_peer;  // loop thread only
  SSL_CTX* ssl = nullptr;
  int port = 0;
  uint64_t refused = 0;  // connections closed at accept for a bound, loop thread only
  // The headers added to files' answers (h2o keeps pointers into these).
  std::vector<h2o_iovec_t> file_header_names;
  std::vector<h2o_headers_command_t> file_header_commands;
};

struct Reply::Impl {
  LoopServer::State* server = nullptr;
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
    for (const auto& [name, value] : r.headers) {
      // HTTP/2 allows lower-case names only (an upper-case one is a protocol error).
      const h2o_iovec_t n = h2o_strdup(&req->pool, name.data(), name.size());
      h2o_strtolower(n.base, n.len);
      const h2o_iovec_t v = h2o_strdup(&req->pool, value.data(), value.size());
      h2o_add_header_by_str(&req->pool, &req->res.headers, n.base, n.len, 1, nullptr, v.base, v.len);
    }
    req->res.content_length = r.body.size();
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
  LoopServer::State* state;
};

bool Post(LoopServer::State* s, std::function<void()> fn) {
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

// "address:port" ("[address]:port" for IPv6) of an accepted socket's peer; empty when
// it is neither IPv4 nor IPv6.
std::string PeerAddress(h2o_socket_t* sock) {
  sockaddr_storage storage{};
  auto* sa = reinterpret_cast<sockaddr*>(&storage);
  const socklen_t len = h2o_socket_getpeername(sock, sa);
  char host[NI_MAXHOST] = "";
  char port[NI_MAXSERV] = "";
  if (len == 0 || getnameinfo(sa, len, host, sizeof(host), port, sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "";
  }
  return sa->sa_family == AF_INET6 ? fmt::format("[{}]:{}", host, port) : fmt::format("{}:{}", host, port);
}

// Who sent `req`: its address and the name its certificate proved, if it showed one,
// both as kept with its connection when it was accepted.
void Describe(LoopServer::State* s, h2o_req_t* req, HttpRequest& out) {
  h2o_socket_t* sock = req->conn->callbacks->get_socket == nullptr ? nullptr : req->conn->callbacks->get_socket(req->conn);
  if (auto it = s->open.find(sock); it != s->open.end()) {
    out.peer = it->second->address;
    out.peer_certificate = it->second->peer_certificate;
  }
}

// Hands an admitted request to the handler (on the loop thread).
void Dispatch(LoopServer::State* s, const std::shared_ptr<Reply::Impl>& impl) {
  h2o_req_t* req = impl->req;
  HttpRequest request;
  request.method = std::string_view(req->method.base, req->method.len);
  request.path = std::string_view(req->path.base, req->path.len);
  if (req->entity.base != nullptr) request.body = std::string_view(req->entity.base, req->entity.len);
  if (const ssize_t at = h2o_find_header(&req->headers, H2O_TOKEN_CONTENT_TYPE, -1); at >= 0) {
    request.content_type = std::string_view(req->headers.entries[at].value.base, req->headers.entries[at].value.len);
  }
  request.version = req->version;
  request.normalized_path = std::string_view(req->path_normalized.base, req->path_normalized.len);
  request.authority = std::string_view(req->authority.base, req->authority.len);
  if (const ssize_t at = h2o_find_header(&req->headers, H2O_TOKEN_AUTHORIZATION, -1); at >= 0) {
    request.authorization = std::string_view(req->headers.entries[at].value.base, req->headers.entries[at].value.len);
  }
  if (s->options.describe_peers) Describe(s, req, request);
  s->handler(request, std::unique_ptr<Reply>(new Reply(impl)));
}

// Carries out also_accept's verdict (on the loop thread).
void Admit(LoopServer::State* s, const std::shared_ptr<Reply::Impl>& impl, const Admission& verdict, bool had_token) {
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
  LoopServer::State* s = reinterpret_cast<HandlerSlot*>(self)->state;
  if (!s->options.static_dir.empty() && s->options.routes && !s->options.routes(std::string_view(req->method.base, req->method.len),
                                              std::string_view(req->path_normalized.base, req->path_normalized.len))) {
    return -1;  // the files' handler's
  }
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

// A connection's close callback (h2o calls it after freeing the socket).
void OnSocketClose(void* data) {
  std::unique_ptr<OpenSocket> open(static_cast<OpenSocket*>(data));
  LoopServer::State* s = open->state;
  s->open.erase(open->sock);
  if (auto it = s->open_by_peer.find(open->peer); it != s->open_by_peer.end() && --it->second == 0) {
    s->open_by_peer.erase(it);
  }
}

void OnAccept(h2o_socket_t* listener, const char* err) {
  if (err != nullptr) return;
  auto* s = static_cast<LoopServer::State*>(listener->data);
  h2o_socket_t* sock = h2o_evloop_socket_accept(listener);
  if (sock == nullptr) return;
  std::string address = PeerAddress(sock);
  std::string peer = HostOfAddress(address);
  const size_t from_peer = s->open_by_peer.contains(peer) ? s->open_by_peer[peer] : 0;
  const size_t per_peer = s->options.max_connections_per_peer;
  if (s->open.size() >= s->options.max_connections || (per_peer > 0 && from_peer >= per_peer)) {
    // Closed before a byte is read: a flood of connections costs this server no more
    // than its bound, and those it holds keep being served.
    // Logged at the first refusal and every 1000th: a flood does not fill the log.
    if (s->refused++ % 1000 == 0) {
      MERIDIAN_LOG_WARN("http server on port {}: refused a connection from {} ({} refused so far): {} open, {} from it; "
                        "the bounds are {}, and {} from one address",
                        s->port, peer, s->refused, s->open.size(), from_peer, s->options.max_connections, per_peer);
    }
    h2o_socket_close(sock);
    return;
  }
  auto* open = new OpenSocket{s, sock, std::move(address), peer, ""};
  s->open.emplace(sock, open);
  ++s->open_by_peer[peer];
  sock->on_close.cb = OnSocketClose;
  sock->on_close.data = open;
  h2o_accept(&s->accept, sock);
}

// OpenSSL's report that a handshake is done: the name of the client's verified
// certificate, if it showed one, is kept with its connection. h2o's sockets speak TLS
// through a BIO whose data is the socket; that pointer is used only when it is one of
// this server's open connections.
void OnTlsInfo(const SSL* ssl, int where, int /*ret*/) {
  if ((where & SSL_CB_HANDSHAKE_DONE) == 0) return;
  auto* s = static_cast<LoopServer::State*>(SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl)));
  BIO* bio = SSL_get_rbio(ssl);
  if (s == nullptr || bio == nullptr) return;
  auto it = s->open.find(static_cast<h2o_socket_t*>(BIO_get_data(bio)));
  if (it != s->open.end()) it->second->peer_certificate = security::VerifiedPeerName(const_cast<SSL*>(ssl));
}

// Runs the loop until every accepted connection has closed or `ms` have passed.
void DrainFor(LoopServer::State* s, int ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (!s->open.empty() && std::chrono::steady_clock::now() < deadline) h2o_evloop_run(s->loop, 10);
}

StatusOr<SSL_CTX*> ServerTls(const LoopServer::Options& o) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == nullptr) return InternalError("cannot make a TLS context");
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  auto fail = [&](std::string what) -> Status {
    const unsigned long e = ERR_get_error();
    char reason[256] = "";
    if (e != 0) ERR_error_string_n(e, reason, sizeof(reason));
    ERR_clear_error();
    SSL_CTX_free(ctx);
    return InvalidArgumentError(e == 0 ? what : fmt::format("{}: {}", what, reason));
  };
  if (o.cluster_tls.enabled()) {
    Status configured = security::ConfigureHttpsServer(ctx, o.cluster_tls);
    if (!configured.ok()) return fail(std::string(configured.message()));
    SSL_CTX_set_info_callback(ctx, OnTlsInfo);
  } else if (o.tls_cert_file.empty()) {
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

LoopServer::LoopServer(std::unique_ptr<State> state) : state_(std::move(state)) {}

StatusOr<std::unique_ptr<LoopServer>> LoopServer::Start(Options options, Handler handler) {
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
  if (options.max_connections < 1) return InvalidArgumentError("max_connections must be positive");
  if (options.request_timeout_ms < 1) return InvalidArgumentError("request_timeout_ms must be positive");
  SSL_CTX* ssl = nullptr;
  if (!options.tls_cert_file.empty() || !options.tls_cert_pem.empty() || options.cluster_tls.enabled()) {
    MERIDIAN_ASSIGN_OR_RETURN(ssl, ServerTls(options));
  }
  auto state = std::make_unique<State>();
  State* s = state.get();
  s->ssl = ssl;
  s->port = port;
  if (ssl != nullptr) SSL_CTX_set_app_data(ssl, s);
  s->options = std::move(options);
  // The process's descriptors serve its other listeners and files too: this one takes
  // at most a quarter of them (of a soft limit of 1024, 256).
  if (const uint64_t files = CurrentOpenFileLimit(); files > 0) {
    const size_t most = std::max<size_t>(static_cast<size_t>(files / 4), 1);
    if (s->options.max_connections > most) {
      MERIDIAN_LOG_INFO("HTTP on port {}: at most {} connections, not {}: a quarter of the process's {} open files",
                        port, most, s->options.max_connections, files);
      s->options.max_connections = most;
    }
  }
  s->handler = std::move(handler);
  if (!s->options.token.empty()) s->bearer = "Bearer " + s->options.token;
  h2o_config_init(&s->config);
  s->config.server_name = h2o_iovec_init(s->options.name.data(), s->options.name.size());
  s->config.max_request_entity_size = static_cast<size_t>(s->options.max_body_bytes);
  const auto timeout_ms = static_cast<uint64_t>(s->options.request_timeout_ms);
  s->config.handshake_timeout = timeout_ms;
  s->config.http1.req_timeout = timeout_ms;
  s->config.http2.idle_timeout = timeout_ms;
  h2o_hostconf_t* host = h2o_config_register_host(&s->config, h2o_iovec_init(H2O_STRLIT("default")), 65535);
  h2o_pathconf_t* path = h2o_config_register_path(host, "/", 0);
  auto* slot = reinterpret_cast<HandlerSlot*>(h2o_create_handler(path, sizeof(HandlerSlot)));
  slot->super.on_req = OnRequest;
  slot->state = s;
  if (!s->options.static_dir.empty()) {
    // reserve: h2o keeps pointers to the names.
    s->file_header_names.reserve(s->options.file_headers.size());
    for (const auto& [name, value] : s->options.file_headers) {
      s->file_header_names.push_back(h2o_iovec_init(name.data(), name.size()));
      s->file_header_commands.push_back(
          {H2O_HEADERS_CMD_SET, &s->file_header_names.back(), h2o_iovec_init(value.data(), value.size())});
    }
    s->file_header_commands.push_back({H2O_HEADERS_CMD_NULL, nullptr, {}});
    h2o_file_register(path, s->options.static_dir.c_str(), nullptr, nullptr, 0);
    if (s->options.file_headers.size() > 0) h2o_headers_register(path, s->file_header_commands.data());
  }
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

  std::unique_ptr<LoopServer> server(new LoopServer(std::move(state)));
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
    for (const auto& [sock, open] : s->open) shutdown(h2o_socket_get_fd(sock), SHUT_RDWR);
    DrainFor(s, 1000);
    if (s->options.on_stop) s->options.on_stop();
    std::lock_guard lock(s->post_mu);
    s->stopped = true;
  });
  std::unique_lock lock(started_mu);
  started_cv.wait(lock, [&] { return started; });
  return server;
}

st_h2o_evloop_t* LoopServer::loop() const { return state_->loop; }

bool LoopServer::RunOnLoopAndWait(const std::function<void()>& fn) {
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

bool LoopServer::RunOnLoop(std::function<void()> fn) {
  return Post(state_.get(), std::move(fn));
}

void LoopServer::Stop() {
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

LoopServer::~LoopServer() { Stop(); }

}  // namespace meridian::http
