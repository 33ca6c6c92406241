// The gRPC server of a coordinator: hosts JobApi, NodeApi, AdminApi and ObjectApi as
// meridian.v1's JobService, NodeService, AdminService and ObjectService, with the message limits of
// convert.h. Streams end when the server shuts down.
//
// Lifetimes: the APIs must outlive the server. Thread-safety: Shutdown may be called
// from any thread, once.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "common/status.h"
#include "rpc/api.h"

namespace grpc {
class Server;
class Service;
}  // namespace grpc

namespace meridian::rpc {

class Server {
 public:
  // Listens on `address`; "127.0.0.1:0" picks a free port (see port()).
  static StatusOr<std::unique_ptr<Server>> Start(const std::string& address, JobApi& jobs, NodeApi& nodes,
                                                 AdminApi& admin, ObjectApi& objects);
  ~Server();

  int port() const { return port_; }
  // Stops accepting calls, ends open streams and waits for handlers to return.
  void Shutdown();

 private:
  Server() = default;
  std::atomic<bool> stopping_{false};
  int port_ = 0;
  std::unique_ptr<grpc::Service> job_service_;
  std::unique_ptr<grpc::Service> node_service_;
  std::unique_ptr<grpc::Service> admin_service_;
  std::unique_ptr<grpc::Service> object_service_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace meridian::rpc
