#include "security/tls.h"

#include <fcntl.h>
#include <poll.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <cerrno>
#include <chrono>
#include <ctime>
#include <filesystem>

#include <fmt/format.h>

#include "common/mapped_file.h"
#include "common/subprocess.h"
#include "security/pki.h"

namespace meridian::security {
namespace {

std::string SslError() {
  unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "the connection closed";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

// A PEM file of at most 1 MiB, judged by its size before any of it is read: once it was
// read whole first, so a link to /dev/zero in a TLS directory grew without end.
StatusOr<std::string> ReadPem(const std::filesystem::path& path) {
  StatusOr<std::unique_ptr<MappedFile>> file = MappedFile::Open(path.string());
  if (!file.ok()) {
    if (file.status().code() == StatusCode::kNotFound) return NotFoundError(fmt::format("cannot read {}", path.string()));
    return file.status();
  }
  if ((*file)->size() > (1 << 20)) return InvalidArgumentError(fmt::format("{} is over 1 MiB", path.string()));
  return std::string((*file)->data());
}

std::string PeerName(SSL* ssl) {
  X509* cert = SSL_get0_peer_certificate(ssl);
  if (cert == nullptr) return {};
  char buf[256];
  if (X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, buf, sizeof(buf)) <= 0) return {};
  return buf;
}

class TlsStreamImpl final : public ByteStream {
 public:
  // Over `tcp`, which `owned` holds when the stream owns it.
  TlsStreamImpl(TcpStream& tcp, std::unique_ptr<TcpStream> owned, SSL* ssl)
      : owned_(std::move(owned)), tcp_(&tcp), ssl_(ssl) {}
  ~TlsStreamImpl() override {
    SSL_free(ssl_);
  }

  Status WriteAll(std::span<const iovec> buffers) override {
    for (const iovec& b : buffers) {
      const char* p = static_cast<const char*>(b.iov_base);
      size_t left = b.iov_len;
      while (left > 0) {
        size_t written = 0;
        if (SSL_write_ex(ssl_, p, left, &written) != 1) {
          return UnavailableError(fmt::format("TLS write to {}: {}", peer(), SslError()));
        }
        p += written;
        left -= written;
      }
    }
    return OkStatus();
  }

  Status ReadExact(void* data, size_t size) override {
    char* p = static_cast<char*>(data);
    while (size > 0) {
      size_t n = 0;
      if (SSL_read_ex(ssl_, p, size, &n) != 1) {
        return UnavailableError(fmt::format("TLS read from {}: {}", peer(), SslError()));
      }
      p += n;
      size -= n;
    }
    return OkStatus();
  }

  Status SetTimeout(int64_t timeout_us) override { return tcp_->SetTimeout(timeout_us); }
  void Shutdown() override { tcp_->Shutdown(); }
  std::string peer() const override { return tcp_->peer(); }
  std::string identity() const override { return identity_; }
  void set_identity(std::string id) { identity_ = std::move(id); }

 private:
  std::unique_ptr<TcpStream> owned_;
  TcpStream* tcp_;
  SSL* ssl_;
  std::string identity_;
};

// Loads `c` into `ctx`: the CA bundle whose certificates peers must show, and this
// process's certificate and key.
Status LoadInto(SSL_CTX* ctx, const TlsCredentials& c) {
  MERIDIAN_RETURN_IF_ERROR(TrustCas(ctx, c.ca_pem));
  return UseCertificate(ctx, c.cert_pem, c.key_pem);
}

// A context requiring TLS 1.3 and a peer certificate of the CA in `c`.
StatusOr<SSL_CTX*> MakeContext(const TlsCredentials& c, bool server) {
  SSL_CTX* ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
  if (ctx == nullptr) return InternalError("TLS: " + SslError());
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  SSL_CTX_set_mode(ctx, SSL_MODE_AUTO_RETRY);
  // No session resumption: no tickets to send after the handshake.
  SSL_CTX_set_num_tickets(ctx, 0);
  // AES-128-GCM first (AES instructions make it the fastest here), then the others.
  SSL_CTX_set_ciphersuites(ctx, "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256");
  // Kernel TLS where the kernel has it: the bulk path then encrypts in sendfile-like
  // writes without an extra copy; elsewhere OpenSSL does it in user space.
  SSL_CTX_set_options(ctx, SSL_OP_ENABLE_KTLS);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  Status loaded = LoadInto(ctx, c);
  if (!loaded.ok()) {
    SSL_CTX_free(ctx);
    return loaded;
  }
  return ctx;
}

}  // namespace

Status TrustCas(ssl_ctx_st* ctx, const std::string& ca_pem) {
  X509_STORE* store = SSL_CTX_get_cert_store(ctx);
  BIO* bio = BIO_new_mem_buf(ca_pem.data(), static_cast<int>(ca_pem.size()));
  int cas = 0;
  while (X509* ca = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) {
    X509_STORE_add_cert(store, ca);
    X509_free(ca);
    ++cas;
  }
  BIO_free(bio);
  ERR_clear_error();
  if (cas == 0) return InvalidArgumentError("TLS: the CA bundle holds no certificate");
  return OkStatus();
}

Status UseCertificate(ssl_ctx_st* ctx, const std::string& cert_pem, const std::string& key_pem) {
  auto fail = [&](std::string_view what) {
    return InvalidArgumentError(fmt::format("TLS: {}: {}", what, SslError()));
  };
  BIO* bio = BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size()));
  X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  if (cert == nullptr || SSL_CTX_use_certificate(ctx, cert) != 1) {
    X509_free(cert);
    return fail("this process's certificate");
  }
  X509_free(cert);
  bio = BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size()));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  if (key == nullptr || SSL_CTX_use_PrivateKey(ctx, key) != 1 || SSL_CTX_check_private_key(ctx) != 1) {
    EVP_PKEY_free(key);
    return fail("this process's key");
  }
  EVP_PKEY_free(key);
  return OkStatus();
}

Status ConfigureHttpsServer(ssl_ctx_st* ctx, const TlsCredentials& credentials) {
  if (!credentials.enabled()) return InvalidArgumentError("TLS: no CA certificate");
  IgnoreBrokenPipes();
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
  // A certificate is asked for, not required: a browser shows none. One that is shown
  // must be of the CA, or the handshake fails.
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  // A browser resumes its session on its next connections; OpenSSL refuses that
  // (a failed handshake) unless sessions that verified a peer are tied to a context.
  static constexpr unsigned char kSessionContext[] = "meridian-https";
  SSL_CTX_set_session_id_context(ctx, kSessionContext, sizeof(kSessionContext) - 1);
  return LoadInto(ctx, credentials);
}

std::string VerifiedPeerName(ssl_st* ssl) {
  if (ssl == nullptr || SSL_get_verify_result(ssl) != X509_V_OK) return {};
  return PeerName(ssl);
}

StatusOr<TlsCredentials> LoadCredentials(const std::string& dir, const std::string& name) {
  namespace fs = std::filesystem;
  TlsCredentials c;
  MERIDIAN_ASSIGN_OR_RETURN(c.ca_pem, ReadPem(fs::path(dir) / "ca.crt"));
  MERIDIAN_ASSIGN_OR_RETURN(c.cert_pem, ReadPem(fs::path(dir) / (name + ".crt")));
  MERIDIAN_ASSIGN_OR_RETURN(c.key_pem, ReadPem(fs::path(dir) / (name + ".key")));
  if (!KeyMatches(c.cert_pem, c.key_pem)) {
    return InvalidArgumentError(fmt::format("{}/{}.key is not the key of {}/{}.crt", dir, name, dir, name));
  }
  Status v = Verify(c.cert_pem, c.ca_pem, static_cast<int64_t>(std::time(nullptr)));
  if (!v.ok()) return v.WithPrefix(fmt::format("{}/{}.crt", dir, name));
  return c;
}

StatusOr<std::shared_ptr<TlsContext>> TlsContext::Create(const TlsCredentials& credentials) {
  if (!credentials.enabled()) return InvalidArgumentError("TLS: no CA certificate");
  // OpenSSL writes with write(): a peer gone must be an error, not SIGPIPE.
  IgnoreBrokenPipes();
  std::shared_ptr<TlsContext> t(new TlsContext());
  MERIDIAN_ASSIGN_OR_RETURN(t->server_, MakeContext(credentials, true));
  MERIDIAN_ASSIGN_OR_RETURN(t->client_, MakeContext(credentials, false));
  MERIDIAN_ASSIGN_OR_RETURN(CertInfo info, Inspect(credentials.cert_pem));
  t->identity_ = info.common_name;
  return t;
}

TlsContext::~TlsContext() {
  SSL_CTX_free(server_);
  SSL_CTX_free(client_);
}

namespace {

// SSL_accept (or SSL_connect) on `fd`'s blocking socket, ended within timeout_us:
// the socket is non-blocking meanwhile, each wait for the peer a poll() bounded by
// what is left. 1 when done; else SSL's result, and `timed_out` when the time ran out.
int HandshakeWithin(SSL* ssl, int fd, bool server, int64_t timeout_us, bool* timed_out) {
  const int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(timeout_us);
  int r = 0;
  for (;;) {
    r = server ? SSL_accept(ssl) : SSL_connect(ssl);
    if (r == 1) break;
    const int e = SSL_get_error(ssl, r);
    if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) break;
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    pollfd p{fd, static_cast<short>(e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT), 0};
    int ready = 0;
    if (left > 0) {
      do {
        ready = poll(&p, 1, static_cast<int>(left));
      } while (ready < 0 && errno == EINTR);
    }
    if (ready <= 0) {
      *timed_out = true;
      break;
    }
  }
  fcntl(fd, F_SETFL, flags);
  return r;
}

StatusOr<std::unique_ptr<ByteStream>> Handshake(SSL_CTX* ctx, TcpStream& tcp, std::unique_ptr<TcpStream> owned,
                                                bool server, int64_t timeout_us = 0) {
  SSL* ssl = SSL_new(ctx);
  if (ssl == nullptr) return InternalError("TLS: " + SslError());
  SSL_set_fd(ssl, tcp.fd());
  auto stream = std::make_unique<TlsStreamImpl>(tcp, std::move(owned), ssl);
  bool timed_out = false;
  int r = timeout_us > 0 ? HandshakeWithin(ssl, tcp.fd(), server, timeout_us, &timed_out)
                         : (server ? SSL_accept(ssl) : SSL_connect(ssl));
  if (timed_out) {
    ERR_clear_error();
    return DeadlineExceededError(fmt::format("TLS handshake with {} did not end within {} ms", stream->peer(),
                                             timeout_us / 1000));
  }
  if (r != 1) {
    long verify = SSL_get_verify_result(ssl);
    std::string why = verify != X509_V_OK ? X509_verify_cert_error_string(verify) : SslError();
    ERR_clear_error();
    return UnauthenticatedError(fmt::format("TLS handshake with {} failed: {}", stream->peer(), why));
  }
  stream->set_identity(PeerName(ssl));
  return std::unique_ptr<ByteStream>(std::move(stream));
}

}  // namespace

StatusOr<std::unique_ptr<ByteStream>> TlsContext::Accept(TcpStream& tcp, int64_t timeout_us) const {
  return Handshake(server_, tcp, nullptr, true, timeout_us);
}

StatusOr<std::unique_ptr<ByteStream>> TlsContext::Connect(std::unique_ptr<TcpStream> tcp,
                                                          std::string_view identity) const {
  TcpStream& raw = *tcp;
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<ByteStream> s, Handshake(client_, raw, std::move(tcp), false));
  if (!identity.empty() && s->identity() != identity) {
    return UnauthenticatedError(
        fmt::format("{} presented the certificate of '{}', not of '{}'", s->peer(), s->identity(), identity));
  }
  if (identity.empty() && s->identity().rfind("node:", 0) != 0) {
    return UnauthenticatedError(
        fmt::format("{} presented the certificate of '{}', not of a node of the cluster", s->peer(), s->identity()));
  }
  return s;
}

}  // namespace meridian::security
