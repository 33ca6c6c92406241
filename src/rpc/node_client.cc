#include "rpc/node_client.h"

#include <grpcpp/grpcpp.h>

#include "meridian/v1/meridian.grpc.pb.h"
#include "rpc/convert.h"

namespace meridian::rpc {

NodeClient::NodeClient(const std::string& address, const security::TlsCredentials& tls)
    : address_(address), channel_(MakeChannel(address, ChannelSecurity{tls, ""}, kAgentChannel)) {}

StatusOr<std::pair<std::string, std::string>> JoinCluster(const std::string& address, const std::string& ca_pem,
                                                          const std::string& token, const std::string& node,
                                                          const std::string& csr_pem, int64_t timeout_us) {
  security::TlsCredentials server_only;
  server_only.ca_pem = ca_pem;
  std::shared_ptr<grpc::Channel> channel = MakeChannel(address, ChannelSecurity{server_only, ""});
  v1::JoinRequest req;
  req.set_token(token);
  req.set_node(node);
  req.set_csr_pem(csr_pem);
  v1::JoinResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(ctx, timeout_us);
  grpc::Status s = v1::NodeService::NewStub(channel)->Join(&ctx, req, &resp);
  if (!s.ok()) return FromGrpc(s).WithPrefix("join the cluster at " + address);
  return std::make_pair(resp.cert_pem(), resp.ca_pem());
}
NodeClient::~NodeClient() = default;

StatusOr<model::RegistrationReply> NodeClient::Register(const model::AgentRegistration& registration,
                                                        int64_t timeout_us) {
  v1::RegisterRequest req;
  ToProto(registration, &req);
  v1::RegisterResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(ctx, timeout_us);
  grpc::Status s = v1::NodeService::NewStub(channel_)->Register(&ctx, req, &resp);
  if (!s.ok()) return FromGrpc(s).WithPrefix("register with " + address_);
  return FromProto(resp);
}

StatusOr<NodeClient::HeartbeatAnswer> NodeClient::Heartbeat(const model::AgentHeartbeat& heartbeat,
                                                            int64_t timeout_us) {
  v1::HeartbeatRequest req;
  ToProto(heartbeat, &req);
  v1::HeartbeatResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(ctx, timeout_us);
  grpc::Status s = v1::NodeService::NewStub(channel_)->Heartbeat(&ctx, req, &resp);
  if (!s.ok()) return FromGrpc(s).WithPrefix("heartbeat to " + address_);
  const int64_t interval = resp.heartbeat_interval_us();
  return HeartbeatAnswer{resp.reregister(), interval > 0 ? HeartbeatIntervalFromWire(interval) : 0};
}

Status NodeClient::Leave(uint32_t node_id, uint64_t session, int64_t timeout_us) {
  v1::LeaveRequest req;
  req.set_node_id(node_id);
  req.set_session(session);
  v1::LeaveResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(ctx, timeout_us);
  grpc::Status s = v1::NodeService::NewStub(channel_)->Leave(&ctx, req, &resp);
  if (!s.ok()) return FromGrpc(s).WithPrefix("leave " + address_);
  return OkStatus();
}

Status NodeClient::StreamAssignments(uint32_t node_id, uint64_t session, int64_t max_us,
                                     const std::function<void(model::AssignmentBatch)>& on_batch) {
  grpc::ClientContext ctx;
  SetDeadline(ctx, max_us);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cancelled_) return Status(StatusCode::kCancelled, "stream cancelled");
    stream_context_ = &ctx;
  }
  v1::AssignmentsRequest req;
  req.set_node_id(node_id);
  req.set_session(session);
  auto reader = v1::NodeService::NewStub(channel_)->Assignments(&ctx, req);
  v1::AssignmentBatch batch;
  while (reader->Read(&batch)) on_batch(FromProto(batch));
  grpc::Status s = reader->Finish();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stream_context_ = nullptr;
  }
  if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) return OkStatus();  // renew
  return FromGrpc(s);
}

void NodeClient::CancelStream() {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_ = true;
  if (stream_context_ != nullptr) stream_context_->TryCancel();
}

}  // namespace meridian::rpc
