#include "rpc/sim_agents.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <optional>

#include <fmt/format.h>

#include "common/logging.h"
#include "meridian/v1/meridian.grpc.pb.h"
#include "rpc/convert.h"

namespace meridian::rpc {
namespace {

constexpr int64_t kCallTimeoutUs = 30'000'000;
// The timer thread sleeps until the next heartbeat is due, within these bounds.
constexpr int64_t kMinSleepUs = 500;
constexpr int64_t kMaxSleepUs = 50'000;
// Reports in one heartbeat, as a real agent bounds its messages.
constexpr size_t kMaxReportsPerBeat = 20'000;

int64_t NowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class StreamReactor;

// A heartbeat sent on the agent's session, until its acknowledgement.
struct ReportOnSession {
  v1::HeartbeatRequest req;
  uint64_t seq = 0;
  int64_t sent_us = 0;
  int64_t due_us = 0;  // 0: not the periodic one
};

}  // namespace

struct SimAgents::Agent {
  const SimAgentsOptions* options = nullptr;
  const std::atomic<bool>* stopping = nullptr;
  std::string name;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::NodeService::Stub> stub;

  std::mutex mu;
  uint32_t node_id = 0;
  uint64_t session = 0;
  int64_t interval_us = 200'000;
  int64_t next_beat_us = 0;
  int64_t reopen_at_us = 0;
  std::vector<v1::TaskKey> done;  // to report
  bool beating = false;           // a heartbeat in flight
  // The heartbeat in flight on the session (unset: none, or one sent as a call).
  std::optional<ReportOnSession> reported;
  bool need_register = false;
  bool registering = false;       // an asynchronous registration in flight
  StreamReactor* stream = nullptr;
  SimAgentsStats stats;

  v1::RegisterRequest RegistrationLocked() const;
  void Registered(const v1::RegisterResponse& resp);
  Status Register();
  // Registers again without blocking (the timer thread serves every agent); the
  // stream opens when it is answered.
  void RegisterAgainLocked();
  void OpenStreamLocked();
  void OnBatch(const v1::AssignmentBatch& batch);
  // A report's acknowledgement on the session.
  void Acked(const v1::ReportAck& ack);
  void StreamEnded(StreamReactor* reactor, const grpc::Status& status);
  // Sends a heartbeat with the reports waiting, on the session while it is open; `due`:
  // the periodic one.
  void BeatLocked(bool due);
  // A heartbeat answered (on the session or as a call).
  void AnsweredLocked(const v1::HeartbeatRequest& req, int64_t sent_us, int64_t due_us, int64_t interval,
                      bool reregister);
  uint64_t next_seq = 1;
};

namespace {

// The agent's session: reads assignments and acknowledgements until the coordinator
// or Stop ends it, and writes its opening, then reports (one at a time: a report
// given while a write is in flight waits for it). Its writing state is the agent's,
// under the agent's mutex.
class StreamReactor final : public grpc::ClientBidiReactor<v1::AgentMessage, v1::CoordinatorMessage> {
 public:
  // With the agent's mutex held.
  explicit StreamReactor(SimAgents::Agent* agent) : agent_(agent) {
    agent->stub->async()->Session(&ctx_, this);
    v1::AgentMessage open;
    open.mutable_open()->set_node_id(agent->node_id);
    open.mutable_open()->set_session(agent->session);
    WriteLocked(std::move(open));
    StartRead(&in_);
    StartCall();
  }
  // With the agent's mutex held.
  void WriteLocked(v1::AgentMessage msg) {
    if (writing_) {
      waiting_ = std::move(msg);
      return;
    }
    out_ = std::move(msg);
    writing_ = true;
    StartWrite(&out_);
  }
  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(agent_->mu);
    writing_ = false;
    if (ok && waiting_) {
      WriteLocked(std::move(*waiting_));
      waiting_.reset();
    }
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;  // OnDone follows
    if (in_.has_batch()) agent_->OnBatch(in_.batch());
    if (in_.has_ack()) agent_->Acked(in_.ack());
    in_.Clear();
    StartRead(&in_);
  }
  void OnDone(const grpc::Status& status) override {
    agent_->StreamEnded(this, status);
    delete this;
  }
  void Cancel() { ctx_.TryCancel(); }

 private:
  SimAgents::Agent* agent_;
  grpc::ClientContext ctx_;
  v1::CoordinatorMessage in_;
  v1::AgentMessage out_;                     // the write in flight
  std::optional<v1::AgentMessage> waiting_;  // the next
  bool writing_ = false;
};

struct HeartbeatCall {
  grpc::ClientContext ctx;
  v1::HeartbeatRequest req;
  v1::HeartbeatResponse resp;
  int64_t sent_us = 0;
  int64_t due_us = 0;  // 0: not the periodic one
};

}  // namespace

v1::RegisterRequest SimAgents::Agent::RegistrationLocked() const {
  v1::RegisterRequest req;
  v1::NodeSpec* n = req.mutable_node();
  n->set_name(name);
  n->set_site(options->site);
  n->set_cpu_milli(options->cpu_milli);
  n->set_memory_bytes(options->memory_bytes);
  req.add_kernels("noop");
  req.set_previous_session(session);
  return req;
}

Status SimAgents::Agent::Register() {
  v1::RegisterRequest req;
  {
    std::lock_guard<std::mutex> lock(mu);
    req = RegistrationLocked();
  }
  v1::RegisterResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(ctx, kCallTimeoutUs);
  // Through a connection that failed (a coordinator not yet listening, or a connect
  // that failed under load): gRPC connects again within its backoff, up to the
  // deadline, where a fail-fast call would end the run at once.
  ctx.set_wait_for_ready(true);
  grpc::Status s = stub->Register(&ctx, req, &resp);
  if (!s.ok()) return FromGrpc(s).WithPrefix(fmt::format("register {} with {}", name, options->coordinator));
  std::lock_guard<std::mutex> lock(mu);
  Registered(resp);
  return OkStatus();
}

void SimAgents::Agent::RegisterAgainLocked() {
  struct Call {
    grpc::ClientContext ctx;
    v1::RegisterRequest req;
    v1::RegisterResponse resp;
  };
  auto* call = new Call;
  call->req = RegistrationLocked();
  SetDeadline(call->ctx, kCallTimeoutUs);
  registering = true;
  ++stats.reregistered;
  stub->async()->Register(&call->ctx, &call->req, &call->resp, [this, call](grpc::Status s) {
    std::lock_guard<std::mutex> lock(mu);
    registering = false;
    if (s.ok()) {
      Registered(call->resp);
      if (stream == nullptr && !stopping->load()) OpenStreamLocked();
    } else {
      reopen_at_us = NowUs() + 1'000'000;
    }
    delete call;
  });
}

void SimAgents::Agent::Registered(const v1::RegisterResponse& resp) {
  node_id = resp.node_id();
  session = resp.session();
  interval_us = HeartbeatIntervalFromWire(resp.heartbeat_interval_us());
  next_beat_us = NowUs() + interval_us;
  need_register = false;
  done.clear();  // the registration said nothing runs here: what was assigned is lost
}

void SimAgents::Agent::OpenStreamLocked() { stream = new StreamReactor(this); }

void SimAgents::Agent::OnBatch(const v1::AssignmentBatch& batch) {
  std::lock_guard<std::mutex> lock(mu);
  ++stats.batches;
  for (const v1::Assignment& a : batch.assignments()) done.push_back(a.key());
  stats.tasks_done += batch.assignments_size();
  if (!beating && !done.empty() && !need_register) BeatLocked(false);
}

void SimAgents::Agent::StreamEnded(StreamReactor* reactor, const grpc::Status& status) {
  std::lock_guard<std::mutex> lock(mu);
  if (stream == reactor) stream = nullptr;
  if (reported) {
    // Unacknowledged: its reports go again, on the next session or as a call.
    for (const v1::TaskUpdate& u : reported->req.updates()) done.push_back(u.key());
    reported.reset();
    beating = false;
  }
  if (stopping->load()) return;
  ++stats.stream_ends;
  if (status.error_code() == grpc::StatusCode::FAILED_PRECONDITION) need_register = true;
  reopen_at_us = NowUs() + 50'000;
}

void SimAgents::Agent::BeatLocked(bool due) {
  ReportOnSession r;
  r.req.set_node_id(node_id);
  r.req.set_session(session);
  const size_t n = std::min(done.size(), kMaxReportsPerBeat);
  for (size_t i = 0; i < n; ++i) {
    v1::TaskUpdate* u = r.req.add_updates();
    *u->mutable_key() = done[i];
    u->set_state(v1::TaskUpdate::SUCCEEDED);
  }
  done.erase(done.begin(), done.begin() + static_cast<std::ptrdiff_t>(n));
  r.sent_us = NowUs();
  r.due_us = due ? std::min(next_beat_us, r.sent_us) : 0;
  beating = true;
  if (stream != nullptr) {
    r.seq = next_seq++;
    v1::AgentMessage msg;
    msg.set_seq(r.seq);
    *msg.mutable_report() = r.req;  // kept: sent again if the session ends first
    reported = std::move(r);
    stream->WriteLocked(std::move(msg));
    return;
  }
  auto* call = new HeartbeatCall;
  call->req = std::move(r.req);
  call->sent_us = r.sent_us;
  call->due_us = r.due_us;
  SetDeadline(call->ctx, kCallTimeoutUs);
  stub->async()->Heartbeat(&call->ctx, &call->req, &call->resp, [this, call](grpc::Status s) {
    std::lock_guard<std::mutex> lock(mu);
    if (s.ok()) {
      AnsweredLocked(call->req, call->sent_us, call->due_us, call->resp.heartbeat_interval_us(),
                     call->resp.reregister());
    } else {
      beating = false;
      next_beat_us = NowUs() + interval_us;
      ++stats.heartbeat_errors;
      for (const v1::TaskUpdate& u : call->req.updates()) done.push_back(u.key());
    }
    delete call;
    if (!done.empty() && !need_register && !stopping->load()) BeatLocked(false);
  });
}

void SimAgents::Agent::Acked(const v1::ReportAck& ack) {
  std::lock_guard<std::mutex> lock(mu);
  if (!reported || ack.seq() < reported->seq) return;
  const ReportOnSession r = std::move(*reported);
  reported.reset();
  AnsweredLocked(r.req, r.sent_us, r.due_us, ack.heartbeat_interval_us(), ack.reregister());
  if (!done.empty() && !need_register && !stopping->load()) BeatLocked(false);
}

void SimAgents::Agent::AnsweredLocked(const v1::HeartbeatRequest& req, int64_t sent_us, int64_t due_us,
                                      int64_t interval, bool reregister) {
  const int64_t now = NowUs();
  beating = false;
  ++stats.heartbeats;
  if (req.updates_size() == 0) stats.idle_heartbeat_us.push_back(now - sent_us);
  if (due_us > 0) stats.heartbeat_lag_us.push_back(now - due_us);
  if (interval > 0) interval_us = HeartbeatIntervalFromWire(interval);
  next_beat_us = now + interval_us;
  if (reregister) need_register = true;
}

void SimAgentsStats::Add(const SimAgentsStats& other) {
  agents += other.agents;
  tasks_done += other.tasks_done;
  batches += other.batches;
  heartbeats += other.heartbeats;
  heartbeat_errors += other.heartbeat_errors;
  reregistered += other.reregistered;
  stream_ends += other.stream_ends;
  idle_heartbeat_us.insert(idle_heartbeat_us.end(), other.idle_heartbeat_us.begin(), other.idle_heartbeat_us.end());
  heartbeat_lag_us.insert(heartbeat_lag_us.end(), other.heartbeat_lag_us.begin(), other.heartbeat_lag_us.end());
}

SimAgents::SimAgents(SimAgentsOptions options) : options_(std::move(options)) {}

StatusOr<std::unique_ptr<SimAgents>> SimAgents::Start(const SimAgentsOptions& options) {
  if (options.count < 1) return InvalidArgumentError("simulated agents: expected at least one");
  std::unique_ptr<SimAgents> sim(new SimAgents(options));
  for (int i = 0; i < options.count; ++i) {
    auto a = std::make_unique<Agent>();
    a->options = &sim->options_;
    a->stopping = &sim->stopping_;
    a->name = fmt::format("{}-{}", options.name_prefix, options.first + i);
    // Each its own connection, as separate machines would have.
    ChannelOptions own = kAgentChannel;
    own.own_connection = true;
    a->channel = MakeChannel(options.coordinator, ChannelSecurity{}, own);
    a->stub = v1::NodeService::NewStub(a->channel);
    sim->agents_.push_back(std::move(a));
  }
  std::atomic<size_t> next{0};
  std::mutex error_mu;
  Status error = OkStatus();
  std::vector<std::thread> threads;
  for (int t = 0; t < std::max(1, options.register_threads); ++t) {
    threads.emplace_back([&] {
      for (size_t i = next++; i < sim->agents_.size(); i = next++) {
        Agent& a = *sim->agents_[i];
        Status s = a.Register();
        if (!s.ok()) {
          std::lock_guard<std::mutex> lock(error_mu);
          if (error.ok()) error = s;
          return;
        }
        std::lock_guard<std::mutex> lock(a.mu);
        a.OpenStreamLocked();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  if (!error.ok()) {
    sim->Stop();
    return error;
  }
  sim->timer_ = std::thread([raw = sim.get()] { raw->TimerLoop(); });
  return sim;
}

SimAgents::~SimAgents() { Stop(); }

int64_t SimAgents::heartbeat_interval_us() const {
  int64_t longest = 0;
  for (const std::unique_ptr<Agent>& a : agents_) {
    std::lock_guard<std::mutex> lock(a->mu);
    longest = std::max(longest, a->interval_us);
  }
  return longest;
}

void SimAgents::TimerLoop() {
  while (!stopping_.load()) {
    const int64_t now = NowUs();
    int64_t next = now + kMaxSleepUs;  // the earliest heartbeat or retry due
    for (const std::unique_ptr<Agent>& a : agents_) {
      std::lock_guard<std::mutex> lock(a->mu);
      if (a->registering) continue;
      if (a->need_register && !a->beating && a->stream == nullptr && now >= a->reopen_at_us) {
        a->RegisterAgainLocked();
        continue;
      }
      if (a->stream == nullptr && !a->need_register && now >= a->reopen_at_us) a->OpenStreamLocked();
      if (!a->beating && !a->need_register && now >= a->next_beat_us) a->BeatLocked(true);
      if (!a->beating) next = std::min(next, a->next_beat_us);
      if (a->stream == nullptr || a->need_register) next = std::min(next, a->reopen_at_us);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(std::max(kMinSleepUs, next - NowUs())));
  }
}

SimAgentsStats SimAgents::Stop() {
  SimAgentsStats total;
  if (stopped_) return total;
  stopped_ = true;
  stopping_ = true;
  if (timer_.joinable()) timer_.join();
  for (const std::unique_ptr<Agent>& a : agents_) {
    std::lock_guard<std::mutex> lock(a->mu);
    if (a->stream != nullptr) a->stream->Cancel();
  }
  // Streams end and heartbeats in flight are answered (or time out).
  const int64_t give_up = NowUs() + kCallTimeoutUs + 1'000'000;
  for (const std::unique_ptr<Agent>& a : agents_) {
    while (NowUs() < give_up) {
      {
        std::lock_guard<std::mutex> lock(a->mu);
        if (a->stream == nullptr && !a->beating && !a->registering) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  for (const std::unique_ptr<Agent>& a : agents_) {
    std::lock_guard<std::mutex> lock(a->mu);
    total.Add(a->stats);
  }
  total.agents = static_cast<int>(agents_.size());
  return total;
}

}  // namespace meridian::rpc
