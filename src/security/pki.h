// The cluster's certificates and secrets, with OpenSSL: a certificate authority (CA),
// certificates it issues (P-256 keys, SHA-256 signatures), certificate signing
// requests for nodes that join, and the random tokens and their hashes.
//
// Identities live in a certificate's common name: "coordinator", "node:NAME" for an
// agent (issued only by the coordinator, on a join) and "client:NAME" for a user's
// program. The CA signs nothing else.
//
// Thread-safety: every function may be called from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace meridian::security {

// PEM text of a certificate and its private key.
struct KeyPair {
  std::string cert_pem;
  std::string key_pem;
};

struct CertRequest {
  std::string common_name;
  std::vector<std::string> hosts;  // subjectAltName entries: DNS names and IP literals
  int64_t valid_for_us = 0;
  bool server = false;  // serverAuth usage as well as clientAuth
};

struct CertInfo {
  std::string common_name;
  std::string issuer;
  std::vector<std::string> hosts;
  int64_t not_before_unix = 0;
  int64_t not_after_unix = 0;
  std::string fingerprint;  // SHA-256 of the DER, hex
  bool is_ca = false;
};

// A new CA named `name`, valid for `valid_for_us` from now.
StatusOr<KeyPair> MakeCa(const std::string& name, int64_t valid_for_us);
// A certificate (and a new key) for `request`, signed by `ca`.
StatusOr<KeyPair> Issue(const KeyPair& ca, const CertRequest& request);
// A new private key (PEM) and a signing request for it; the request's subject is
// ignored by SignRequest, which names the certificate itself.
StatusOr<KeyPair> MakeRequest(const std::string& common_name);  // cert_pem holds the CSR
// Signs the public key of `csr_pem` (after checking the request's own signature) as
// `request` says; the CSR's subject and extensions are not copied.
StatusOr<std::string> SignRequest(const KeyPair& ca, const std::string& csr_pem, const CertRequest& request);

StatusOr<CertInfo> Inspect(const std::string& cert_pem);
// The first certificate of a PEM bundle (a cluster's current CA comes first).
std::string FirstCertificate(const std::string& bundle_pem);
// Whether `cert_pem` is signed by one of the CAs in `ca_pem` (a bundle) and within
// its validity at `now_unix`; the error says why not.
Status Verify(const std::string& cert_pem, const std::string& ca_pem, int64_t now_unix);
// Whether `key_pem` is the private key of `cert_pem`.
bool KeyMatches(const std::string& cert_pem, const std::string& key_pem);

// `bytes` as lowercase hex.
std::string Hex(std::string_view bytes);
// `bytes` random bytes from OpenSSL's generator, as lowercase hex.
StatusOr<std::string> RandomHex(size_t bytes);
std::string Sha256Hex(std::string_view data);
// HMAC-SHA256 of `data` under `key`: 32 raw bytes.
std::string HmacSha256(std::string_view key, std::string_view data);
// Compares in time independent of where they differ.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

}  // namespace meridian::security
