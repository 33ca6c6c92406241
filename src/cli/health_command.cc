// meridian health URL: one GET of a coordinator's or an agent's /healthz or /readyz
// (or any page of theirs) over TLS with a certificate of the cluster, the server
// proving who it is: the coordinator, or with --node NAME that node's agent (whose
// certificate names the node, not a host, so curl cannot check it). For probes:
// exit 0 on 200 with the body printed, non-zero otherwise.
#include <fmt/format.h>

#include "cli/commands.h"
#include "http/client.h"
#include "security/tls.h"

namespace meridian::cli {

Status RunHealth(const HealthOptions& o, std::ostream& out) {
  constexpr int64_t kTimeoutUs = 5'000'000;
  constexpr size_t kMaxBody = 64 << 10;
  std::shared_ptr<security::TlsContext> tls;
  if (o.url.rfind("https://", 0) == 0) {
    if (o.tls_dir.empty()) {
      return InvalidArgumentError("--tls-dir is required for https: the cluster's ca.crt and the certificate to show");
    }
    MERIDIAN_ASSIGN_OR_RETURN(security::TlsCredentials credentials, security::LoadCredentials(o.tls_dir, o.cert));
    MERIDIAN_ASSIGN_OR_RETURN(tls, security::TlsContext::Create(credentials));
  }
  MERIDIAN_ASSIGN_OR_RETURN(http::Response r, http::GetUrl(o.url, tls.get(), o.node.empty() ? "coordinator" : "node:" + o.node,
                                                           "/healthz", kMaxBody, kTimeoutUs));
  std::string body = r.body;
  while (!body.empty() && body.back() == '\n') body.pop_back();
  if (r.status == 200) {
    out << body << '\n';
    return OkStatus();
  }
  const std::string what = fmt::format("{} answered {}: {}", o.url, r.status, body.substr(0, 300));
  if (r.status == 401 || r.status == 403) return PermissionDeniedError(what);
  return UnavailableError(what);
}

}  // namespace meridian::cli
