// An agent's side of NodeService: registration, its session (assignments one way,
// reports and their acknowledgements the other), and heartbeats carrying task
// updates. Translates to and from model types.
//
// Thread-safety: Register and Heartbeat may run on one thread while
// StreamAssignments runs on another; CancelStream from any thread.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "common/status.h"
#include "model/run_state.h"
#include "security/tls.h"

namespace grpc {
class Channel;
class ClientContext;
template <class W, class R>
class ClientReaderWriter;
}  // namespace grpc

namespace meridian::v1 {
class AgentMessage;
class CoordinatorMessage;
}  // namespace meridian::v1

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
    bool on_session = false;   // it went on the session (else as a call of its own)
  };
  // The heartbeat as a call of its own.
  StatusOr<HeartbeatAnswer> Heartbeat(const model::AgentHeartbeat& heartbeat, int64_t timeout_us);
  // The heartbeat as a report on this client's open session, answered by the
  // session's acknowledgement; nullopt if no session is open, or it ended before
  // acknowledging the report (send it as a call then: the coordinator takes a report
  // twice). Unacknowledged within `timeout_us`: an error, and the session is cancelled
  // (its reader opens it anew).
  std::optional<StatusOr<HeartbeatAnswer>> Report(const model::AgentHeartbeat& heartbeat, int64_t timeout_us);
  // Asks to leave the pool (NodeApi::Leave).
  Status Leave(uint32_t node_id, uint64_t session, int64_t timeout_us);
  // Opens the node's session and receives assignment batches until it ends (after at
  // most `max_us`), the coordinator drops the session, or CancelStream; returns how it
  // ended. Heartbeats go over the session while it is open.
  Status StreamAssignments(uint32_t node_id, uint64_t session, int64_t max_us,
                           const std::function<void(model::AssignmentBatch)>& on_batch);
  void CancelStream();

 private:
  std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
  using Session = grpc::ClientReaderWriter<v1::AgentMessage, v1::CoordinatorMessage>;

  std::mutex mu_;
  std::condition_variable ack_cv_;                 // an acknowledgement came, or the session ended
  grpc::ClientContext* stream_context_ = nullptr;  // GUARDED_BY(mu_)
  bool cancelled_ = false;                         // GUARDED_BY(mu_)
  Session* session_ = nullptr;                     // GUARDED_BY(mu_): open, taking reports
  uint64_t sessions_ = 0;                          // GUARDED_BY(mu_): sessions opened, the count
  uint64_t next_seq_ = 1;                          // GUARDED_BY(mu_)
  uint64_t acked_session_ = 0;                     // GUARDED_BY(mu_): the newest acknowledgement's session,
  uint64_t acked_seq_ = 0;                         //   the report it answers (and every one before it there),
  HeartbeatAnswer acked_;                          //   and its answer
  // Held across a report's write: the session is not finished under a write.
  std::mutex write_mu_;
};

}  // namespace meridian::rpc
