#include "security/pki.h"

#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <arpa/inet.h>

#include <ctime>
#include <memory>

#include <fmt/format.h>

namespace meridian::security {
namespace {

template <typename T, void (*Free)(T*)>
struct Deleter {
  void operator()(T* p) const { Free(p); }
};
using Bio = std::unique_ptr<BIO, Deleter<BIO, BIO_free_all>>;
using Key = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using Cert = std::unique_ptr<X509, Deleter<X509, X509_free>>;
using Req = std::unique_ptr<X509_REQ, Deleter<X509_REQ, X509_REQ_free>>;

// OpenSSL's most recent error, for a message.
std::string SslError() {
  unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "unknown error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

Status Failed(std::string_view what) { return InternalError(fmt::format("{}: {}", what, SslError())); }

std::string BioText(BIO* bio) {
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  return std::string(data, static_cast<size_t>(n));
}

StatusOr<Key> NewKey() {
  Key key(EVP_EC_gen("P-256"));
  if (!key) return Failed("generate a P-256 key");
  return key;
}

StatusOr<std::string> KeyPem(EVP_PKEY* key) {
  Bio bio(BIO_new(BIO_s_mem()));
  if (!PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr)) return Failed("write a key");
  return BioText(bio.get());
}

StatusOr<std::string> CertPem(X509* cert) {
  Bio bio(BIO_new(BIO_s_mem()));
  if (!PEM_write_bio_X509(bio.get(), cert)) return Failed("write a certificate");
  return BioText(bio.get());
}

StatusOr<Cert> ParseCert(const std::string& pem) {
  Bio bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  Cert cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (!cert) {
    ERR_clear_error();
    return InvalidArgumentError("not a PEM certificate");
  }
  return cert;
}

StatusOr<Key> ParseKey(const std::string& pem) {
  Bio bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  Key key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  if (!key) {
    ERR_clear_error();
    return InvalidArgumentError("not a PEM private key");
  }
  return key;
}

Status AddExtension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (ext == nullptr) return Failed(fmt::format("certificate extension '{}'", value));
  int ok = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  if (!ok) return Failed("add a certificate extension");
  return OkStatus();
}

bool IsIpLiteral(const std::string& host) {
  unsigned char buf[16];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

// A certificate for `pub` named `name`, signed by `issuer_key` (issuer_cert null: self-signed).
StatusOr<Cert> Build(EVP_PKEY* pub, const std::string& name, int64_t valid_for_us, X509* issuer_cert,
                     EVP_PKEY* issuer_key, bool ca, bool server, const std::vector<std::string>& hosts) {
  if (name.empty() || name.size() > 64) return InvalidArgumentError("a certificate's name must have 1 to 64 characters");
  if (valid_for_us <= 0) return InvalidArgumentError("a certificate must be valid for a positive time");
  Cert cert(X509_new());
  X509_set_version(cert.get(), 2);
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof(serial)) != 1) return Failed("random serial");
  serial[0] &= 0x7f;  // a positive integer
  BIGNUM* bn = BN_bin2bn(serial, sizeof(serial), nullptr);
  BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert.get()));
  BN_free(bn);
  // A minute of slack for clocks a little behind.
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -60);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), static_cast<long>(valid_for_us / 1'000'000));
  X509_NAME* subject = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_UTF8, reinterpret_cast<const unsigned char*>(name.c_str()), -1,
                             -1, 0);
  X509_NAME_add_entry_by_txt(subject, "O", MBSTRING_UTF8, reinterpret_cast<const unsigned char*>("meridian"), -1, -1,
                             0);
  X509_set_issuer_name(cert.get(), issuer_cert ? X509_get_subject_name(issuer_cert) : subject);
  if (!X509_set_pubkey(cert.get(), pub)) return Failed("set a certificate's key");
  X509* issuer = issuer_cert ? issuer_cert : cert.get();
  MERIDIAN_RETURN_IF_ERROR(AddExtension(cert.get(), issuer, NID_subject_key_identifier, "hash"));
  MERIDIAN_RETURN_IF_ERROR(AddExtension(cert.get(), issuer, NID_authority_key_identifier, "keyid:always"));
  if (ca) {
    MERIDIAN_RETURN_IF_ERROR(AddExtension(cert.get(), issuer, NID_basic_constraints, "critical,CA:TRUE,pathlen:0"));
    MERIDIAN_RETURN_IF_ERROR(AddExtension(cert.get(), issuer, NID_key_usage, "critical,keyCertSign,cRLSign"));
  } else {
    MERIDIAN_RETURN_IF_ERROR(AddExtension(cert.get(), issuer, NID_basic_constraints, "critical,CA:FALSE"));
    MERIDIAN_RETURN_IF_ERROR(AddExtension(cert.get(), issuer, NID_key_usage, "critical,digitalSignature"));
    MERIDIAN_RETURN_IF_ERROR(
        AddExtension(cert.get(), issuer, NID_ext_key_usage, server ? "serverAuth,clientAuth" : "clientAuth"));
    std::string san;
    for (const std::string& h : hosts) {
      if (h.empty() || h.find_first_of(",\n") != std::string::npos) {
        return InvalidArgumentError(fmt::format("'{}' is not a host name or address", h));
      }
      san += fmt::format("{}{}:{}", san.empty() ? "" : ",", IsIpLiteral(h) ? "IP" : "DNS", h);
    }
    if (!san.empty()) MERIDIAN_RETURN_IF_ERROR(AddExtension(cert.get(), issuer, NID_subject_alt_name, san));
  }
  if (!X509_sign(cert.get(), issuer_key, EVP_sha256())) return Failed("sign a certificate");
  return cert;
}

StatusOr<std::pair<Cert, Key>> ParseCa(const KeyPair& ca) {
  MERIDIAN_ASSIGN_OR_RETURN(Cert cert, ParseCert(ca.cert_pem));
  MERIDIAN_ASSIGN_OR_RETURN(Key key, ParseKey(ca.key_pem));
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return InvalidArgumentError("the CA's key is not the key of its certificate");
  }
  return std::make_pair(std::move(cert), std::move(key));
}

int64_t AsUnix(const ASN1_TIME* t) {
  struct tm tm = {};
  if (ASN1_TIME_to_tm(t, &tm) != 1) return 0;
  return static_cast<int64_t>(timegm(&tm));
}

}  // namespace

StatusOr<KeyPair> MakeCa(const std::string& name, int64_t valid_for_us) {
  MERIDIAN_ASSIGN_OR_RETURN(Key key, NewKey());
  MERIDIAN_ASSIGN_OR_RETURN(Cert cert, Build(key.get(), name, valid_for_us, nullptr, key.get(), true, false, {}));
  KeyPair out;
  MERIDIAN_ASSIGN_OR_RETURN(out.cert_pem, CertPem(cert.get()));
  MERIDIAN_ASSIGN_OR_RETURN(out.key_pem, KeyPem(key.get()));
  return out;
}

StatusOr<KeyPair> Issue(const KeyPair& ca, const CertRequest& request) {
  MERIDIAN_ASSIGN_OR_RETURN(auto issuer, ParseCa(ca));
  MERIDIAN_ASSIGN_OR_RETURN(Key key, NewKey());
  MERIDIAN_ASSIGN_OR_RETURN(Cert cert, Build(key.get(), request.common_name, request.valid_for_us, issuer.first.get(),
                                             issuer.second.get(), false, request.server, request.hosts));
  KeyPair out;
  MERIDIAN_ASSIGN_OR_RETURN(out.cert_pem, CertPem(cert.get()));
  MERIDIAN_ASSIGN_OR_RETURN(out.key_pem, KeyPem(key.get()));
  return out;
}

StatusOr<KeyPair> MakeRequest(const std::string& common_name) {
  MERIDIAN_ASSIGN_OR_RETURN(Key key, NewKey());
  Req req(X509_REQ_new());
  X509_REQ_set_version(req.get(), 0);
  X509_NAME* subject = X509_REQ_get_subject_name(req.get());
  X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_UTF8, reinterpret_cast<const unsigned char*>(common_name.c_str()),
                             -1, -1, 0);
  if (!X509_REQ_set_pubkey(req.get(), key.get()) || !X509_REQ_sign(req.get(), key.get(), EVP_sha256())) {
    return Failed("make a certificate request");
  }
  Bio bio(BIO_new(BIO_s_mem()));
  if (!PEM_write_bio_X509_REQ(bio.get(), req.get())) return Failed("write a certificate request");
  KeyPair out;
  out.cert_pem = BioText(bio.get());
  MERIDIAN_ASSIGN_OR_RETURN(out.key_pem, KeyPem(key.get()));
  return out;
}

StatusOr<std::string> SignRequest(const KeyPair& ca, const std::string& csr_pem, const CertRequest& request) {
  MERIDIAN_ASSIGN_OR_RETURN(auto issuer, ParseCa(ca));
  Bio bio(BIO_new_mem_buf(csr_pem.data(), static_cast<int>(csr_pem.size())));
  Req req(PEM_read_bio_X509_REQ(bio.get(), nullptr, nullptr, nullptr));
  if (!req) {
    ERR_clear_error();
    return InvalidArgumentError("not a PEM certificate request");
  }
  Key pub(X509_REQ_get_pubkey(req.get()));
  if (!pub || X509_REQ_verify(req.get(), pub.get()) != 1) {
    ERR_clear_error();
    return InvalidArgumentError("the certificate request is not signed by its own key");
  }
  if (EVP_PKEY_get_base_id(pub.get()) != EVP_PKEY_EC || EVP_PKEY_get_bits(pub.get()) < 256) {
    return InvalidArgumentError("the certificate request's key is not an EC key of 256 bits or more");
  }
  MERIDIAN_ASSIGN_OR_RETURN(Cert cert, Build(pub.get(), request.common_name, request.valid_for_us, issuer.first.get(),
                                             issuer.second.get(), false, request.server, request.hosts));
  return CertPem(cert.get());
}

std::string FirstCertificate(const std::string& bundle_pem) {
  const std::string end = "-----END CERTIFICATE-----";
  const size_t cut = bundle_pem.find(end);
  return cut == std::string::npos ? bundle_pem : bundle_pem.substr(0, cut + end.size()) + "\n";
}

StatusOr<CertInfo> Inspect(const std::string& cert_pem) {
  MERIDIAN_ASSIGN_OR_RETURN(Cert cert, ParseCert(cert_pem));
  CertInfo info;
  char buf[256];
  if (X509_NAME_get_text_by_NID(X509_get_subject_name(cert.get()), NID_commonName, buf, sizeof(buf)) > 0) {
    info.common_name = buf;
  }
  if (X509_NAME_get_text_by_NID(X509_get_issuer_name(cert.get()), NID_commonName, buf, sizeof(buf)) > 0) {
    info.issuer = buf;
  }
  info.not_before_unix = AsUnix(X509_get0_notBefore(cert.get()));
  info.not_after_unix = AsUnix(X509_get0_notAfter(cert.get()));
  info.is_ca = X509_check_ca(cert.get()) != 0;
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  X509_digest(cert.get(), EVP_sha256(), md, &n);
  info.fingerprint = Hex(std::string_view(reinterpret_cast<const char*>(md), n));
  auto* names = static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert.get(), NID_subject_alt_name, nullptr, nullptr));
  for (int i = 0; names && i < sk_GENERAL_NAME_num(names); ++i) {
    const GENERAL_NAME* g = sk_GENERAL_NAME_value(names, i);
    if (g->type == GEN_DNS) {
      info.hosts.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(g->d.dNSName)),
                              ASN1_STRING_length(g->d.dNSName));
    } else if (g->type == GEN_IPADD) {
      char text[INET6_ADDRSTRLEN] = {};
      int len = ASN1_STRING_length(g->d.iPAddress);
      inet_ntop(len == 4 ? AF_INET : AF_INET6, ASN1_STRING_get0_data(g->d.iPAddress), text, sizeof(text));
      info.hosts.emplace_back(text);
    }
  }
  GENERAL_NAMES_free(names);
  return info;
}

Status Verify(const std::string& cert_pem, const std::string& ca_pem, int64_t now_unix) {
  MERIDIAN_ASSIGN_OR_RETURN(Cert cert, ParseCert(cert_pem));
  std::unique_ptr<X509_STORE, Deleter<X509_STORE, X509_STORE_free>> store(X509_STORE_new());
  Bio bio(BIO_new_mem_buf(ca_pem.data(), static_cast<int>(ca_pem.size())));
  int cas = 0;
  while (X509* ca = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    X509_STORE_add_cert(store.get(), ca);
    X509_free(ca);
    ++cas;
  }
  ERR_clear_error();
  if (cas == 0) return InvalidArgumentError("the CA bundle holds no certificate");
  std::unique_ptr<X509_STORE_CTX, Deleter<X509_STORE_CTX, X509_STORE_CTX_free>> ctx(X509_STORE_CTX_new());
  X509_STORE_CTX_init(ctx.get(), store.get(), cert.get(), nullptr);
  X509_STORE_CTX_set_time(ctx.get(), 0, static_cast<time_t>(now_unix));
  if (X509_verify_cert(ctx.get()) != 1) {
    std::string why = X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx.get()));
    ERR_clear_error();
    return PermissionDeniedError(fmt::format("certificate not accepted: {}", why));
  }
  return OkStatus();
}

bool KeyMatches(const std::string& cert_pem, const std::string& key_pem) {
  StatusOr<Cert> cert = ParseCert(cert_pem);
  StatusOr<Key> key = ParseKey(key_pem);
  if (!cert.ok() || !key.ok()) return false;
  bool ok = X509_check_private_key(cert->get(), key->get()) == 1;
  ERR_clear_error();
  return ok;
}

std::string Hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    hex += kDigits[c >> 4];
    hex += kDigits[c & 15];
  }
  return hex;
}

StatusOr<std::string> RandomHex(size_t bytes) {
  std::string raw(bytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(raw.data()), static_cast<int>(bytes)) != 1) {
    return Failed("random bytes");
  }
  return Hex(raw);
}

std::string Sha256Hex(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(data.data(), data.size(), md, &n, EVP_sha256(), nullptr);
  return Hex(std::string_view(reinterpret_cast<const char*>(md), n));
}

std::string HmacSha256(std::string_view key, std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()),
       data.size(), md, &n);
  return std::string(reinterpret_cast<const char*>(md), n);
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace meridian::security
