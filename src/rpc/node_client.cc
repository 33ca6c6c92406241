#include "rpc/node_client.h"

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>

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
  // Also in the call's headers: the coordinator reads the message of a call without a
  // client certificate only once they show a join token.
  if (!std::all_of(token.begin(), token.end(), [](char c) { return c > ' ' && c < 127; })) {
    return InvalidArgumentError("the join token holds characters no token has (spaces, controls or non-ASCII)");
  }
  ctx.AddMetadata("authorization", "Bearer " + token);
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

std::optional<StatusOr<NodeClient::HeartbeatAnswer>> NodeClient::Report(const model::AgentHeartbeat& heartbeat,
                                                                         int64_t timeout_us) {
  v1::AgentMessage msg;
  ToProto(heartbeat, msg.mutable_report());
  uint64_t session = 0;
  uint64_t seq = 0;
  {
    std::lock_guard<std::mutex> write(write_mu_);
    Session* stream = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (session_ == nullptr) return std::nullopt;
      stream = session_;
      session = sessions_;
      seq = next_seq_++;
    }
    msg.set_seq(seq);
    if (!stream->Write(msg)) return std::nullopt;  // the session is ending
  }
  std::unique_lock<std::mutex> lock(mu_);
  const auto acked = [&] { return acked_session_ == session && acked_seq_ >= seq; };
  const bool woken = ack_cv_.wait_for(lock, std::chrono::microseconds(std::max<int64_t>(timeout_us, 0)), [&] {
    return acked() || session_ == nullptr || sessions_ != session;
  });
  if (acked()) return StatusOr<HeartbeatAnswer>(acked_);
  if (woken) return std::nullopt;  // the session ended first: the report goes again as a call
  // Unanswered: the session is taken for stuck, and opened anew by its reader.
  if (stream_context_ != nullptr && sessions_ == session) stream_context_->TryCancel();
  return StatusOr<HeartbeatAnswer>(DeadlineExceededError(fmt::format(
      "heartbeat to {}: no acknowledgement on the node's session within {} ms", address_, timeout_us / 1000)));
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
  std::unique_ptr<Session> stream = v1::NodeService::NewStub(channel_)->Session(&ctx);
  v1::AgentMessage open;
  open.mutable_open()->set_node_id(node_id);
  open.mutable_open()->set_session(session);
  if (stream->Write(open)) {
    uint64_t opened = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      session_ = stream.get();
      opened = ++sessions_;
    }
    v1::CoordinatorMessage msg;
    while (stream->Read(&msg)) {
      if (msg.has_batch()) on_batch(FromProto(msg.batch()));
      if (msg.has_ack()) {
        const int64_t interval = msg.ack().heartbeat_interval_us();
        std::lock_guard<std::mutex> lock(mu_);
        acked_session_ = opened;
        acked_seq_ = msg.ack().seq();
        acked_ = HeartbeatAnswer{msg.ack().reregister(), interval > 0 ? HeartbeatIntervalFromWire(interval) : 0, true};
        ack_cv_.notify_all();
      }
      msg.Clear();
    }
  }
  {
    // No report is being written once the session is closed to them; then it ends.
    std::lock_guard<std::mutex> write(write_mu_);
    std::lock_guard<std::mutex> lock(mu_);
    session_ = nullptr;
    ack_cv_.notify_all();
  }
  grpc::Status s = stream->Finish();
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
