// The gRPC server of a coordinator: hosts JobApi, NodeApi, AdminApi and ObjectApi as
// meridian.v1's JobService, NodeService, AdminService and ObjectService, with the message limits of
// convert.h. Streams end when the server shuts down.
//
// Security (docs/security.md): with TLS credentials, every connection is TLS and every
// call but NodeService.Join must present a client certificate of the cluster's CA.
// A node's certificate ("node:NAME") may call NodeService only, for that node; any
// other certificate must also carry a user's token, whose role and tenant decide what
// the call may do and see. Each refused call is logged with the peer and why.
//
// Lifetimes: the APIs must outlive the server. Thread-safety: Shutdown may be called
// from any thread, once.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "rpc/api.h"
#include "security/tls.h"

namespace grpc {
class Server;
class Service;
}  // namespace grpc

namespace meridian::rpc {

class Gate;
class StreamRegistry;
class Workers;

// The most streams one user (a token's) may have open at once: watches of jobs
// (JobService.Watch) and submissions watched (SubmitAndWatch) together. One past it is
// refused, RESOURCE_EXHAUSTED. An insecure coordinator has no bound.
inline constexpr size_t kMaxStreamsPerUser = 256;

struct ServerSecurity {
  security::TlsCredentials tls;  // the coordinator's certificate and the CA bundle
  // No TLS, nobody authenticated, every call allowed: a trusted machine only. Without
  // TLS credentials the server starts only when this is set.
  bool insecure = false;
  // What a connection may hold before it proves anything, since gRPC (1.51) has no
  // bound on how many are open: its handshake (TLS, then HTTP/2's first SETTINGS) must
  // end within handshake_timeout_ms of the accept (gRPC's own default is 120 s), and
  // one with no call open for idle_timeout_ms is sent GOAWAY and closed (gRPC's default
  // keeps it for ever). A client's channel opens a new connection for its next call.
  int64_t handshake_timeout_ms = 10'000;
  int64_t idle_timeout_ms = 300'000;
};

class Server {
 public:
  // Listens on `address`; "127.0.0.1:0" picks a free port (see port()).
  static StatusOr<std::unique_ptr<Server>> Start(const std::string& address, JobApi& jobs, NodeApi& nodes,
                                                 AdminApi& admin, ObjectApi& objects, AuthApi& auth,
                                                 const ServerSecurity& security);
  ~Server();

  int port() const { return port_; }
  // Stops accepting calls, ends open streams and waits for handlers to return.
  void Shutdown();

 private:
  Server() = default;
  std::atomic<bool> stopping_{false};
  int port_ = 0;
  std::unique_ptr<Gate> gate_;
  std::unique_ptr<StreamRegistry> streams_;
  std::unique_ptr<Workers> workers_;
  std::unique_ptr<grpc::Service> job_service_;
  std::unique_ptr<grpc::Service> node_service_;
  std::unique_ptr<grpc::Service> admin_service_;
  std::unique_ptr<grpc::Service> object_service_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace meridian::rpc
