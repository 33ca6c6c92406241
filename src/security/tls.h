// TLS for Meridian's own TCP protocols (the transfer plane), with OpenSSL, and the
// credentials every secured connection uses, gRPC's included: the cluster's CA
// bundle, and this process's certificate and key. Both ends always present a
// certificate of the cluster's CA (mutual TLS, version 1.3 only).
//
// Thread-safety: a TlsContext may be shared by any number of threads; a TlsStream is
// the streams it makes are used as a TcpStream is (one thread, Shutdown from any).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/net.h"
#include "common/status.h"

struct ssl_ctx_st;
struct ssl_st;

namespace meridian::security {

// PEM text. Empty: no TLS (plain TCP, allowed only where the caller says so).
struct TlsCredentials {
  std::string ca_pem;    // the CAs whose certificates are accepted (a bundle)
  std::string cert_pem;  // this process's certificate
  std::string key_pem;
  bool enabled() const { return !ca_pem.empty(); }
};

// Reads `dir`/ca.crt, `dir`/NAME.crt and `dir`/NAME.key; checks that the key is the
// certificate's and that the certificate is one of the CA's, still valid.
StatusOr<TlsCredentials> LoadCredentials(const std::string& dir, const std::string& name);

// Sets up `ctx` for an HTTPS listener (metrics, the dashboard): TLS 1.2 or later, as
// browsers and Prometheus speak it, with this process's certificate. A client
// certificate is asked for but not required (a browser has none; its requests carry
// a token instead); one that is shown must be of the CA in `credentials`.
Status ConfigureHttpsServer(ssl_ctx_st* ctx, const TlsCredentials& credentials);
// Adds the certificates of `ca_pem` (a bundle) to `ctx`'s trust store; fails when it
// holds none.
Status TrustCas(ssl_ctx_st* ctx, const std::string& ca_pem);
// Makes `ctx` present `cert_pem` with its key `key_pem` (checked to match).
Status UseCertificate(ssl_ctx_st* ctx, const std::string& cert_pem, const std::string& key_pem);
// The common name of the certificate the peer of `ssl` showed, verified against the
// CA; empty when it showed none.
std::string VerifiedPeerName(ssl_st* ssl);

class TlsContext {
 public:
  static StatusOr<std::shared_ptr<TlsContext>> Create(const TlsCredentials& credentials);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  // The server's side of a handshake on an accepted connection, which must outlive
  // the stream returned: the peer must prove a certificate of the cluster's CA.
  // Fails with kUnauthenticated when it does not, kDeadlineExceeded when the
  // handshake has not ended within timeout_us of its start (0: no bound but the
  // connection's per-read timeout, which a peer sending a byte now and then never
  // meets).
  StatusOr<std::unique_ptr<ByteStream>> Accept(TcpStream& tcp, int64_t timeout_us = 0) const;
  // The client's side. The server must prove `identity` ("coordinator",
  // "node:gpu-1"); empty: any node of the cluster ("node:..."), as on the transfer
  // plane. Fails with kUnauthenticated when it does not.
  StatusOr<std::unique_ptr<ByteStream>> Connect(std::unique_ptr<TcpStream> tcp, std::string_view identity = {}) const;

  // This process's own name (its certificate's common name).
  const std::string& identity() const { return identity_; }

 private:
  TlsContext() = default;
  ssl_ctx_st* server_ = nullptr;
  ssl_ctx_st* client_ = nullptr;
  std::string identity_;
};

}  // namespace meridian::security
