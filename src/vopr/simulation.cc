#include "vopr/simulation.h"

#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "agent/reports.h"
#include "testing/fake_clock.h"
#include "testing/forwarding_state_store.h"
#include "testing/in_memory_state_store.h"

namespace meridian::vopr {

std::string ExpectedOutput(uint64_t job, uint32_t task) {
  // Bytes a mix-up would show: the task's own identity, a NUL and bytes that are not
  // UTF-8 (a store that cut or re-encoded text would change them).
  std::string out = fmt::format("job {} task {}", job, task);
  out.push_back('\0');
  out.push_back(static_cast<char>(0xff));
  out.push_back(static_cast<char>(0x80 + (job * 31 + task) % 64));
  return out;
}

bool AttemptFails(uint64_t seed, const model::TaskKey& key) {
  uint64_t h = (seed + key.job) * 0x9e3779b97f4a7c15ull ^ (uint64_t{key.task} << 20) ^ static_cast<uint64_t>(key.attempt);
  h ^= h >> 31;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 29;
  return h % 5 == 0;
}

namespace {

using coordinator::Coordinator;
using coordinator::CoordinatorOptions;

constexpr int64_t kMs = 1'000;
constexpr int64_t kStartUs = 1'000 * kMs;  // the virtual clock's reading at the start
// The coordinator's timing in the simulation: a heartbeat every 100 ms, a node silent
// for 1 s is dead, a task placed before a restart waits 2 s for its agent.
constexpr int64_t kHeartbeatUs = 100 * kMs;
constexpr int64_t kTurnEveryUs = 10 * kMs;
constexpr int64_t kCallTimeoutUs = 1'000 * kMs;
constexpr int64_t kSubmitSpreadUs = 20'000 * kMs;  // clients submit within the first 20 s
constexpr int64_t kSettleForUs = 600'000 * kMs;    // after the faults stop
constexpr int64_t kMaxSettleSteps = 5'000'000;
constexpr int32_t kRetries = 3;  // per task: an attempt fails one time in five (AttemptFails)
constexpr double kCancelShare = 0.15;  // of acknowledged jobs, cancelled by their client

class SimEnv final : public Env {
 public:
  const Clock& clock() const override { return clock_; }
  testing::FakeClock& fake() { return clock_; }

 private:
  testing::FakeClock clock_{kStartUs};
};

struct SimAgent {
  std::string name;
  bool up = true;
  uint64_t life = 0;  // grows at each crash: events of an earlier life are ignored
  uint32_t node_id = 0;
  uint64_t session = 0;  // kept across a crash, as the real agent keeps it in a file
  bool need_register = true;
  agent::Reports reports;
  std::set<model::TaskKey> running;
  uint64_t call = 0;  // the call in flight; 0: none
  model::AgentRegistration registration;  // the call in flight's, when it registers
  agent::Reports::Sent sent;              // the call in flight's, when it beats
  uint64_t stream = 0;                    // its current assignment stream
  int64_t interval_us = kHeartbeatUs;
  int64_t last_beat_us = 0;
  int64_t backoff_us = 100 * kMs;
  int64_t wake_at_us = -1;  // the earliest wake-up pending; -1: none
};

struct Stream {
  int agent = 0;
  uint64_t agent_life = 0;
  uint64_t coordinator_life = 0;
  bool open = false;
  int64_t last_delivery_us = 0;  // a stream delivers in order
};

struct Client {
  std::string spec;
  uint64_t call = 0;
  bool accepted = false;
};

class Simulation;

// What a coordinator's sink writes to: its agent, in order, while the stream is open.
class SimSink final : public rpc::AssignmentSink {
 public:
  SimSink(Simulation& sim, uint64_t id) : sim_(sim), id_(id) {}
  bool Push(model::AssignmentBatch& batch) override;
  void Close(const Status& status) override;
  bool open() const override;

 private:
  Simulation& sim_;
  const uint64_t id_;
};

// One coordinator life's door to the durable store, which outlives it.
// Reads pass straight through; writes go by the simulation (which may crash it).
class SimStore final : public testing::ForwardingStateStore {
 public:
  SimStore(Simulation& sim, testing::InMemoryStateStore& durable)
      : ForwardingStateStore(durable), sim_(sim), durable_(durable) {}
  StatusOr<uint64_t> CreateJob(model::JobRecord job, const std::vector<store::NewTask>& tasks) override;
  Status Apply(const store::StoreBatch& batch) override;
  Status DeleteJob(uint64_t job) override;

 private:
  Simulation& sim_;
  testing::InMemoryStateStore& durable_;
};

class Simulation {
 public:
  explicit Simulation(const Options& options) : options_(options), rng_(options.seed) {}
  ~Simulation() {
    crashing_ = true;  // its last words reach no one: the agents go first
    coordinator_.reset();
  }

  Result Run();

  // The store's hooks (SimStore).
  bool Crashing() const { return crashing_; }
  // Whether this write is the one a crash interrupts; if so, whether it is kept.
  std::optional<bool> CrashDuringWrite();
  void Stored(const store::StoreBatch& batch);
  void StoredJob(uint64_t id) { stored_jobs_.insert(id); }

  // The streams' hooks (SimSink).
  bool StreamPush(uint64_t id, model::AssignmentBatch& batch);
  void StreamClose(uint64_t id, const Status& status);
  bool StreamOpen(uint64_t id) const;

 private:
  // When the stream's next message arrives: after a network delay, and after its last.
  int64_t NextInOrder(Stream& s);
  int64_t Now() const { return env_.clock().Now().us; }
  void At(int64_t at_us, std::string what, std::function<void()> run);
  void Step();
  void Fail(const std::string& what);

  // The network.
  int64_t Delay();
  void Send(const std::string& what, std::function<void()> deliver);
  // A request to whichever coordinator is up when it arrives (nothing when none is).
  void ToCoordinator(const std::string& what, std::function<void(Coordinator&)> handle);
  // An answer from the coordinator: lost when it crashed while making it.
  void Answer(const std::string& what, std::function<void()> deliver);

  void StartCoordinator();
  void CrashCoordinator(const std::string& why);
  void Turn(uint64_t life);

  void WakeAgent(int i, int64_t at_us);
  void Act(int i);
  void Register(int i);
  void OnRegistered(int i, uint64_t call, const StatusOr<model::RegistrationReply>& reply);
  void Beat(int i);
  void OnBeaten(int i, uint64_t call, const StatusOr<bool>& reregister, int64_t interval_us);
  // A call of agent i starts: its id, given up on (CallFailed) after kCallTimeoutUs.
  uint64_t StartCall(int i, const std::string& what);
  void CallFailed(int i);
  void OpenStream(int i);
  void OnStreamClosed(int i, uint64_t life, uint64_t stream, const Status& status);
  void OnAssignments(int i, uint64_t life, const model::AssignmentBatch& batch);
  void Cancel(int i, const model::TaskKey& key);
  void CrashAgent(int i);
  void RestartAgent(int i);

  void Submit(int c);
  void CancelLater(uint64_t job);
  std::string MakeSpec(int c);
  // Whether job `id`'s end, as stored, is one it may have: a failure needs a task
  // that failed all its attempts, a cancellation a client's request.
  void CheckEndedJob(uint64_t id, const std::vector<model::TaskView>& tasks);

  void InjectFaults();
  bool Settled() const;
  void CheckEnd();

  const Options options_;
  Random rng_;
  SimEnv env_;
  testing::InMemoryStateStore durable_;
  std::map<std::pair<int64_t, uint64_t>, std::pair<std::string, std::function<void()>>> events_;
  uint64_t next_event_ = 0;
  bool faults_ = false;

  std::unique_ptr<Coordinator> coordinator_;
  uint64_t coordinator_life_ = 0;
  bool crashing_ = false;  // the coordinator crashed in this event: nothing it does counts

  std::vector<SimAgent> agents_;
  std::map<uint64_t, Stream> streams_;
  uint64_t next_stream_ = 0;
  uint64_t next_call_ = 0;
  std::vector<Client> clients_;

  // What the invariants are checked against.
  std::set<uint64_t> stored_jobs_;
  std::set<uint64_t> acknowledged_;
  std::set<uint64_t> cancels_;  // jobs a client's cancellation reached the coordinator for
  // Task -> the attempt stored as its success, and the attempt stored as succeeded
  // (the same, except for an attempt that ended well after its job had ended).
  std::map<std::pair<uint64_t, uint32_t>, int32_t> committed_;
  std::map<std::pair<uint64_t, uint32_t>, int32_t> succeeded_attempts_;
  std::map<uint64_t, model::JobStatus> finished_;               // jobs stored as ended
  std::map<uint64_t, std::string> finish_reasons_;
  std::string failure_;
  Result result_;
};

bool SimSink::Push(model::AssignmentBatch& batch) { return sim_.StreamPush(id_, batch); }
void SimSink::Close(const Status& status) { sim_.StreamClose(id_, status); }
bool SimSink::open() const { return sim_.StreamOpen(id_); }

StatusOr<uint64_t> SimStore::CreateJob(model::JobRecord job, const std::vector<store::NewTask>& tasks) {
  if (sim_.Crashing()) return job.id;  // the process is gone: its writes never happen
  std::optional<bool> keep = sim_.CrashDuringWrite();
  if (keep && !*keep) return job.id;
  MERIDIAN_ASSIGN_OR_RETURN(uint64_t id, durable_.CreateJob(std::move(job), tasks));
  sim_.StoredJob(id);
  return id;
}

Status SimStore::Apply(const store::StoreBatch& batch) {
  if (sim_.Crashing() || batch.empty()) return OkStatus();
  std::optional<bool> keep = sim_.CrashDuringWrite();
  if (keep && !*keep) return OkStatus();  // lost whole: a transaction is never half there
  MERIDIAN_RETURN_IF_ERROR(durable_.Apply(batch));
  sim_.Stored(batch);
  return OkStatus();
}

Status SimStore::DeleteJob(uint64_t job) {
  if (sim_.Crashing()) return OkStatus();
  return durable_.DeleteJob(job);
}

void Simulation::At(int64_t at_us, std::string what, std::function<void()> run) {
  events_.emplace(std::make_pair(std::max(at_us, Now()), next_event_++), std::make_pair(std::move(what), std::move(run)));
}

void Simulation::Fail(const std::string& what) {
  if (!failure_.empty()) return;
  failure_ = fmt::format("step {}, {:.6f} s virtual: {}", result_.steps, static_cast<double>(Now()) / 1e6, what);
}

void Simulation::Step() {
  auto it = events_.begin();
  const int64_t at = it->first.first;
  std::string what = std::move(it->second.first);
  std::function<void()> run = std::move(it->second.second);
  events_.erase(it);
  if (at > Now()) env_.fake().Advance(at - Now());
  ++result_.steps;
  // FNV-1a over the time and the event: the run's fingerprint.
  for (char c : fmt::format("{} {}\n", at, what)) {
    result_.trace_digest ^= static_cast<unsigned char>(c);
    result_.trace_digest *= 1099511628211ull;
  }
  if (options_.trace) std::cerr << fmt::format("{:>12} {}\n", at, what);
  run();
  if (crashing_) CrashCoordinator("it crashed while writing to its store");
}

// ------------------------------------------------------------------ the network

int64_t Simulation::Delay() {
  int64_t us = rng_.UniformRange(100, 2'000);
  if (faults_ && rng_.Bernoulli(options_.reorder)) us += rng_.UniformRange(5 * kMs, 300 * kMs);
  return us;
}

void Simulation::Send(const std::string& what, std::function<void()> deliver) {
  ++result_.messages;
  if (faults_ && rng_.Bernoulli(options_.drop)) {
    ++result_.dropped;
    At(Now(), "lost: " + what, [] {});
    return;
  }
  if (faults_ && rng_.Bernoulli(options_.duplicate)) {
    ++result_.duplicated;
    At(Now() + Delay(), what + " (a copy)", deliver);
  }
  At(Now() + Delay(), what, std::move(deliver));
}

void Simulation::ToCoordinator(const std::string& what, std::function<void(Coordinator&)> handle) {
  Send(what, [this, handle = std::move(handle)] {
    if (coordinator_ != nullptr) handle(*coordinator_);
  });
}

void Simulation::Answer(const std::string& what, std::function<void()> deliver) {
  if (crashing_) return;
  Send(what, std::move(deliver));
}

bool Simulation::StreamPush(uint64_t id, model::AssignmentBatch& batch) {
  auto it = streams_.find(id);
  if (it == streams_.end() || !it->second.open || crashing_) return false;
  Stream& s = it->second;
  ++result_.messages;
  At(NextInOrder(s), fmt::format("{} gets {} assignments, {} cancels", agents_[s.agent].name,
                                     batch.assignments.size(), batch.cancel.size()),
     [this, i = s.agent, life = s.agent_life, b = std::move(batch)] { OnAssignments(i, life, b); });
  batch = {};
  return true;
}

void Simulation::StreamClose(uint64_t id, const Status& status) {
  auto it = streams_.find(id);
  if (it == streams_.end() || !it->second.open || crashing_) return;
  Stream& s = it->second;
  s.open = false;
  At(NextInOrder(s), fmt::format("{}'s stream ends: {}", agents_[s.agent].name, status.message()),
     [this, i = s.agent, life = s.agent_life, id, status] { OnStreamClosed(i, life, id, status); });
}

int64_t Simulation::NextInOrder(Stream& s) {
  s.last_delivery_us = std::max(Now() + rng_.UniformRange(100, 2'000), s.last_delivery_us + 1);
  return s.last_delivery_us;
}

bool Simulation::StreamOpen(uint64_t id) const {
  auto it = streams_.find(id);
  return it != streams_.end() && it->second.open && !crashing_;
}

// ------------------------------------------------------------------ the coordinator

void Simulation::StartCoordinator() {
  CoordinatorOptions o;
  // Two sites, joined by a link (a dependent may read outputs made at either).
  for (const char* name : {"east", "west"}) {
    model::Site& site = o.fleet.sites.emplace_back();
    site.id = SiteId(static_cast<uint32_t>(o.fleet.sites.size() - 1));
    site.name = name;
  }
  model::Link& link = o.fleet.links.emplace_back();
  link.a = SiteId(0);
  link.b = SiteId(1);
  link.rtt_us = 20 * kMs;
  link.bandwidth_bps = 1'000'000'000;
  o.heartbeat_interval_us = kHeartbeatUs;
  o.heartbeat_timeout_us = 1'000 * kMs;
  o.reconcile_grace_us = 2'000 * kMs;
  // Losing attempts with crashed nodes is not the task's fault: every job must succeed.
  o.max_losses = 1'000'000;
  o.seed = rng_.Next();
  o.run_loop = false;
  o.planted_bug = options_.planted_bug;
  ++coordinator_life_;
  StatusOr<std::unique_ptr<Coordinator>> c =
      Coordinator::Create(std::move(o), std::make_unique<SimStore>(*this, durable_), env_);
  if (!c.ok()) {
    Fail("the coordinator did not start: " + c.status().ToString());
    return;
  }
  coordinator_ = std::move(*c);
  for (uint64_t id : acknowledged_) {
    if (!coordinator_->GetJob(id, 0, 0).ok()) Fail(fmt::format("job {} was acknowledged and is gone after a restart", id));
  }
  Turn(coordinator_life_);
}

void Simulation::Turn(uint64_t life) {
  if (coordinator_ == nullptr || life != coordinator_life_) return;
  coordinator_->Turn();
  At(Now() + kTurnEveryUs, "the coordinator's loop turns", [this, life] { Turn(life); });
}

void Simulation::CrashCoordinator(const std::string& why) {
  ++result_.coordinator_crashes;
  At(Now(), "the coordinator crashes: " + why, [] {});
  crashing_ = true;  // its sinks, store and answers are dead from here
  coordinator_.reset();
  crashing_ = false;
  // Its connections reset: each agent finds its stream closed.
  for (const auto& [id, s] : streams_) {
    if (s.coordinator_life == coordinator_life_) StreamClose(id, UnavailableError("the connection was reset"));
  }
  At(Now() + rng_.UniformRange(100 * kMs, 3'000 * kMs), "the coordinator starts again", [this] { StartCoordinator(); });
}

std::optional<bool> Simulation::CrashDuringWrite() {
  if (!faults_ || crashing_ || !rng_.Bernoulli(options_.crash_in_commit)) return std::nullopt;
  ++result_.commits_torn;
  crashing_ = true;
  return rng_.Bernoulli(0.5);
}

void Simulation::Stored(const store::StoreBatch& batch) {
  for (const store::NewJob& j : batch.new_jobs) stored_jobs_.insert(j.record.id);
  for (const model::AttemptRecord& a : batch.attempts) {
    if (a.outcome != "succeeded") continue;
    auto [it, first] = succeeded_attempts_.emplace(std::make_pair(a.job, a.task), a.attempt);
    if (!first && it->second != a.attempt) {
      Fail(fmt::format("task {}/{}: attempts {} and {} both succeeded", a.job, a.task, it->second, a.attempt));
    }
  }
  for (const model::TaskRecord& t : batch.tasks) {
    auto it = committed_.find({t.job, t.task});
    if (t.status == model::TaskStatus::kSucceeded) {
      if (t.output != ExpectedOutput(t.job, t.task)) {
        Fail(fmt::format("task {}/{} stored an output that is not its own ({} bytes)", t.job, t.task, t.output.size()));
      }
      if (it != committed_.end() && it->second != t.attempt) {
        Fail(fmt::format("task {}/{} committed twice: attempt {} after attempt {}", t.job, t.task, t.attempt,
                         it->second));
      }
      committed_[{t.job, t.task}] = t.attempt;
    } else if (it != committed_.end()) {
      Fail(fmt::format("task {}/{} went back from succeeded to {}", t.job, t.task, model::TaskStatusName(t.status)));
    }
  }
  for (const model::JobRecord& j : batch.jobs) {
    auto it = finished_.find(j.id);
    if (it != finished_.end() && it->second != j.status) {
      Fail(fmt::format("job {} ended {} and was stored again as {}", j.id, model::JobStatusName(it->second),
                       model::JobStatusName(j.status)));
    }
    if (j.status == model::JobStatus::kCancelled && !cancels_.contains(j.id)) {
      Fail(fmt::format("job {} was stored as cancelled, but no one cancelled it: {}", j.id, j.reason));
    }
    if (model::IsTerminal(j.status)) {
      finished_[j.id] = j.status;
      finish_reasons_[j.id] = j.reason;
    }
  }
}

// ------------------------------------------------------------------ agents

void Simulation::WakeAgent(int i, int64_t at_us) {
  SimAgent& a = agents_[i];
  if (a.wake_at_us >= Now() && a.wake_at_us <= at_us) return;  // an earlier one is due
  a.wake_at_us = at_us;
  At(at_us, a.name + " wakes", [this, i, life = a.life, at_us] {
    SimAgent& a = agents_[i];
    if (life != a.life || a.wake_at_us != at_us) return;
    a.wake_at_us = -1;
    Act(i);
  });
}

void Simulation::Act(int i) {
  SimAgent& a = agents_[i];
  if (!a.up || a.call != 0) return;
  if (a.need_register) {
    Register(i);
  } else if (a.reports.AnyEnded() || Now() >= a.last_beat_us + a.interval_us) {
    Beat(i);
  } else {
    WakeAgent(i, a.last_beat_us + a.interval_us);
  }
}

uint64_t Simulation::StartCall(int i, const std::string& what) {
  const uint64_t call = agents_[i].call = ++next_call_;
  At(Now() + kCallTimeoutUs, agents_[i].name + "'s " + what + " times out", [this, i, call] {
    if (agents_[i].call == call) CallFailed(i);
  });
  return call;
}

void Simulation::CallFailed(int i) {
  SimAgent& a = agents_[i];
  a.call = 0;
  WakeAgent(i, Now() + a.backoff_us);
  a.backoff_us = std::min<int64_t>(a.backoff_us * 2, 1'000 * kMs);
}

void Simulation::Register(int i) {
  SimAgent& a = agents_[i];
  model::AgentRegistration& reg = a.registration;
  reg = {};
  reg.node.name = a.name;
  reg.node.cpu_milli = 4'000;
  reg.node.memory_bytes = int64_t{8} << 30;
  reg.site = i % 2 == 0 ? "east" : "west";
  reg.kernels = {"noop"};
  reg.previous_session = a.session;
  reg.running.assign(a.running.begin(), a.running.end());
  a.reports.ForRegistration(reg);
  const uint64_t call = StartCall(i, "registration");
  ToCoordinator(fmt::format("{} registers ({} running, {} reports)", a.name, reg.running.size(), reg.unacked.size()),
                [this, i, call, reg](Coordinator& c) {
                  StatusOr<model::RegistrationReply> reply = c.Register(reg);
                  Answer(fmt::format("{}'s registration is answered", agents_[i].name),
                         [this, i, call, reply] { OnRegistered(i, call, reply); });
                });
}

void Simulation::OnRegistered(int i, uint64_t call, const StatusOr<model::RegistrationReply>& reply) {
  SimAgent& a = agents_[i];
  if (a.call != call) return;  // given up on: a real agent's call past its deadline
  if (!reply.ok()) {
    const StatusCode code = reply.status().code();
    // What makes a real agent exit: its configuration or credentials refused.
    if (code == StatusCode::kInvalidArgument || code == StatusCode::kPermissionDenied ||
        code == StatusCode::kUnauthenticated) {
      Fail(fmt::format("{} was refused: {}", a.name, reply.status().ToString()));
    }
    CallFailed(i);
    return;
  }
  a.call = 0;
  a.reports.Registered(a.registration);
  a.node_id = reply->node_id;
  a.session = reply->session;
  a.need_register = false;
  a.interval_us = reply->heartbeat_interval_us;
  a.backoff_us = 100 * kMs;
  for (const model::TaskKey& k : reply->cancel) Cancel(i, k);
  OpenStream(i);
  Act(i);
}

void Simulation::Beat(int i) {
  SimAgent& a = agents_[i];
  model::AgentHeartbeat hb;
  hb.node_id = a.node_id;
  hb.session = a.session;
  hb.holding.assign(a.running.begin(), a.running.end());
  a.sent = a.reports.ForHeartbeat(hb);
  hb.running = static_cast<int32_t>(a.running.size());
  const uint64_t call = StartCall(i, "heartbeat");
  ToCoordinator(fmt::format("{} beats ({} reports)", a.name, hb.updates.size()), [this, i, call, hb](Coordinator& c) {
    StatusOr<bool> reregister = c.Heartbeat(hb);
    const int64_t interval = c.HeartbeatIntervalUs();
    Answer(fmt::format("{}'s heartbeat is answered", agents_[i].name),
           [this, i, call, reregister, interval] { OnBeaten(i, call, reregister, interval); });
  });
}

void Simulation::OnBeaten(int i, uint64_t call, const StatusOr<bool>& reregister, int64_t interval_us) {
  SimAgent& a = agents_[i];
  if (a.call != call) return;
  if (!reregister.ok()) {
    CallFailed(i);
    return;
  }
  a.call = 0;
  a.last_beat_us = Now();
  a.backoff_us = 100 * kMs;
  a.interval_us = interval_us;
  if (*reregister) {
    a.need_register = true;
  } else {
    a.reports.Acknowledged(a.sent);
  }
  Act(i);
}

void Simulation::OpenStream(int i) {
  SimAgent& a = agents_[i];
  const uint64_t id = a.stream = ++next_stream_;
  streams_[id] = Stream{i, a.life, 0, false, 0};
  // A connection is made or refused, never half: the request is not lost on the way.
  ++result_.messages;
  At(Now() + rng_.UniformRange(100, 2'000), a.name + " opens its stream",
     [this, i, id, node = a.node_id, session = a.session] {
       Stream& s = streams_[id];
       if (s.agent_life != agents_[i].life) return;
       s.open = true;
       s.coordinator_life = coordinator_life_;
       const Status st = coordinator_ == nullptr
                             ? UnavailableError("connection refused")
                             : coordinator_->ConnectAssignments(node, session, std::make_shared<SimSink>(*this, id));
       if (!st.ok()) StreamClose(id, st);
     });
}

void Simulation::OnStreamClosed(int i, uint64_t life, uint64_t stream, const Status& status) {
  SimAgent& a = agents_[i];
  if (life != a.life || stream != a.stream || !a.up) return;
  a.stream = 0;
  if (status.code() == StatusCode::kFailedPrecondition) {
    a.need_register = true;
    Act(i);
    return;
  }
  At(Now() + 50 * kMs, a.name + " reconnects its stream", [this, i, life] {
    SimAgent& a = agents_[i];
    if (life == a.life && a.up && a.stream == 0 && !a.need_register) OpenStream(i);
  });
}

void Simulation::OnAssignments(int i, uint64_t life, const model::AssignmentBatch& batch) {
  SimAgent& a = agents_[i];
  if (life != a.life || !a.up) return;
  for (const model::TaskAssignment& t : batch.assignments) {
    if (a.reports.Ended(t.key) || !a.running.insert(t.key).second) continue;  // done or running already
    At(Now() + rng_.UniformRange(1 * kMs, 30 * kMs),
       fmt::format("{} finishes {}/{} attempt {}", a.name, t.key.job, t.key.task, t.key.attempt),
       [this, i, life, key = t.key] {
         SimAgent& a = agents_[i];
         if (life != a.life || a.running.erase(key) == 0) return;
         model::TaskUpdate u;
         u.key = key;
         if (AttemptFails(options_.seed, key)) {
           u.kind = model::UpdateKind::kFailed;
           u.exit_code = 1;
           u.reason = "exit status 1";
         } else {
           u.kind = model::UpdateKind::kSucceeded;
           u.output = ExpectedOutput(key.job, key.task);
         }
         a.reports.Add(std::move(u));
         Act(i);
       });
  }
  for (const model::TaskKey& k : batch.cancel) Cancel(i, k);
}

void Simulation::Cancel(int i, const model::TaskKey& key) {
  SimAgent& a = agents_[i];
  if (a.running.erase(key) == 0) return;
  model::TaskUpdate u;
  u.key = key;
  u.kind = model::UpdateKind::kCancelled;
  u.reason = "cancelled";
  a.reports.Add(std::move(u));
  Act(i);
}

void Simulation::CrashAgent(int i) {
  SimAgent& a = agents_[i];
  ++result_.agent_crashes;
  At(Now(), a.name + " crashes", [] {});
  a.up = false;
  ++a.life;
  a.running.clear();
  a.reports = {};
  a.call = 0;
  a.need_register = true;
  a.stream = 0;
  a.wake_at_us = -1;
  // Its connections close: the coordinator's pushes find the stream gone.
  for (auto& [id, s] : streams_) {
    if (s.agent == i) s.open = false;
  }
  At(Now() + rng_.UniformRange(50 * kMs, 3'000 * kMs), a.name + " starts again", [this, i] { RestartAgent(i); });
}

void Simulation::RestartAgent(int i) {
  SimAgent& a = agents_[i];
  a.up = true;
  a.backoff_us = 100 * kMs;
  Act(i);
}

// ------------------------------------------------------------------ clients

std::string Simulation::MakeSpec(int c) {
  // Client 0's job is large with Options::large_job: stored alone, outside the
  // coordinator's lock, before any of it is placed (the path for jobs of more than
  // kStoredWithPlacementsTasks).
  const bool large = c == 0 && options_.large_job;
  const int n = large ? static_cast<int>(coordinator::kStoredWithPlacementsTasks) + 1
                      : static_cast<int>(rng_.UniformRange(1, options_.max_tasks_per_job));
  std::string spec = fmt::format("name: job{}\ntasks:\n", c);
  for (int t = 0; t < n; ++t) {
    spec += fmt::format("  - name: t{}\n    kernel: noop\n    retries: {}\n", t, kRetries);
    std::string after;
    for (int d = 0; d < t && !large; ++d) {
      if (rng_.Bernoulli(0.3)) after += fmt::format("{}t{}", after.empty() ? "" : ", ", d);
    }
    if (!after.empty()) spec += "    after: [" + after + "]\n";
  }
  return spec;
}

void Simulation::Submit(int c) {
  Client& client = clients_[c];
  if (client.accepted) return;
  const uint64_t call = client.call = ++next_call_;
  // Given up on after a while and sent again: a second job if the first was stored.
  At(Now() + 2 * kCallTimeoutUs, fmt::format("client {} waits no longer", c), [this, c, call] {
    if (clients_[c].call == call && !clients_[c].accepted) Submit(c);
  });
  ToCoordinator(fmt::format("client {} submits", c), [this, c, call](Coordinator& coord) {
    StatusOr<rpc::SubmitResult> r = coord.Submit(clients_[c].spec, fmt::format("job{}.yaml", c), "");
    Answer(fmt::format("client {}'s submission is answered", c), [this, c, call, r] {
      Client& client = clients_[c];
      if (client.call != call || client.accepted) return;
      if (!r.ok()) {
        // No node yet to check it against, or a coordinator restarting: again later.
        At(Now() + 500 * kMs, fmt::format("client {} tries again", c), [this, c] { Submit(c); });
        client.call = 0;
        return;
      }
      client.accepted = true;
      acknowledged_.insert(r->job_id);
      // Acknowledged means stored: a job is never acknowledged before its commit.
      if (!stored_jobs_.contains(r->job_id)) Fail(fmt::format("job {} was acknowledged but is not stored", r->job_id));
      ++result_.jobs_acknowledged;
      if (faults_ && rng_.Bernoulli(kCancelShare)) CancelLater(r->job_id);
    });
  });
}

void Simulation::CancelLater(uint64_t job) {
  At(Now() + rng_.UniformRange(0, 3'000 * kMs), fmt::format("a client cancels job {}", job), [this, job] {
    ToCoordinator(fmt::format("the cancellation of job {}", job), [this, job](Coordinator& c) {
      cancels_.insert(job);
      (void)c.CancelJob(job);  // FailedPrecondition once it has ended: nothing to do
    });
  });
}

// ------------------------------------------------------------------ the run

void Simulation::InjectFaults() {
  if (rng_.Bernoulli(options_.agent_crash)) {
    const int i = static_cast<int>(rng_.Uniform(agents_.size()));
    if (agents_[i].up) CrashAgent(i);
  }
  if (coordinator_ != nullptr && rng_.Bernoulli(options_.coordinator_crash)) CrashCoordinator("killed");
}

bool Simulation::Settled() const {
  if (coordinator_ == nullptr) return false;
  for (const Client& c : clients_) {
    if (!c.accepted) return false;
  }
  for (const SimAgent& a : agents_) {
    if (!a.up) return false;
  }
  for (uint64_t id : stored_jobs_) {
    if (!finished_.contains(id)) return false;
  }
  return true;
}

void Simulation::CheckEnd() {
  if (!failure_.empty()) return;
  if (!Settled()) {
    std::string unended;
    for (uint64_t id : stored_jobs_) {
      if (!finished_.contains(id)) unended += fmt::format(" {}", id);
    }
    Fail(fmt::format("not every job ended within {} s of the faults stopping; unended:{}", kSettleForUs / 1'000'000,
                     unended.empty() ? " none (a client or a part still down)" : unended));
    return;
  }
  for (uint64_t id : stored_jobs_) {
    StatusOr<std::vector<model::TaskView>> tasks = durable_.TaskPage(id, 0, 100'000, int64_t{1} << 30);
    if (!tasks.ok()) {
      Fail(fmt::format("job {}'s tasks cannot be read: {}", id, tasks.status().ToString()));
      return;
    }
    CheckEndedJob(id, *tasks);
    if (!failure_.empty()) return;
  }
  // The ledgers balance: with every job ended, nothing is held anywhere.
  for (const model::NodeView& n : coordinator_->ListNodes()) {
    if (n.running != 0 || n.cpu_allocated_milli != 0 || n.memory_allocated_bytes != 0 ||
        n.devices_allocated_milli != 0) {
      Fail(fmt::format("node {} still holds {} tasks, {} milli-CPU, {} bytes with every job ended", n.node.name,
                       n.running, n.cpu_allocated_milli, n.memory_allocated_bytes));
      return;
    }
  }
  for (const model::TenantView& t : coordinator_->ListTenants()) {
    if (t.cpu_milli != 0 || t.memory_bytes != 0 || t.gpu_milli != 0 || t.tasks_running != 0 || t.jobs_active != 0) {
      Fail(fmt::format("tenant {} still counts {} milli-CPU, {} tasks running, {} jobs active with every job ended",
                       t.name, t.cpu_milli, t.tasks_running, t.jobs_active));
      return;
    }
  }
}

void Simulation::CheckEndedJob(uint64_t id, const std::vector<model::TaskView>& tasks) {
  const model::JobStatus status = finished_.at(id);
  bool failed_all_attempts = false;
  for (const model::TaskView& t : tasks) {
    int succeeded = 0;
    for (const model::AttemptRecord& a : t.history) succeeded += a.outcome == "succeeded";
    if (t.record.status == model::TaskStatus::kSucceeded) {
      if (succeeded != 1 || t.record.output != ExpectedOutput(id, t.record.task)) {
        Fail(fmt::format("job {} task {}: succeeded with {} succeeded attempts and {} bytes of output", id, t.name,
                         succeeded, t.record.output.size()));
        return;
      }
      ++result_.tasks_committed;
      continue;
    }
    // An attempt that ended well after its job was cancelled or failed is kept as it
    // went ("succeeded"), its task not: once at most.
    if (succeeded > 1 || status == model::JobStatus::kSucceeded) {
      Fail(fmt::format("job {} {}: task {} is {} with {} succeeded attempts", id, model::JobStatusName(status), t.name,
                       model::TaskStatusName(t.record.status), succeeded));
      return;
    }
    if (t.record.status == model::TaskStatus::kFailed) {
      if (t.record.failures != kRetries + 1) {
        Fail(fmt::format("job {} task {} failed after {} failed attempts; it has {} retries", id, t.name,
                         t.record.failures, kRetries));
        return;
      }
      failed_all_attempts = true;
    }
  }
  ++(status == model::JobStatus::kSucceeded ? result_.jobs_succeeded
     : status == model::JobStatus::kFailed  ? result_.jobs_failed
                                             : result_.jobs_cancelled);
  if (status == model::JobStatus::kFailed && !failed_all_attempts) {
    Fail(fmt::format("job {} failed with no task out of retries: {}", id, finish_reasons_[id]));
  } else if (status == model::JobStatus::kCancelled && !cancels_.contains(id)) {
    Fail(fmt::format("job {} ended cancelled, but no one cancelled it", id));
  }
}

Result Simulation::Run() {
  agents_.resize(static_cast<size_t>(options_.agents));
  for (int i = 0; i < options_.agents; ++i) agents_[i].name = fmt::format("n{}", i);
  clients_.resize(static_cast<size_t>(options_.jobs));
  for (int c = 0; c < options_.jobs; ++c) clients_[c].spec = MakeSpec(c);
  faults_ = true;
  StartCoordinator();
  for (int i = 0; i < options_.agents; ++i) WakeAgent(i, Now() + rng_.UniformRange(0, 200 * kMs));
  for (int c = 0; c < options_.jobs; ++c) {
    At(Now() + rng_.UniformRange(0, kSubmitSpreadUs), fmt::format("client {} starts", c), [this, c] { Submit(c); });
  }
  while (failure_.empty() && result_.steps < options_.steps && !events_.empty()) {
    Step();
    InjectFaults();
  }
  faults_ = false;
  const int64_t deadline = Now() + kSettleForUs;
  const int64_t step_bound = result_.steps + kMaxSettleSteps;
  while (failure_.empty() && !events_.empty() && !Settled() && Now() < deadline && result_.steps < step_bound) Step();
  CheckEnd();
  result_.jobs_stored = static_cast<int64_t>(stored_jobs_.size());
  result_.ok = failure_.empty();
  result_.failure = failure_;
  result_.virtual_us = Now() - kStartUs;
  return result_;
}

}  // namespace

Result Run(const Options& options) { return Simulation(options).Run(); }

}  // namespace meridian::vopr
