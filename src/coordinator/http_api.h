// The coordinator's HTTP(S) listener (docs/observability.md):
//   /metrics              the coordinator's figures, in Prometheus's text format;
//   /nodes/NAME/metrics   node NAME's agent's, read by the coordinator over TLS (the
//                         agent proving node NAME's certificate), for scrapers that
//                         check a server's host name, which a node's certificate lacks;
//   /sd/nodes             Prometheus's HTTP service discovery: a target per live agent.
//
// Who may read them (docs/security.md): a monitoring certificate of the cluster's CA
// ("monitor:NAME", from `meridian certs issue monitor`), or an admin's token; the
// figures are the whole cluster's, every tenant's. An insecure coordinator answers
// anyone. Each refusal is logged with the peer and why, as the gRPC API's are.
#pragma once

#include <memory>

#include "common/status.h"
#include "coordinator/coordinator.h"
#include "http/server.h"

namespace meridian::coordinator {

struct HttpOptions {
  std::string listen = "127.0.0.1:0";
  security::TlsCredentials tls;  // the coordinator's; empty only when insecure
  bool insecure = false;
};

// `coord` must outlive the server.
StatusOr<std::unique_ptr<http::Server>> StartHttp(Coordinator& coord, const HttpOptions& options);

}  // namespace meridian::coordinator
