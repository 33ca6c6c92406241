// meridian health URL: one GET of a coordinator's or an agent's /healthz or /readyz
// (or any page of theirs) over TLS with a certificate of the cluster, the server
// proving who it is: the coordinator, or with --node NAME that node's agent (whose
// certificate names the node, not a host, so curl cannot check it). For probes:
// exit 0 on 200 with the body printed, non-zero otherwise.
#include <charconv>

#include <fmt/format.h>

#include "cli/commands.h"
#include "common/net.h"
#include "http/client.h"
#include "security/tls.h"

namespace meridian::cli {

Status RunHealth(const HealthOptions& o, std::ostream& out) {
  constexpr int64_t kTimeoutUs = 5'000'000;
  constexpr size_t kMaxBody = 64 << 10;
  const bool https = o.url.rfind("https://", 0) == 0;
  if (!https && o.url.rfind("http://", 0) != 0) {
    return InvalidArgumentError(fmt::format("'{}': expected https://HOST:PORT/PATH (or http:// to an insecure one)", o.url));
  }
  const std::string rest = o.url.substr(o.url.find("://") + 3);
  const size_t slash = rest.find('/');
  const std::string hostport = rest.substr(0, slash);
  const std::string path = slash == std::string::npos ? "/healthz" : rest.substr(slash);
  const size_t colon = hostport.rfind(':');
  int port = 0;
  if (colon == std::string::npos ||
      std::from_chars(hostport.data() + colon + 1, hostport.data() + hostport.size(), port).ec != std::errc() ||
      port < 1 || port > 65535) {
    return InvalidArgumentError(fmt::format("'{}': the address needs a port (HOST:PORT)", o.url));
  }
  std::string host = hostport.substr(0, colon);
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  std::shared_ptr<security::TlsContext> tls;
  if (https) {
    if (o.tls_dir.empty()) {
      return InvalidArgumentError("--tls-dir is required for https: the cluster's ca.crt and the certificate to show");
    }
    MERIDIAN_ASSIGN_OR_RETURN(security::TlsCredentials credentials, security::LoadCredentials(o.tls_dir, o.cert));
    MERIDIAN_ASSIGN_OR_RETURN(tls, security::TlsContext::Create(credentials));
  }
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<TcpStream> tcp, TcpStream::Connect(host, port, kTimeoutUs));
  MERIDIAN_RETURN_IF_ERROR(tcp->SetTimeout(kTimeoutUs));
  std::unique_ptr<ByteStream> stream;
  if (tls != nullptr) {
    MERIDIAN_ASSIGN_OR_RETURN(stream, tls->Connect(std::move(tcp)));
    const std::string want = o.node.empty() ? "coordinator" : "node:" + o.node;
    if (stream->identity() != want) {
      return UnauthenticatedError(
          fmt::format("{} presented the certificate of '{}', not of '{}'", o.url, stream->identity(), want));
    }
  } else {
    stream = std::move(tcp);
  }
  MERIDIAN_ASSIGN_OR_RETURN(http::Response r, http::Get(*stream, hostport, path, kMaxBody));
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
