// The coordinator's HTTP(S) listener (docs/observability.md):
//   /metrics              the coordinator's figures, in Prometheus's text format;
//   /nodes/NAME/metrics   node NAME's agent's, read by the coordinator over TLS (the
//                         agent proving node NAME's certificate), for scrapers that
//                         check a server's host name, which a node's certificate lacks;
//   /sd/nodes             Prometheus's HTTP service discovery: a target per live agent;
//   /api/overview, /api/jobs/ID   the dashboard's data (docs/dashboard.md);
//   /                     the dashboard itself: the built front end of web/.
//
// Who may read them (docs/security.md): metrics, a monitoring certificate of the
// cluster's CA ("monitor:NAME", from `meridian certs issue monitor`) or an admin's
// token, since the figures are every tenant's. The dashboard's data: a user's token,
// which sees what `meridian nodes` and `jobs` show that user (its tenant's jobs; an
// admin's, all). An insecure coordinator answers anyone. Each refusal is logged with
// the peer and why, as the gRPC API's are.
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
  // The built dashboard (web/dist), served under "/"; empty: no dashboard.
  std::string web_dir;
};

// `coord` must outlive the server.
StatusOr<std::unique_ptr<http::Server>> StartHttp(Coordinator& coord, const HttpOptions& options);

}  // namespace meridian::coordinator
