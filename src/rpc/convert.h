// protobuf <-> model translation for meridian.v1, and the limits every channel and
// server applies. Nothing outside src/rpc/ includes the generated headers.
//
// Thread-safety: pure functions.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include <grpcpp/grpcpp.h>

#include "common/status.h"
#include "meridian/v1/meridian.pb.h"
#include "model/run_state.h"
#include "rpc/api.h"

namespace meridian::rpc {

// Largest message a server accepts (a job spec, a batch of updates) and the largest
// a client accepts (a job with its tasks and outputs).
inline constexpr int kMaxRequestBytes = 16 << 20;
inline constexpr int kMaxResponseBytes = 256 << 20;

grpc::Status ToGrpc(const Status& status);
Status FromGrpc(const grpc::Status& status);
struct ChannelOptions {
  // Never share its TCP connection with another channel of this process to the same
  // address (gRPC shares them by default).
  bool own_connection = false;
  // How often an idle connection is pinged to find a dead peer. An agent's channel
  // pings once a minute (its heartbeats and the renewal of its stream find a dead
  // coordinator too), so thousands of idle agents do not keep the coordinator busy
  // answering pings; a client's every 10 s.
  int64_t keepalive_us = 10'000'000;
  // gRPC's bandwidth probe: a ping after data arrives, to size its flow-control window.
  // Worth it for large answers over long links; an agent's small messages only double
  // what each costs the coordinator.
  bool bandwidth_probe = true;
};
inline constexpr int64_t kAgentKeepaliveUs = 60'000'000;
// An agent's channel to its coordinator.
inline constexpr ChannelOptions kAgentChannel{false, kAgentKeepaliveUs, false};
// A heartbeat interval a coordinator sent, kept within 10 ms and 10 minutes whatever
// the message says.
inline int64_t HeartbeatIntervalFromWire(int64_t us) { return std::clamp<int64_t>(us, 10'000, 600'000'000); }

// A channel to `address` with Meridian's message limits and keepalive settings.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address, const ChannelSecurity& security = {},
                                           const ChannelOptions& options = {});
// A client context whose deadline is `timeout_us` from now.
void SetDeadline(grpc::ClientContext& context, int64_t timeout_us);

void ToProto(const model::Node& node, const std::string& site, v1::NodeSpec* out);
model::Node FromProto(const v1::NodeSpec& in);

void ToProto(const model::TaskKey& key, v1::TaskKey* out);
model::TaskKey FromProto(const v1::TaskKey& in);
void ToProto(const model::TaskUpdate& update, v1::TaskUpdate* out);
model::TaskUpdate FromProto(const v1::TaskUpdate& in);
void ToProto(const model::TaskAssignment& a, v1::Assignment* out);
model::TaskAssignment FromProto(const v1::Assignment& in);

void ToProto(const model::AgentRegistration& r, v1::RegisterRequest* out);
model::AgentRegistration FromProto(const v1::RegisterRequest& in);
void ToProto(const model::RegistrationReply& r, v1::RegisterResponse* out);
model::RegistrationReply FromProto(const v1::RegisterResponse& in);
void ToProto(const model::AgentHeartbeat& h, v1::HeartbeatRequest* out);
model::AgentHeartbeat FromProto(const v1::HeartbeatRequest& in);
void ToProto(const model::ObjectReplica& r, v1::ObjectReplica* out);
model::ObjectReplica FromProto(const v1::ObjectReplica& in);
void ToProto(const model::ObjectLocation& l, v1::ObjectLocation* out);
model::ObjectLocation FromProto(const v1::ObjectLocation& in);
void ToProto(const model::DatasetView& d, v1::Dataset* out);
model::DatasetView FromProto(const v1::Dataset& in);
void ToProto(const model::HeldObject& o, v1::HeldObject* out);
model::HeldObject FromProto(const v1::HeldObject& in);
void ToProto(const model::AssignmentBatch& b, v1::AssignmentBatch* out);
model::AssignmentBatch FromProto(const v1::AssignmentBatch& in);

void ToProto(const model::TenantView& t, v1::TenantInfo* out);
model::TenantView FromProto(const v1::TenantInfo& in);
void ToProto(const model::TokenRecord& t, v1::Token* out);
model::TokenRecord FromProto(const v1::Token& in);

void ToProto(const model::LinkTraffic& t, v1::LinkTraffic* out);
model::LinkTraffic FromProto(const v1::LinkTraffic& in);
void ToProto(const model::JobSummary& s, v1::JobInfo* out);
void ToProto(const model::JobView& v, v1::JobInfo* out);
model::JobView FromProto(const v1::JobInfo& in);
void ToProto(const model::NodeView& n, v1::NodeInfo* out);
model::NodeView FromProto(const v1::NodeInfo& in);
void ToProto(const TaskLog& log, v1::TaskLog* out);
TaskLog FromProto(const v1::TaskLog& in);
void ToProto(const model::PlanReport& r, v1::PlanJobResponse* out);
model::PlanReport FromProto(const v1::PlanJobResponse& in);

}  // namespace meridian::rpc
