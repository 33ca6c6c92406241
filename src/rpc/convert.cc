#include "rpc/convert.h"

#include <algorithm>
#include <charconv>
#include <chrono>

#include "common/net.h"
#include "common/strings.h"

namespace meridian::rpc {

void ToProto(const model::TenantView& t, v1::TenantInfo* out) {
  out->set_name(t.name);
  out->set_weight(t.weight);
  out->set_max_gpu_milli(t.max_gpu_milli);
  out->set_max_cpu_milli(t.max_cpu_milli);
  out->set_max_memory_bytes(t.max_memory_bytes);
  out->set_listed(t.listed);
  out->set_gpu_milli(t.gpu_milli);
  out->set_cpu_milli(t.cpu_milli);
  out->set_memory_bytes(t.memory_bytes);
  out->set_jobs_active(t.jobs_active);
  out->set_tasks_running(t.tasks_running);
  out->set_tasks_waiting(t.tasks_waiting);
  for (const auto& [type, milli] : t.max_gpu_milli_by_type) (*out->mutable_max_gpu_milli_by_type())[type] = milli;
  for (const auto& [type, milli] : t.gpu_milli_by_type) (*out->mutable_gpu_milli_by_type())[type] = milli;
  out->set_budget_micro_usd_per_day(t.budget_micro_usd_per_day);
  out->set_spent_today_micro_usd(t.spent_today_micro_usd);
}

model::TenantView FromProto(const v1::TenantInfo& in) {
  model::TenantView t{in.name(),      in.weight(),         in.max_gpu_milli(), in.max_cpu_milli(),
                      in.max_memory_bytes(), in.listed(),   in.gpu_milli(),     in.cpu_milli(),
                      in.memory_bytes(), in.jobs_active(), in.tasks_running(), in.tasks_waiting()};
  t.max_gpu_milli_by_type.insert(in.max_gpu_milli_by_type().begin(), in.max_gpu_milli_by_type().end());
  t.gpu_milli_by_type.insert(in.gpu_milli_by_type().begin(), in.gpu_milli_by_type().end());
  t.budget_micro_usd_per_day = in.budget_micro_usd_per_day();
  t.spent_today_micro_usd = in.spent_today_micro_usd();
  return t;
}

void ToProto(const model::TokenRecord& t, v1::Token* out) {
  out->set_id(t.id);
  out->set_user(t.user);
  out->set_tenant(t.tenant);
  out->set_role(std::string(model::RoleName(t.role)));
  out->set_created_us(t.created_us);
  out->set_expires_us(t.expires_us);
  out->set_revoked(t.revoked);
}

model::TokenRecord FromProto(const v1::Token& in) {
  model::TokenRecord t;
  t.id = in.id();
  t.user = in.user();
  t.tenant = in.tenant();
  t.role = model::ParseRole(in.role()).value_or(model::Role::kViewer);
  t.created_us = in.created_us();
  t.expires_us = in.expires_us();
  t.revoked = in.revoked();
  return t;
}

void ToProto(const model::LinkTraffic& t, v1::LinkTraffic* out) {
  out->set_to_site(t.to_site);
  out->set_bytes(t.bytes);
  out->set_transfers(t.transfers);
  out->set_egress_micro_usd(t.egress_micro_usd);
  out->set_requests(t.requests);
  out->set_waited_us(t.waited_us);
}

model::LinkTraffic FromProto(const v1::LinkTraffic& in) {
  return model::LinkTraffic{in.to_site(), in.bytes(), in.transfers(), in.egress_micro_usd(), in.requests(),
                            in.waited_us()};
}

grpc::Status ToGrpc(const Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), status.message());
}

Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return OkStatus();
  return Status(static_cast<StatusCode>(status.error_code()), status.error_message());
}

namespace {

// gRPC's target for `address`: one "host:port" as it is; several, comma-separated
// (coordinators sharing a store, one of them leading), as one list of numeric
// addresses that gRPC's pick_first policy tries in turn, reconnecting to whichever
// answers (a standby does not listen until it leads). They share one certificate,
// checked against the first's host name.
std::string ChannelTarget(const std::string& address, grpc::ChannelArguments& args) {
  if (address.find(',') == std::string::npos) return address;
  std::string resolved;
  bool v6 = false;
  std::string first_host;
  for (std::string_view rest = address; !rest.empty();) {
    const size_t comma = rest.find(',');
    const std::string one(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    const size_t colon = one.rfind(':');
    if (colon == std::string::npos || colon == 0) return address;  // gRPC names what is wrong
    std::string host = one.substr(0, colon);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    int port = 0;
    const std::string port_text = one.substr(colon + 1);
    if (std::from_chars(port_text.data(), port_text.data() + port_text.size(), port).ec != std::errc()) {
      return address;
    }
    StatusOr<std::string> numeric = ResolveNumeric(host, port);
    if (!numeric.ok()) return address;
    if (first_host.empty()) first_host = host;
    const bool is_v6 = numeric->front() == '[';
    if (!resolved.empty() && is_v6 != v6) return address;  // one family per list
    v6 = is_v6;
    resolved += (resolved.empty() ? "" : ",") + *numeric;
  }
  args.SetSslTargetNameOverride(first_host);
  args.SetString(GRPC_ARG_DEFAULT_AUTHORITY, first_host);
  return (v6 ? "ipv6:" : "ipv4:") + resolved;
}

}  // namespace

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address, const ChannelSecurity& security,
                                           const ChannelOptions& options) {
  grpc::ChannelArguments args;
  const std::string target = ChannelTarget(address, args);
  if (options.own_connection) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  if (!options.bandwidth_probe) args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetMaxReceiveMessageSize(kMaxResponseBytes);
  args.SetMaxSendMessageSize(kMaxRequestBytes);
  // Fail fast on a dead peer instead of waiting for TCP to notice.
  args.SetString("grpc.optimization_target", "latency");
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, static_cast<int>(options.keepalive_us / 1000));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5'000);
  // Reconnect to a restarted coordinator within a heartbeat or two: retries 100 ms
  // apart at first, at most 1 s (gRPC backs off to 120 s by default).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1'000);
  // gRPC also takes this as the time one connection attempt may take (TCP and the
  // HTTP/2 handshake). At 100 ms, as it once was, a coordinator across a WAN link of
  // over 100 ms, or a busy one, could never be reached.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 10'000);
  if (!security.tls.enabled()) return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = security.tls.ca_pem;
  ssl.pem_private_key = security.tls.key_pem;
  ssl.pem_cert_chain = security.tls.cert_pem;
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::SslCredentials(ssl);
  if (!security.token.empty()) {
    creds = grpc::CompositeChannelCredentials(creds, grpc::AccessTokenCredentials(security.token));
  }
  return grpc::CreateCustomChannel(target, creds, args);
}

void SetDeadline(grpc::ClientContext& context, int64_t timeout_us) {
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::microseconds(timeout_us));
}

void ToProto(const model::Node& node, const std::string& site, v1::NodeSpec* out) {
  out->set_name(node.name);
  out->set_site(site);
  out->set_cpu_milli(node.cpu_milli);
  out->set_memory_bytes(node.memory_bytes);
  out->set_disk_bytes(node.disk_bytes);
  for (const model::Device& d : node.devices) {
    v1::Device* p = out->add_devices();
    p->set_type(d.type);
    p->set_index(d.index);
    p->set_memory_bytes(d.memory_bytes);
    p->set_emulated(d.emulated);
    p->set_speed_factor(d.speed_factor);
  }
  for (const auto& [k, v] : node.labels) (*out->mutable_labels())[k] = v;
  out->set_price_micro_usd_per_hour(node.price_micro_usd_per_hour);
  out->set_spot(node.spot);
}

model::Node FromProto(const v1::NodeSpec& in) {
  model::Node node;
  node.name = in.name();
  node.group = in.name();
  node.cpu_milli = in.cpu_milli();
  node.memory_bytes = in.memory_bytes();
  node.disk_bytes = in.disk_bytes();
  for (const v1::Device& d : in.devices()) {
    node.devices.push_back(model::Device{d.type(), d.index(), d.memory_bytes(), d.emulated(), d.speed_factor()});
  }
  for (const auto& [k, v] : in.labels()) node.labels[k] = v;
  node.price_micro_usd_per_hour = in.price_micro_usd_per_hour();
  node.spot = in.spot();
  return node;
}

void ToProto(const model::TaskKey& key, v1::TaskKey* out) {
  out->set_job_id(key.job);
  out->set_task(key.task);
  out->set_attempt(key.attempt);
}

model::TaskKey FromProto(const v1::TaskKey& in) { return {in.job_id(), in.task(), in.attempt()}; }

namespace {

v1::TaskUpdate::State ToProto(model::UpdateKind kind) {
  switch (kind) {
    case model::UpdateKind::kRunning: return v1::TaskUpdate::RUNNING;
    case model::UpdateKind::kSucceeded: return v1::TaskUpdate::SUCCEEDED;
    case model::UpdateKind::kFailed: return v1::TaskUpdate::FAILED;
    case model::UpdateKind::kCancelled: return v1::TaskUpdate::CANCELLED;
  }
  return v1::TaskUpdate::STATE_UNSPECIFIED;
}

model::UpdateKind FromProto(v1::TaskUpdate::State state) {
  switch (state) {
    case v1::TaskUpdate::SUCCEEDED: return model::UpdateKind::kSucceeded;
    case v1::TaskUpdate::FAILED: return model::UpdateKind::kFailed;
    case v1::TaskUpdate::CANCELLED: return model::UpdateKind::kCancelled;
    default: return model::UpdateKind::kRunning;
  }
}

void AllocationToProto(const model::TaskAllocation& a, v1::Assignment* out) {
  out->set_cpu_milli(a.cpu_milli);
  out->set_memory_bytes(a.memory_bytes);
  for (int32_t d : a.devices) out->add_devices(d);
  out->set_device_share_milli(a.device_share_milli);
}

}  // namespace

void ToProto(const model::TaskUpdate& update, v1::TaskUpdate* out) {
  ToProto(update.key, out->mutable_key());
  out->set_state(ToProto(update.kind));
  out->set_exit_code(update.exit_code);
  out->set_reason(ToUtf8(update.reason));
  out->set_output(update.output);
  out->set_stdout_tail(update.stdout_tail);
  out->set_stderr_tail(update.stderr_tail);
  out->set_stdout_bytes(update.stdout_bytes);
  out->set_stderr_bytes(update.stderr_bytes);
  for (const model::InputTransfer& t : update.transfers) {
    v1::InputTransfer* p = out->add_transfers();
    p->set_object_id(t.object_id);
    p->set_from_site(t.from_site);
    p->set_to_site(t.to_site);
    p->set_bytes(t.bytes);
    p->set_seconds(t.seconds);
  }
  if (!update.output_object.id.empty()) ToProto(update.output_object, out->mutable_output_object());
  if (!update.checkpoint.id.empty()) ToProto(update.checkpoint, out->mutable_checkpoint());
  for (const model::LostInput& l : update.lost_inputs) {
    v1::LostInput* p = out->add_lost_inputs();
    p->set_object_id(l.object_id);
    for (const std::string& n : l.damaged_nodes) p->add_damaged_nodes(n);
  }
}

model::TaskUpdate FromProto(const v1::TaskUpdate& in) {
  model::TaskUpdate u;
  u.key = FromProto(in.key());
  u.kind = FromProto(in.state());
  u.exit_code = in.exit_code();
  u.reason = in.reason();
  u.output = in.output();
  u.stdout_tail = in.stdout_tail();
  u.stderr_tail = in.stderr_tail();
  u.stdout_bytes = in.stdout_bytes();
  u.stderr_bytes = in.stderr_bytes();
  for (const v1::InputTransfer& t : in.transfers()) {
    u.transfers.push_back(model::InputTransfer{t.object_id(), t.from_site(), t.to_site(), t.bytes(), t.seconds()});
  }
  if (in.has_output_object()) u.output_object = FromProto(in.output_object());
  if (in.has_checkpoint()) u.checkpoint = FromProto(in.checkpoint());
  for (const v1::LostInput& l : in.lost_inputs()) {
    u.lost_inputs.push_back(model::LostInput{l.object_id(), {l.damaged_nodes().begin(), l.damaged_nodes().end()}});
  }
  return u;
}

void ToProto(const model::TaskAssignment& a, v1::Assignment* out) {
  ToProto(a.key, out->mutable_key());
  out->set_job_name(a.job_name);
  out->set_task_name(a.task_name);
  out->set_index(a.index);
  out->set_kernel(a.kernel);
  for (const std::string& c : a.command) out->add_command(c);
  for (const auto& [k, v] : a.args) (*out->mutable_args())[k] = v;
  for (const auto& [k, v] : a.env) (*out->mutable_env())[k] = v;
  for (const std::string& i : a.inputs) out->add_inputs(i);
  out->set_device_type(a.device_type);
  AllocationToProto(a.allocation, out);
  out->set_timeout_us(a.timeout_us);
  out->set_stop_grace_us(a.stop_grace_us);
  out->set_tenant(a.tenant);
  for (const model::ObjectLocation& l : a.input_objects) ToProto(l, out->add_input_objects());
  for (const model::ObjectLocation& l : a.dep_objects) ToProto(l, out->add_dep_objects());
  if (!a.checkpoint.id.empty()) ToProto(a.checkpoint, out->mutable_checkpoint());
  if (!a.gang.name.empty()) {
    v1::GangInfo* g = out->mutable_gang();
    g->set_name(a.gang.name);
    g->set_rank(a.gang.rank);
    for (const model::GangMember& m : a.gang.members) {
      v1::GangMember* pm = g->add_members();
      pm->set_node(m.node);
      pm->set_site(m.site);
      pm->set_host(m.host);
    }
    g->set_master_addr(a.gang.master_addr);
    g->set_master_port(a.gang.master_port);
    g->set_secret(a.gang.secret);
    g->set_failure(a.gang.failure);
  }
}

model::TaskAssignment FromProto(const v1::Assignment& in) {
  model::TaskAssignment a;
  a.key = FromProto(in.key());
  a.job_name = in.job_name();
  a.task_name = in.task_name();
  a.index = in.index();
  a.kernel = in.kernel();
  a.command.assign(in.command().begin(), in.command().end());
  for (const auto& [k, v] : in.args()) a.args[k] = v;
  for (const auto& [k, v] : in.env()) a.env[k] = v;
  a.inputs.assign(in.inputs().begin(), in.inputs().end());
  a.device_type = in.device_type();
  a.allocation.cpu_milli = in.cpu_milli();
  a.allocation.memory_bytes = in.memory_bytes();
  a.allocation.devices.assign(in.devices().begin(), in.devices().end());
  a.allocation.device_share_milli = in.device_share_milli();
  a.timeout_us = in.timeout_us();
  a.stop_grace_us = std::clamp<int64_t>(in.stop_grace_us(), 0, int64_t{300} * 1'000'000);
  a.tenant = in.tenant();
  for (const v1::ObjectLocation& l : in.input_objects()) a.input_objects.push_back(FromProto(l));
  for (const v1::ObjectLocation& l : in.dep_objects()) a.dep_objects.push_back(FromProto(l));
  if (in.has_checkpoint()) a.checkpoint = FromProto(in.checkpoint());
  if (in.has_gang()) {
    // Taken as sent; the executor refuses a gang that does not hold together (a rank
    // outside its members, more than model::kMaxGangMembers of them, no port).
    a.gang.name = in.gang().name();
    a.gang.rank = in.gang().rank();
    for (const v1::GangMember& m : in.gang().members()) a.gang.members.push_back({m.node(), m.site(), m.host()});
    a.gang.master_addr = in.gang().master_addr();
    a.gang.master_port = in.gang().master_port();
    a.gang.secret = in.gang().secret();
    a.gang.failure = in.gang().failure().empty() ? "restart" : in.gang().failure();
  }
  return a;
}

void ToProto(const model::HeldObject& o, v1::HeldObject* out) {
  out->set_id(o.id);
  out->set_size(o.size);
}

model::HeldObject FromProto(const v1::HeldObject& in) { return model::HeldObject{in.id(), in.size()}; }

void ToProto(const model::AgentRegistration& r, v1::RegisterRequest* out) {
  ToProto(r.node, r.site, out->mutable_node());
  for (const std::string& k : r.kernels) out->add_kernels(k);
  for (const model::TaskKey& k : r.running) ToProto(k, out->add_running());
  for (const model::TaskUpdate& u : r.unacked) ToProto(u, out->add_unacked());
  out->set_transfer_address(r.transfer_address);
  for (const model::HeldObject& o : r.objects) ToProto(o, out->add_objects());
  out->set_previous_session(r.previous_session);
  out->set_metrics_url(r.metrics_url);
}

model::AgentRegistration FromProto(const v1::RegisterRequest& in) {
  model::AgentRegistration r;
  r.node = FromProto(in.node());
  r.site = in.node().site();
  r.kernels.assign(in.kernels().begin(), in.kernels().end());
  for (const v1::TaskKey& k : in.running()) r.running.push_back(FromProto(k));
  for (const v1::TaskUpdate& u : in.unacked()) r.unacked.push_back(FromProto(u));
  r.transfer_address = in.transfer_address();
  r.previous_session = in.previous_session();
  r.metrics_url = in.metrics_url();
  for (const v1::HeldObject& o : in.objects()) r.objects.push_back(FromProto(o));
  return r;
}

void ToProto(const model::RegistrationReply& r, v1::RegisterResponse* out) {
  out->set_node_id(r.node_id);
  out->set_session(r.session);
  out->set_heartbeat_interval_us(r.heartbeat_interval_us);
  for (const model::TaskKey& k : r.cancel) ToProto(k, out->add_cancel());
  for (const model::EmulatedLink& l : r.links) {
    v1::EmulatedLink* p = out->add_links();
    p->set_to_site(l.to_site);
    p->set_rtt_us(l.rtt_us);
    p->set_bandwidth_bps(l.bandwidth_bps);
    p->set_egress_micro_usd_per_gb(l.egress_micro_usd_per_gb);
    p->set_jitter_us(l.jitter_us);
  }
  out->set_ticket_key(r.ticket_key);
}

model::RegistrationReply FromProto(const v1::RegisterResponse& in) {
  model::RegistrationReply r;
  r.node_id = in.node_id();
  r.session = in.session();
  r.heartbeat_interval_us = HeartbeatIntervalFromWire(in.heartbeat_interval_us());
  for (const v1::TaskKey& k : in.cancel()) r.cancel.push_back(FromProto(k));
  for (const v1::EmulatedLink& l : in.links()) {
    // A jitter beyond what a fleet file may say is the fleet file's bound.
    r.links.push_back(model::EmulatedLink{l.to_site(), l.rtt_us(), l.bandwidth_bps(), l.egress_micro_usd_per_gb(),
                                          std::clamp<int64_t>(l.jitter_us(), 0, model::kMaxLinkJitterUs)});
  }
  r.ticket_key = in.ticket_key();
  return r;
}

void ToProto(const model::AgentHeartbeat& h, v1::HeartbeatRequest* out) {
  out->set_node_id(h.node_id);
  out->set_session(h.session);
  for (const model::TaskUpdate& u : h.updates) ToProto(u, out->add_updates());
  out->set_running(h.running);
  out->set_cpu_used_milli(h.cpu_used_milli);
  out->set_load_average(h.load_average);
  for (const model::TaskKey& k : h.holding) ToProto(k, out->add_holding());
  for (const model::HeldObject& o : h.objects_added) ToProto(o, out->add_objects_added());
  for (const std::string& id : h.objects_removed) out->add_objects_removed(id);
  for (const model::LinkTraffic& t : h.traffic) ToProto(t, out->add_traffic());
}

model::AgentHeartbeat FromProto(const v1::HeartbeatRequest& in) {
  model::AgentHeartbeat h;
  h.node_id = in.node_id();
  h.session = in.session();
  h.updates.reserve(in.updates_size());
  for (const v1::TaskUpdate& u : in.updates()) h.updates.push_back(FromProto(u));
  h.running = in.running();
  h.cpu_used_milli = in.cpu_used_milli();
  h.load_average = in.load_average();
  for (const v1::TaskKey& k : in.holding()) h.holding.push_back(FromProto(k));
  for (const v1::HeldObject& o : in.objects_added()) h.objects_added.push_back(FromProto(o));
  h.objects_removed.assign(in.objects_removed().begin(), in.objects_removed().end());
  for (const v1::LinkTraffic& t : in.traffic()) {
    h.traffic.push_back(FromProto(t));
  }
  return h;
}

void ToProto(const model::ObjectReplica& r, v1::ObjectReplica* out) {
  out->set_node_id(r.node_id);
  out->set_node(r.node);
  out->set_site(r.site);
  out->set_transfer_address(r.transfer_address);
  out->set_ticket(r.ticket);
}

model::ObjectReplica FromProto(const v1::ObjectReplica& in) {
  return model::ObjectReplica{in.node_id(), in.node(), in.site(), in.transfer_address(), in.ticket()};
}

void ToProto(const model::ObjectLocation& l, v1::ObjectLocation* out) {
  out->set_id(l.id);
  out->set_name(l.name);
  out->set_size(l.size);
  for (const model::ObjectReplica& r : l.replicas) ToProto(r, out->add_replicas());
  out->set_ticket(l.ticket);
}

model::ObjectLocation FromProto(const v1::ObjectLocation& in) {
  model::ObjectLocation l{in.id(), in.name(), in.size(), {}, in.ticket()};
  for (const v1::ObjectReplica& r : in.replicas()) l.replicas.push_back(FromProto(r));
  return l;
}

void ToProto(const model::AssignmentBatch& b, v1::AssignmentBatch* out) {
  for (const model::TaskAssignment& a : b.assignments) ToProto(a, out->add_assignments());
  for (const model::TaskKey& k : b.cancel) ToProto(k, out->add_cancel());
  for (const std::string& id : b.release_objects) out->add_release_objects(id);
}

model::AssignmentBatch FromProto(const v1::AssignmentBatch& in) {
  model::AssignmentBatch b;
  b.assignments.reserve(in.assignments_size());
  for (const v1::Assignment& a : in.assignments()) b.assignments.push_back(FromProto(a));
  for (const v1::TaskKey& k : in.cancel()) b.cancel.push_back(FromProto(k));
  b.release_objects.assign(in.release_objects().begin(), in.release_objects().end());
  return b;
}

void ToProto(const model::JobSummary& s, v1::JobInfo* out) {
  out->set_id(s.job.id);
  out->set_name(s.job.name);
  out->set_tenant(s.job.tenant);
  out->set_state(std::string(model::JobStatusName(s.job.status)));
  out->set_reason(ToUtf8(s.job.reason));
  out->set_submitted_us(s.job.submitted_us);
  out->set_finished_us(s.job.finished_us);
  out->set_tasks_total(s.tasks_total);
  out->set_tasks_waiting(s.waiting);
  out->set_tasks_running(s.running);
  out->set_tasks_succeeded(s.succeeded);
  out->set_tasks_failed(s.failed);
  out->set_tasks_cancelled(s.cancelled);
  out->set_retries(s.retries);
  out->set_version(s.version);
  for (const auto& [site, n] : s.running_by_site) (*out->mutable_running_by_site())[site] = n;
}

void ToProto(const model::JobView& v, v1::JobInfo* out) {
  ToProto(v.summary, out);
  out->set_next_task(v.next_task);
  for (const model::JobTraffic& t : v.traffic) {
    v1::JobTraffic* p = out->add_traffic();
    p->set_from_site(t.from_site);
    p->set_to_site(t.to_site);
    p->set_bytes(t.bytes);
    p->set_objects(t.objects);
    p->set_egress_micro_usd(t.egress_micro_usd);
  }
  for (const model::SiteBytes& b : v.input_bytes) {
    v1::SiteBytes* p = out->add_input_bytes();
    p->set_site(b.site);
    p->set_bytes(b.bytes);
  }
  for (const model::TaskView& t : v.tasks) {
    v1::TaskInfo* p = out->add_tasks();
    const model::TaskRecord& r = t.record;
    p->set_index(r.task);
    p->set_name(t.name);
    p->set_result(t.result);
    p->set_state(std::string(model::TaskStatusName(r.status)));
    p->set_attempts(r.attempt);
    p->set_node(r.node);
    p->set_site(r.site);
    p->set_device_type(r.device_type);
    p->set_emulated(r.emulated);
    p->set_reason(ToUtf8(r.reason));
    p->set_output(r.output);
    p->set_output_object(r.output_object);
    p->set_started_us(r.started_us);
    p->set_finished_us(r.finished_us);
    for (const model::AttemptRecord& a : t.history) {
      v1::TaskAttempt* h = p->add_history();
      h->set_attempt(a.attempt);
      h->set_node(a.node);
      h->set_site(a.site);
      h->set_state(a.outcome);
      h->set_reason(ToUtf8(a.reason));
      h->set_exit_code(a.exit_code);
      h->set_started_us(a.started_us);
      h->set_ended_us(a.ended_us);
    }
  }
}

model::JobView FromProto(const v1::JobInfo& in) {
  model::JobView v;
  v.next_task = in.next_task();
  model::JobSummary& s = v.summary;
  s.job.id = in.id();
  s.job.name = in.name();
  s.job.tenant = in.tenant();
  s.job.status = model::ParseJobStatus(in.state()).value_or(model::JobStatus::kQueued);
  s.job.reason = in.reason();
  s.job.submitted_us = in.submitted_us();
  s.job.finished_us = in.finished_us();
  s.tasks_total = in.tasks_total();
  s.waiting = in.tasks_waiting();
  s.running = in.tasks_running();
  s.succeeded = in.tasks_succeeded();
  s.failed = in.tasks_failed();
  s.cancelled = in.tasks_cancelled();
  s.retries = in.retries();
  s.version = in.version();
  for (const auto& [site, n] : in.running_by_site()) s.running_by_site[site] = n;
  for (const v1::JobTraffic& t : in.traffic()) {
    v.traffic.push_back(model::JobTraffic{t.from_site(), t.to_site(), t.bytes(), t.objects(), t.egress_micro_usd()});
  }
  for (const v1::SiteBytes& b : in.input_bytes()) v.input_bytes.push_back(model::SiteBytes{b.site(), b.bytes()});
  for (const v1::TaskInfo& p : in.tasks()) {
    model::TaskView t;
    t.name = p.name();
    t.result = p.result();
    model::TaskRecord& r = t.record;
    r.job = in.id();
    r.task = p.index();
    r.status = model::ParseTaskStatus(p.state()).value_or(model::TaskStatus::kQueued);
    r.attempt = p.attempts();
    r.node = p.node();
    r.site = p.site();
    r.device_type = p.device_type();
    r.emulated = p.emulated();
    r.reason = p.reason();
    r.output = p.output();
    r.output_object = p.output_object();
    r.started_us = p.started_us();
    r.finished_us = p.finished_us();
    for (const v1::TaskAttempt& h : p.history()) {
      t.history.push_back(model::AttemptRecord{in.id(), p.index(), h.attempt(), h.node(), h.site(), h.state(),
                                               h.reason(), h.exit_code(), h.started_us(), h.ended_us()});
    }
    v.tasks.push_back(std::move(t));
  }
  return v;
}

void ToProto(const model::NodeView& n, v1::NodeInfo* out) {
  ToProto(n.node, n.site, out->mutable_spec());
  out->set_node_id(n.node.id.value());
  out->set_state(model::NodeStateName(n));
  out->set_heartbeat_age_us(n.heartbeat_age_us);
  out->set_running(n.running);
  out->set_cpu_allocated_milli(n.cpu_allocated_milli);
  out->set_memory_allocated_bytes(n.memory_allocated_bytes);
  out->set_devices_allocated_milli(n.devices_allocated_milli);
  out->set_load_average(n.load_average);
  out->set_registered_us(n.registered_us);
  for (const model::LinkTraffic& t : n.sent) ToProto(t, out->add_sent());
  out->set_metrics_url(n.metrics_url);
  out->set_host(n.host);
}

model::NodeView FromProto(const v1::NodeInfo& in) {
  model::NodeView n;
  n.node = FromProto(in.spec());
  n.node.id = NodeId(in.node_id());
  n.site = in.spec().site();
  n.alive = in.state() == "alive";
  n.left = in.state() == "left";
  n.heartbeat_age_us = in.heartbeat_age_us();
  n.running = in.running();
  n.cpu_allocated_milli = in.cpu_allocated_milli();
  n.memory_allocated_bytes = in.memory_allocated_bytes();
  n.devices_allocated_milli = in.devices_allocated_milli();
  n.load_average = in.load_average();
  n.registered_us = in.registered_us();
  for (const v1::LinkTraffic& t : in.sent()) {
    n.sent.push_back(FromProto(t));
  }
  n.metrics_url = in.metrics_url();
  n.host = in.host();
  return n;
}

void ToProto(const TaskLog& log, v1::TaskLog* out) {
  out->set_task(log.task);
  out->set_task_index(log.record.task);
  out->set_attempt(log.record.attempt);
  out->set_node(log.record.node);
  out->set_stdout_tail(log.record.stdout_tail);
  out->set_stderr_tail(log.record.stderr_tail);
  out->set_stdout_bytes(log.record.stdout_bytes);
  out->set_stderr_bytes(log.record.stderr_bytes);
  out->set_running(log.running);
}

TaskLog FromProto(const v1::TaskLog& in) {
  TaskLog log;
  log.task = in.task();
  log.record.task = in.task_index();
  log.record.attempt = in.attempt();
  log.record.node = in.node();
  log.record.stdout_tail = in.stdout_tail();
  log.record.stderr_tail = in.stderr_tail();
  log.record.stdout_bytes = in.stdout_bytes();
  log.record.stderr_bytes = in.stderr_bytes();
  log.running = in.running();
  return log;
}

void ToProto(const model::PlanReport& r, v1::PlanJobResponse* out) {
  out->set_job(r.job);
  out->set_objective(r.objective);
  if (r.deadline_us) out->set_deadline_us(*r.deadline_us);
  if (r.budget_micro_usd) out->set_budget_micro_usd(*r.budget_micro_usd);
  out->set_fleet_nodes(r.fleet_nodes);
  out->set_fleet_sites(r.fleet_sites);
  for (const model::PlannedTask& t : r.tasks) {
    v1::PlannedTask* p = out->add_tasks();
    p->set_name(t.name);
    p->set_outcome(t.outcome);
    p->set_reason(ToUtf8(t.reason));
    p->set_site(t.site);
    p->set_node(t.node);
    p->set_device_type(t.device_type);
    for (int32_t d : t.devices) p->add_devices(d);
    p->set_device_share_milli(t.device_share_milli);
    p->set_emulated(t.emulated);
    p->set_cpu_milli(t.cpu_milli);
    p->set_memory_bytes(t.memory_bytes);
    p->set_start_us(t.start_us);
    p->set_transfer_us(t.transfer_us);
    p->set_compute_us(t.compute_us);
    p->set_finish_us(t.finish_us);
    p->set_compute_cost_micro_usd(t.compute_cost_micro_usd);
    p->set_egress_cost_micro_usd(t.egress_cost_micro_usd);
    for (const model::PlannedTransfer& x : t.transfers) {
      v1::PlannedTransfer* q = p->add_transfers();
      q->set_object(x.object);
      q->set_from_site(x.from_site);
      q->set_to_site(x.to_site);
      q->set_bytes(x.bytes);
      q->set_time_us(x.time_us);
      q->set_cost_micro_usd(x.cost_micro_usd);
    }
  }
  for (const model::PlannedLink& l : r.links) {
    v1::PlannedLink* p = out->add_links();
    p->set_from_site(l.from_site);
    p->set_to_site(l.to_site);
    p->set_bytes(l.bytes);
    p->set_cost_micro_usd(l.cost_micro_usd);
    p->set_transfers(l.transfers);
  }
  out->set_placed(r.placed);
  out->set_makespan_us(r.makespan_us);
  out->set_compute_cost_micro_usd(r.compute_cost_micro_usd);
  out->set_egress_cost_micro_usd(r.egress_cost_micro_usd);
  for (const std::string& w : r.warnings) out->add_warnings(w);
}

model::PlanReport FromProto(const v1::PlanJobResponse& in) {
  model::PlanReport r;
  r.job = in.job();
  r.objective = in.objective();
  if (in.has_deadline_us()) r.deadline_us = in.deadline_us();
  if (in.has_budget_micro_usd()) r.budget_micro_usd = in.budget_micro_usd();
  r.fleet_nodes = in.fleet_nodes();
  r.fleet_sites = in.fleet_sites();
  for (const v1::PlannedTask& p : in.tasks()) {
    model::PlannedTask& t = r.tasks.emplace_back();
    t.name = p.name();
    t.outcome = p.outcome();
    t.reason = p.reason();
    t.site = p.site();
    t.node = p.node();
    t.device_type = p.device_type();
    t.devices.assign(p.devices().begin(), p.devices().end());
    t.device_share_milli = p.device_share_milli();
    t.emulated = p.emulated();
    t.cpu_milli = p.cpu_milli();
    t.memory_bytes = p.memory_bytes();
    t.start_us = p.start_us();
    t.transfer_us = p.transfer_us();
    t.compute_us = p.compute_us();
    t.finish_us = p.finish_us();
    t.compute_cost_micro_usd = p.compute_cost_micro_usd();
    t.egress_cost_micro_usd = p.egress_cost_micro_usd();
    for (const v1::PlannedTransfer& x : p.transfers()) {
      t.transfers.push_back({x.object(), x.from_site(), x.to_site(), x.bytes(), x.time_us(), x.cost_micro_usd()});
    }
  }
  for (const v1::PlannedLink& l : in.links()) {
    r.links.push_back({l.from_site(), l.to_site(), l.bytes(), l.cost_micro_usd(), l.transfers()});
  }
  r.placed = in.placed();
  r.makespan_us = in.makespan_us();
  r.compute_cost_micro_usd = in.compute_cost_micro_usd();
  r.egress_cost_micro_usd = in.egress_cost_micro_usd();
  r.warnings.assign(in.warnings().begin(), in.warnings().end());
  return r;
}

void ToProto(const model::DatasetView& d, v1::Dataset* out) {
  out->set_name(d.name);
  for (const model::ObjectLocation& l : d.shards) ToProto(l, out->add_shards());
}

model::DatasetView FromProto(const v1::Dataset& in) {
  model::DatasetView d{in.name(), {}};
  for (const v1::ObjectLocation& l : in.shards()) d.shards.push_back(FromProto(l));
  return d;
}

}  // namespace meridian::rpc
