// An agent's side of NodeService: registration, heartbeats carrying task updates, and
// the stream of assignments. Translates to and from model types.
//
// Thread-safety: Register and Heartbeat may run on one thread while
// StreamAssignments runs on another; CancelStream from any thread.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "common/status.h"
#include "model/run_state.h"
#include "security/tls.h"

namespace grpc {
class Channel;
class ClientContext;
}  // namespace grpc

namespace meridian::rpc {

// A node's first call to a secured coordinator (TLS, checked against `ca_pem`, without
// a client certificate): the join `token` and a signing request for `node`'s key.
// Returns the node's certificate and the cluster's CA bundle.
StatusOr<std::pair<std::string, std::string>> JoinCluster(const std::string& address, const std::string& ca_pem,
                                                          const std::string& token, const std::string& node,
                                                          const std::string& csr_pem, int64_t timeout_us);

class NodeClient {
 public:
  // `tls`: the node's certificate and the cluster's CA; not enabled: plaintext.
  explicit NodeClient(const std::string& address, const security::TlsCredentials& tls = {});
  ~NodeClient();

  StatusOr<model::RegistrationReply> Register(const model::AgentRegistration& registration, int64_t timeout_us);
  struct HeartbeatAnswer {
    bool reregister = false;   // the coordinator wants the agent to register again
    int64_t interval_us = 0;   // heartbeat this often from now on; 0: as before
  };
  StatusOr<HeartbeatAnswer> Heartbeat(const model::AgentHeartbeat& heartbeat, int64_t timeout_us);
  // Asks to leave the pool (NodeApi::Leave).
  Status Leave(uint32_t node_id, uint64_t session, int64_t timeout_us);
  // Receives assignment batches until the stream ends (after at most `max_us`), the
  // coordinator drops the session, or CancelStream; returns how it ended.
  Status StreamAssignments(uint32_t node_id, uint64_t session, int64_t max_us,
                           const std::function<void(model::AssignmentBatch)>& on_batch);
  void CancelStream();

 private:
  std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
  std::mutex mu_;
  grpc::ClientContext* stream_context_ = nullptr;  // GUARDED_BY(mu_)
  bool cancelled_ = false;                         // GUARDED_BY(mu_)
};

}  // namespace meridian::rpc
