#include "rpc/node_client.h"

#include <grpcpp/grpcpp.h>

#include "meridian/v1/meridian.grpc.pb.h"
#include "rpc/convert.h"

namespace meridian::rpc {

NodeClient::NodeClient(const std::string& address) : address_(address), channel_(MakeChannel(address)) {}
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

StatusOr<bool> NodeClient::Heartbeat(const model::AgentHeartbeat& heartbeat, int64_t timeout_us) {
  v1::HeartbeatRequest req;
  ToProto(heartbeat, &req);
  v1::HeartbeatResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(ctx, timeout_us);
  grpc::Status s = v1::NodeService::NewStub(channel_)->Heartbeat(&ctx, req, &resp);
  if (!s.ok()) return FromGrpc(s).WithPrefix("heartbeat to " + address_);
  return resp.reregister();
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
