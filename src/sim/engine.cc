
#include "sim/engine.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <queue>
#include <tuple>

#include <fmt/format.h>

#include "common/units.h"
#include "sched/backlog.h"
#include "sched/estimate.h"
#include "sched/filters.h"
#include "sim/fleet_builder.h"

namespace meridian::sim {
namespace {

// Adds `name` to a ';'-separated list unless it is there.
void AddName(std::string& list, std::string_view name) {
  size_t at = 0;
  while (at <= list.size()) {
    size_t end = list.find(';', at);
    if (end == std::string::npos) end = list.size();
    if (std::string_view(list).substr(at, end - at) == name) return;
    at = end + 1;
  }
  if (!list.empty()) list += ';';
  list += name;
}

enum class EventKind : uint8_t { kArrival, kStaged, kFinish, kNodeFail, kNodeRepair, kPreempt, kChange };

struct Event {
  int64_t at_us;
  uint64_t seq;
  EventKind kind;
  uint32_t a;  // job, run, node or change index
  uint32_t b;  // run epoch for kStaged/kFinish
};

struct Later {
  bool operator()(const Event& x, const Event& y) const {
    return std::tie(x.at_us, x.seq) > std::tie(y.at_us, y.seq);
  }
};

enum class TaskState : uint8_t { kBlocked, kQueued, kRunning, kDone, kDropped };

struct JobRun {
  const model::Job* job = nullptr;
  sched::JobState state;
  std::vector<TaskState> tasks;
  std::vector<int32_t> deps_left;
  std::vector<SiteId> output_site;
  std::vector<uint32_t> run_of;  // running task -> run slot
  std::vector<uint32_t> slot_of;  // queued task -> its slot in waiting_
  std::vector<int32_t> task_restarts;
  std::vector<std::vector<uint32_t>> dependants;
  size_t left = 0;
  size_t tenant = 0;
  bool ended = false;  // infeasible, failed or turned away: nothing more starts
  JobOutcome outcome;
};

struct TaskRun {
  uint32_t job = 0;
  uint32_t task = 0;
  sched::Allocation allocation;
  int64_t start_us = 0;
  int64_t finish_us = 0;
  uint32_t epoch = 0;
  bool live = false;
  size_t release = 0;  // index in the snapshot's releases
  uint32_t indexed_pool = 0;  // where the release is in the release index
  std::multimap<int64_t, sched::Allocation>::iterator indexed;
  std::vector<sched::Transfer> transfers;
};

struct Waiting {
  uint32_t job;
  uint32_t task;
  int64_t seq;
  std::vector<model::ObjectRef> inputs;
};

sched::TenantUsage UsageOf(const model::ResourceRequest& r) {
  return sched::TenantUsage{static_cast<int64_t>(r.device_count) * r.device_share_milli, r.cpu_milli,
                            r.memory_bytes};
}

Percentiles Summarise(std::vector<double>* v) {
  Percentiles p;
  if (v->empty()) return p;
  std::sort(v->begin(), v->end());
  double sum = 0;
  for (double x : *v) sum += x;
  p.mean = sum / static_cast<double>(v->size());
  auto at = [&](double q) { return (*v)[static_cast<size_t>(q * static_cast<double>(v->size() - 1) + 0.5)]; };
  p.p50 = at(0.50);
  p.p99 = at(0.99);
  p.max = v->back();
  return p;
}

class Simulation {
 public:
  Simulation(const model::Fleet& fleet, const model::ThroughputTable& throughput, const Trace& trace,
             const SimOptions& options, Env& env)
      : fleet_(fleet), throughput_(throughput), trace_(trace), options_(options), env_(env),
        rng_(options.seed), fault_rng_(rng_.Fork()), policy_(options.policy) {
    policy_.explain_waiting = false;  // only infeasible tasks' reasons are reported
  }

  SimResult Run();

 private:
  void Push(int64_t at_us, EventKind kind, uint32_t a, uint32_t b = 0) {
    events_.push(Event{at_us, next_seq_++, kind, a, b});
  }
  void Advance(int64_t now_us);
  void Handle(const Event& e);
  void ScheduleFailures(NodeId node);
  void ChangeFleet(const FleetChange& c);
  void Arrive(uint32_t j);
  void Enqueue(uint32_t j, uint32_t t);
  // Takes a queued task out of the queue (started, or its job ended).
  void Unqueue(uint32_t slot);
  // A node's free resources grew: tasks parked for want of room may fit there.
  void RoomOn(NodeId node) {
    if (!options_.park) return;
    backlog_.Released(snap_.free.free(node));
    snap_.grown.push_back(node);
  }
  void ScheduleRound();
  void Start(const Waiting& w, const sched::Placement& p, int64_t finish_us);
  // Fill experiment: a point of the allocated-against-arrived curve.
  void RecordFill();
  void Finish(uint32_t run);
  // Ends a run: resources back, its release withdrawn.
  void Release(uint32_t run);
  // Ends a run that did not finish; the task is queued again.
  void Kill(uint32_t run);
  void KillNode(NodeId node);
  void SetHealth(NodeId node, model::NodeHealth health);
  // The job gets no more tasks started; those queued or blocked are dropped.
  enum class Ending { kInfeasible, kFailed, kRejected };
  void End(uint32_t j, Ending why, std::string reason);
  void MeasureFragmentation();
  // The node's free resources or health changed: its fragmentation figures are
  // measured again.
  void Touch(NodeId node) {
    const uint32_t id = node.value();
    if (id >= dirty_.size()) {
      dirty_.resize(id + 1, false);
      node_free_.resize(id + 1, 0);
      node_unusable_.resize(id + 1, 0);
    }
    if (!dirty_[id]) {
      dirty_[id] = true;
      dirty_nodes_.push_back(id);
    }
  }
  int64_t Exponential(int64_t mean_us) {
    return static_cast<int64_t>(-std::log(1.0 - fault_rng_.UniformDouble()) * static_cast<double>(mean_us)) + 1;
  }
  // Whether anything may still happen but faults: a task running, a job or a fleet
  // change to come.
  bool Active() const { return arrivals_left_ > 0 || changes_left_ > 0 || !snap_.releases.empty(); }
  int64_t GpuMilli(const model::Node& n) const { return static_cast<int64_t>(n.devices.size()) * 1000; }
  void Fill(SimResult* r);

  model::Fleet fleet_;
  const model::ThroughputTable& throughput_;
  const Trace& trace_;
  const SimOptions& options_;
  Env& env_;
  Random rng_;
  Random fault_rng_;
  sched::Policy policy_;

  std::priority_queue<Event, std::vector<Event>, Later> events_;
  uint64_t rounds_ = 0;          // scheduling rounds, for progress
  double next_progress_s_ = 0;   // real time of the next progress call
  uint64_t next_seq_ = 0;
  int64_t now_us_ = 0;
  int64_t last_us_ = 0;
  bool changed_ = false;
  size_t arrivals_left_ = 0;
  size_t changes_left_ = 0;

  // Mutated between scheduler calls only (Move/Add), never during one.
  std::shared_ptr<sched::PoolIndex> index_;
  std::shared_ptr<sched::ReleaseIndex> release_index_ = std::make_shared<sched::ReleaseIndex>();
  sched::Snapshot snap_;
  std::vector<JobRun> jobs_;
  std::vector<int32_t> slot_of_job_;  // -1 except while a round builds its snapshot
  // Queued tasks by slot (free slots listed in free_slots_), in the backlog by slot.
  std::vector<Waiting> waiting_;
  std::vector<uint32_t> free_slots_;
  sched::Backlog backlog_;
  // Queued GPU request shapes and how many wait with each, for the fragmentation
  // measure.
  using GpuShape = std::tuple<int32_t, int32_t, int64_t, int64_t, std::vector<std::string>>;
  std::map<GpuShape, int64_t> waiting_gpu_shapes_;
  struct RankedShape {
    int64_t count;
    size_t order;  // in shape order
    const GpuShape* shape;
  };
  std::vector<RankedShape> top_;  // reused by MeasureFragmentation
  static GpuShape ShapeOf(const model::ResourceRequest& r) {
    return GpuShape{r.device_count, r.device_share_milli, r.cpu_milli, r.memory_bytes, r.accelerator_any_of};
  }
  int64_t next_task_seq_ = 0;
  std::vector<TaskRun> runs_;
  std::vector<uint32_t> free_runs_;
  std::vector<uint32_t> run_of_release_;  // snapshot release index -> run
  std::vector<bool> removed_;             // nodes taken out of the fleet for good
  size_t original_nodes_ = 0;             // added nodes copy these, round-robin
  size_t next_like_ = 0;

  // Metrics.
  int64_t allocated_gpu_milli_ = 0;
  int64_t arrived_gpu_milli_ = 0;
  bool reached_full_ = false;
  int64_t healthy_gpu_milli_ = 0;
  double util_integral_ = 0;
  std::vector<SeriesPoint> util_steps_;
  bool gpu_waiting_ = false;
  // Free GPU capacity and what the waiting shapes cannot use of it: in all, and
  // per node as last measured against the shapes in measured_.
  int64_t unusable_milli_ = 0;
  int64_t free_milli_ = 0;
  std::vector<int64_t> node_free_, node_unusable_;
  std::vector<model::ResourceRequest> measured_;
  std::vector<GpuShape> measured_shapes_;  // the same, as keys of waiting_gpu_shapes_
  std::vector<bool> dirty_;
  std::vector<uint32_t> dirty_nodes_;
  double unusable_integral_ = 0, free_integral_ = 0, waiting_s_ = 0;
  int64_t first_arrival_us_ = -1;
  int64_t last_finish_us_ = 0;
  SimResult result_;
  std::vector<double> call_us_;
};

void Simulation::Advance(int64_t now_us) {
  const double dt = static_cast<double>(now_us - last_us_) / kSecondUs;
  if (dt > 0 && first_arrival_us_ >= 0) {
    if (healthy_gpu_milli_ > 0) {
      util_integral_ += dt * static_cast<double>(allocated_gpu_milli_) / static_cast<double>(healthy_gpu_milli_);
    }
    if (gpu_waiting_) {
      unusable_integral_ += dt * static_cast<double>(unusable_milli_) / 1000.0;
      free_integral_ += dt * static_cast<double>(free_milli_) / 1000.0;
      waiting_s_ += dt;
    }
  }
  last_us_ = now_us;
  now_us_ = now_us;
}


void Simulation::Enqueue(uint32_t j, uint32_t t) {
  JobRun& jr = jobs_[j];
  const model::Task& task = jr.job->tasks[t];
  Waiting w{j, t, next_task_seq_++, task.inputs};
  for (TaskId dep : task.after) {
    const model::Task& d = jr.job->tasks[dep.value()];
    w.inputs.push_back(model::ObjectRef{fmt::format("{}/{}.out", jr.job->name, d.name), d.output_bytes,
                                        {jr.output_site[dep.value()]}, d.output_residency});
  }
  jr.tasks[t] = TaskState::kQueued;
  uint32_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slot = static_cast<uint32_t>(waiting_.size());
    waiting_.emplace_back();
  }
  backlog_.Add(slot, jr.state.submit_us, w.seq, *jr.job, task, !w.inputs.empty());
  waiting_[slot] = std::move(w);
  jr.slot_of[t] = slot;
  if (task.resources.device_count > 0) ++waiting_gpu_shapes_[ShapeOf(task.resources)];
  changed_ = true;
}

void Simulation::Unqueue(uint32_t slot) {
  Waiting& w = waiting_[slot];
  const model::ResourceRequest& r = jobs_[w.job].job->tasks[w.task].resources;
  if (r.device_count > 0) {
    auto it = waiting_gpu_shapes_.find(ShapeOf(r));
    if (--it->second == 0) waiting_gpu_shapes_.erase(it);
  }
  backlog_.Remove(slot);
  w.inputs.clear();
  free_slots_.push_back(slot);
}

void Simulation::Arrive(uint32_t j) {
  JobRun& jr = jobs_[j];
  const model::Job& job = *jr.job;
  if (first_arrival_us_ < 0) first_arrival_us_ = now_us_;
  jr.state = sched::JobState::Submitted(job, now_us_);
  jr.tasks.assign(job.tasks.size(), TaskState::kBlocked);
  jr.deps_left.assign(job.tasks.size(), 0);
  jr.output_site.assign(job.tasks.size(), SiteId(0));
  jr.run_of.assign(job.tasks.size(), 0);
  jr.slot_of.assign(job.tasks.size(), 0);
  jr.task_restarts.assign(job.tasks.size(), 0);
  jr.dependants.assign(job.tasks.size(), {});
  jr.left = job.tasks.size();
  for (const model::Task& t : job.tasks) {
    arrived_gpu_milli_ += static_cast<int64_t>(t.resources.device_count) * t.resources.device_share_milli;
  }
  std::optional<TenantId> tenant = fleet_.FindTenant(job.tenant);
  jr.tenant = tenant ? tenant->value() : fleet_.tenants.size();
  for (const model::Task& t : job.tasks) {
    jr.deps_left[t.id.value()] = static_cast<int32_t>(t.after.size());
    for (TaskId d : t.after) jr.dependants[d.value()].push_back(t.id.value());
  }
  if (job.tasks.empty()) {
    jr.outcome.start_us = jr.outcome.finish_us = now_us_;
    return;
  }
  for (const model::Task& t : job.tasks) {
    if (t.after.empty()) Enqueue(j, t.id.value());
  }
}

void Simulation::End(uint32_t j, Ending why, std::string reason) {
  JobRun& jr = jobs_[j];
  if (jr.ended) return;
  jr.ended = true;
  (why == Ending::kInfeasible ? jr.outcome.infeasible
   : why == Ending::kFailed   ? jr.outcome.failed
                              : jr.outcome.rejected) = true;
  jr.outcome.reason = std::move(reason);
  for (size_t t = 0; t < jr.tasks.size(); ++t) {
    if (jr.tasks[t] == TaskState::kQueued) Unqueue(jr.slot_of[t]);
    if (jr.tasks[t] == TaskState::kBlocked || jr.tasks[t] == TaskState::kQueued) jr.tasks[t] = TaskState::kDropped;
  }
}

void Simulation::ScheduleRound() {
  // Offer the active tasks (those not parked for want of room), oldest first, up
  // to the cap.
  result_.peak_waiting = std::max(result_.peak_waiting, backlog_.size());
  snap_.now_us = now_us_;
  snap_.jobs.clear();
  snap_.queue.clear();
  std::vector<uint32_t> offered;  // snapshot queue index -> slot in waiting_
  std::vector<uint32_t> offered_jobs;
  backlog_.Offer(options_.max_offered, [&](const sched::Backlog::Offered& o) {
    const uint32_t slot = o.handle;
    const Waiting& w = waiting_[slot];
    int32_t& job_slot = slot_of_job_[w.job];
    if (job_slot < 0) {
      job_slot = static_cast<int32_t>(snap_.jobs.size());
      snap_.jobs.push_back(jobs_[w.job].state);
      offered_jobs.push_back(w.job);
    }
    snap_.queue.push_back(
        sched::PendingTask{static_cast<uint32_t>(job_slot), TaskId(w.task), w.inputs, w.seq, o.room_only_on_grown, o.room_class});
    offered.push_back(slot);
  });
  for (uint32_t j : offered_jobs) slot_of_job_[j] = -1;

  // A source of its own per instant, so that a call skipped (every task parked)
  // changes no later decision.
  Random rng(options_.seed ^ (static_cast<uint64_t>(now_us_) * 0x9E3779B97F4A7C15ULL));
  MonotonicTime t0 = env_.clock().Now();
  sched::Plan plan = sched::Schedule(snap_, policy_, rng);
  MonotonicTime t1 = env_.clock().Now();
  call_us_.push_back(static_cast<double>(t1.us - t0.us));
  ++result_.sched_calls;
  result_.sched_decisions += static_cast<int64_t>(plan.placements.size() + plan.unplaced.size());

  // Actual run times: the trace's duration or the work at the real speed of the
  // device got; a gang finishes with its slowest member.
  std::vector<int64_t> compute(plan.placements.size());
  std::map<std::pair<uint32_t, std::string_view>, int64_t> gang_finish;
  for (size_t k = 0; k < plan.placements.size(); ++k) {
    const sched::Placement& p = plan.placements[k];
    const Waiting& w = waiting_[offered[p.queue_index]];
    const model::Task& task = jobs_[w.job].job->tasks[w.task];
    const sched::Pool& pool = index_->pools[index_->pool_of_node[p.allocation.node.value()]];
    std::optional<int64_t> c = sched::EstimateComputeUs(throughput_, task, pool);
    compute[k] = c ? *c : p.compute_us;
    int64_t finish = now_us_ + p.transfer_us + compute[k];
    if (!task.gang.empty()) {
      int64_t& f = gang_finish[{w.job, task.gang}];
      f = std::max(f, finish);
    }
  }
  for (size_t k = 0; k < plan.placements.size(); ++k) {
    const sched::Placement& p = plan.placements[k];
    const uint32_t slot = offered[p.queue_index];
    const Waiting& w = waiting_[slot];
    const model::Task& task = jobs_[w.job].job->tasks[w.task];
    int64_t finish = now_us_ + p.transfer_us + compute[k];
    if (!task.gang.empty()) finish = gang_finish[{w.job, task.gang}];
    Start(w, p, finish);
    Unqueue(slot);
  }
  for (const sched::Unplaced& u : plan.unplaced) {
    const uint32_t slot = offered[u.queue_index];
    if (!backlog_.Contains(slot)) continue;  // its job ended earlier in this loop
    const uint32_t job = waiting_[slot].job;
    if (u.kind == sched::UnplacedKind::kInfeasible) {
      End(job, Ending::kInfeasible, fmt::format("task '{}': {}", jobs_[job].job->tasks[waiting_[slot].task].name, u.reason));
    } else if (options_.fill) {
      End(job, Ending::kRejected, "");
    } else if (u.needs_room && options_.park) {
      backlog_.Park(slot);
    }
  }
  snap_.grown.clear();
  backlog_.EndRound();
  if (options_.fill) RecordFill();
}

void Simulation::RecordFill() {
  const double cap = static_cast<double>(std::max<int64_t>(healthy_gpu_milli_, 1));
  const double arrived = static_cast<double>(arrived_gpu_milli_) / cap;
  const double unallocated = static_cast<double>(healthy_gpu_milli_ - allocated_gpu_milli_) / 1000.0;
  result_.fill_curve.push_back(SeriesPoint{arrived, static_cast<double>(allocated_gpu_milli_) / cap});
  if (arrived >= 1.0 && !reached_full_) {
    reached_full_ = true;
    result_.unallocated_gpus_at_full = unallocated;
  }
  result_.unallocated_gpus_end = unallocated;
}

void Simulation::Start(const Waiting& w, const sched::Placement& p, int64_t finish_us) {
  JobRun& jr = jobs_[w.job];
  const model::Task& task = jr.job->tasks[w.task];
  uint32_t id;
  if (!free_runs_.empty()) {
    id = free_runs_.back();
    free_runs_.pop_back();
  } else {
    id = static_cast<uint32_t>(runs_.size());
    runs_.emplace_back();
  }
  TaskRun& run = runs_[id];
  run.job = w.job;
  run.task = w.task;
  run.allocation = p.allocation;
  run.start_us = now_us_;
  run.finish_us = finish_us;
  run.live = true;
  run.transfers = p.transfers;
  ++result_.placements;
  snap_.free.Take(p.allocation);
  Touch(p.allocation.node);
  if (!options_.fill) {
    run.release = snap_.releases.size();
    // The scheduler learns the estimated finish, as a coordinator would.
    snap_.releases.push_back(sched::Release{std::max(p.finish_us, now_us_), p.allocation});
    run_of_release_.push_back(id);
    run.indexed_pool = index_->pool_of_node[p.allocation.node.value()];
    if (release_index_->by_pool.size() <= run.indexed_pool) release_index_->by_pool.resize(run.indexed_pool + 1);
    run.indexed = release_index_->by_pool[run.indexed_pool].emplace(snap_.releases.back().at_us, p.allocation);
  }
  sched::TenantUsage u = UsageOf(task.resources);
  sched::TenantUsage& used = snap_.tenant_usage[jr.tenant];
  used.gpu_milli += u.gpu_milli;
  used.cpu_milli += u.cpu_milli;
  used.memory_bytes += u.memory_bytes;
  allocated_gpu_milli_ += u.gpu_milli;
  changed_ = true;

  jr.tasks[w.task] = TaskState::kRunning;
  jr.run_of[w.task] = id;
  if (jr.outcome.start_us < 0) jr.outcome.start_us = now_us_;
  AddName(jr.outcome.sites, fleet_.site(p.site).name);
  AddName(jr.outcome.device_types, p.device_type.empty() ? std::string_view("CPU") : std::string_view(p.device_type));
  // The node is held while inputs arrive and while computing.
  const sched::Pool& pool = index_->pools[index_->pool_of_node[p.allocation.node.value()]];
  const int64_t held_us = finish_us - now_us_;
  const int64_t cost = sched::RunCostMicroUsd(pool.price_micro_usd_per_hour, sched::NodeShareppm(task.resources, pool),
                                              held_us);
  jr.outcome.cost_micro_usd += cost + p.egress_cost_micro_usd;
  result_.compute_cost_micro_usd += cost;
  result_.egress_cost_micro_usd += p.egress_cost_micro_usd;
  if (jr.state.budget_left_micro_usd) *jr.state.budget_left_micro_usd -= cost + p.egress_cost_micro_usd;
  if (!p.transfers.empty()) Push(now_us_ + p.transfer_us, EventKind::kStaged, id, run.epoch);
  if (!options_.fill) Push(finish_us, EventKind::kFinish, id, run.epoch);
}

void Simulation::Finish(uint32_t id) {
  TaskRun& run = runs_[id];
  JobRun& jr = jobs_[run.job];
  const model::Task& task = jr.job->tasks[run.task];
  Release(id);
  jr.tasks[run.task] = TaskState::kDone;
  jr.output_site[run.task] = fleet_.node(run.allocation.node).site;
  last_finish_us_ = std::max(last_finish_us_, now_us_);
  MERIDIAN_CHECK_MSG(jr.left > 0, "a task finished twice");
  if (--jr.left == 0) {
    jr.outcome.finish_us = now_us_;
    return;
  }
  if (jr.ended) return;
  for (uint32_t d : jr.dependants[task.id.value()]) {
    if (--jr.deps_left[d] == 0 && jr.tasks[d] == TaskState::kBlocked) Enqueue(run.job, d);
  }
}

void Simulation::Kill(uint32_t id) {
  Release(id);
  const TaskRun& run = runs_[id];
  JobRun& jr = jobs_[run.job];
  ++result_.task_restarts;
  ++jr.outcome.restarts;
  if (++jr.task_restarts[run.task] > options_.max_restarts) {
    End(run.job, Ending::kFailed,
        fmt::format("task '{}' lost its node {} times", jr.job->tasks[run.task].name, jr.task_restarts[run.task]));
  }
  if (jr.ended) {
    jr.tasks[run.task] = TaskState::kDropped;
  } else {
    Enqueue(run.job, run.task);
  }
}

void Simulation::Release(uint32_t id) {
  TaskRun& run = runs_[id];
  MERIDIAN_CHECK(run.live);
  JobRun& jr = jobs_[run.job];
  const model::Task& task = jr.job->tasks[run.task];
  snap_.free.Give(run.allocation);
  Touch(run.allocation.node);
  RoomOn(run.allocation.node);
  // Swap-remove the release.
  if (options_.fill) {  // runs in the fill experiment have no release
    allocated_gpu_milli_ -= UsageOf(task.resources).gpu_milli;
    run.live = false;
    ++run.epoch;
    free_runs_.push_back(id);
    changed_ = true;
    return;
  }
  const size_t last = snap_.releases.size() - 1;
  if (run.release != last) {
    snap_.releases[run.release] = std::move(snap_.releases[last]);
    run_of_release_[run.release] = run_of_release_[last];
    runs_[run_of_release_[run.release]].release = run.release;
  }
  snap_.releases.pop_back();
  run_of_release_.pop_back();
  release_index_->by_pool[run.indexed_pool].erase(run.indexed);
  sched::TenantUsage u = UsageOf(task.resources);
  sched::TenantUsage& used = snap_.tenant_usage[jr.tenant];
  used.gpu_milli -= u.gpu_milli;
  used.cpu_milli -= u.cpu_milli;
  used.memory_bytes -= u.memory_bytes;
  allocated_gpu_milli_ -= u.gpu_milli;
  run.live = false;
  ++run.epoch;
  free_runs_.push_back(id);
  changed_ = true;
}

void Simulation::KillNode(NodeId node) {
  std::vector<uint32_t> victims;
  for (uint32_t i = 0; i < runs_.size(); ++i) {
    if (runs_[i].live && runs_[i].allocation.node == node) victims.push_back(i);
  }
  for (uint32_t id : victims) {
    if (!runs_[id].live) continue;  // went with its gang
    const uint32_t job = runs_[id].job;
    const std::string& gang = jobs_[job].job->tasks[runs_[id].task].gang;
    Kill(id);
    if (gang.empty()) continue;
    // A gang cannot go on without a member: its other members stop too.
    JobRun& jr = jobs_[job];
    for (const model::Task& t : jr.job->tasks) {
      if (t.gang == gang && jr.tasks[t.id.value()] == TaskState::kRunning) Kill(jr.run_of[t.id.value()]);
    }
  }
}

void Simulation::SetHealth(NodeId node, model::NodeHealth health) {
  model::Node& n = fleet_.nodes[node.value()];
  if (n.health == health) return;
  if (health == model::NodeHealth::kHealthy) {
    healthy_gpu_milli_ += GpuMilli(n);
  } else if (n.health == model::NodeHealth::kHealthy) {
    healthy_gpu_milli_ -= GpuMilli(n);
  }
  n.health = health;
  index_->Move(fleet_, node);
  Touch(node);
  if (health == model::NodeHealth::kHealthy) RoomOn(node);
  changed_ = true;
}

void Simulation::MeasureFragmentation() {
  // The distinct GPU shapes waiting, most common first (ties in shape order), at
  // most 16.
  top_.clear();
  for (const auto& [shape, count] : waiting_gpu_shapes_) top_.push_back(RankedShape{count, top_.size(), &shape});
  auto before = [](const RankedShape& a, const RankedShape& b) { return std::tie(b.count, a.order) < std::tie(a.count, b.order); };
  if (top_.size() > 16) {
    std::nth_element(top_.begin(), top_.begin() + 16, top_.end(), before);
    top_.resize(16);
  }
  std::sort(top_.begin(), top_.end(), before);
  const auto& top = top_;
  gpu_waiting_ = !top.empty();
  if (!gpu_waiting_) return;
  // Per node figures are kept; all are measured again only when the shapes change.
  bool same = top.size() == measured_.size();
  for (size_t i = 0; same && i < top.size(); ++i) same = measured_shapes_[i] == *top[i].shape;
  if (!same) {
    measured_.clear();
    measured_shapes_.clear();
    for (const auto& entry : top) {
      measured_shapes_.push_back(*entry.shape);
      model::ResourceRequest r;
      std::tie(r.device_count, r.device_share_milli, r.cpu_milli, r.memory_bytes, r.accelerator_any_of) = *entry.shape;
      measured_.push_back(std::move(r));
    }
    for (const model::Node& n : fleet_.nodes) Touch(n.id);
  }
  for (uint32_t id : dirty_nodes_) {
    dirty_[id] = false;
    free_milli_ -= node_free_[id];
    unusable_milli_ -= node_unusable_[id];
    node_free_[id] = node_unusable_[id] = 0;
    const model::Node& n = fleet_.nodes[id];
    if (n.devices.empty() || n.health != model::NodeHealth::kHealthy) continue;
    const sched::NodeFree& f = snap_.free.free(n.id);
    int64_t free = 0;
    for (int32_t d : f.device_free_milli) free += d;
    if (free == 0) continue;
    // What the best-matching waiting shape still cannot use; all of it when no
    // waiting task may run on this type.
    int64_t unusable = free;
    for (const model::ResourceRequest& shape : measured_) {
      const auto& any = shape.accelerator_any_of;
      if (!any.empty() && std::find(any.begin(), any.end(), n.accelerator_type()) == any.end()) continue;
      unusable = std::min(unusable, sched::UnusableDeviceMilli(shape, f, n.accelerator_type()));
    }
    node_free_[id] = free;
    node_unusable_[id] = unusable;
    free_milli_ += free;
    unusable_milli_ += unusable;
  }
  dirty_nodes_.clear();
}

void Simulation::ScheduleFailures(NodeId node) {
  if (!Active()) return;
  if (options_.node_mtbf_us > 0) Push(now_us_ + Exponential(options_.node_mtbf_us), EventKind::kNodeFail, node.value());
  if (options_.spot_mtbp_us > 0 && fleet_.node(node).spot) {
    Push(now_us_ + Exponential(options_.spot_mtbp_us), EventKind::kPreempt, node.value());
  }
}

void Simulation::ChangeFleet(const FleetChange& c) {
  for (int32_t k = 0; k < c.add; ++k) {
    NodeId id = AddNodeLike(&fleet_, NodeId(static_cast<uint32_t>(next_like_++ % original_nodes_)));
    snap_.free.Add(fleet_.node(id));
    index_->Add(fleet_, id);
    Touch(id);
    RoomOn(id);
    removed_.push_back(false);
    healthy_gpu_milli_ += GpuMilli(fleet_.node(id));
    ScheduleFailures(id);
  }
  int32_t to_remove = c.remove;
  for (size_t i = fleet_.nodes.size(); i-- > 0 && to_remove > 0;) {
    if (removed_[i] || fleet_.nodes[i].health != model::NodeHealth::kHealthy) continue;
    removed_[i] = true;
    SetHealth(NodeId(static_cast<uint32_t>(i)), model::NodeHealth::kUnhealthy);
    KillNode(NodeId(static_cast<uint32_t>(i)));
    --to_remove;
  }
  changed_ = true;
}

void Simulation::Handle(const Event& e) {
  switch (e.kind) {
    case EventKind::kArrival:
      --arrivals_left_;
      Arrive(e.a);
      break;
    case EventKind::kStaged: {
      const TaskRun& run = runs_[e.a];
      if (!run.live || run.epoch != e.b) break;
      for (const sched::Transfer& t : run.transfers) {
        result_.wan_bytes[fmt::format("{}->{}", fleet_.site(t.from).name, fleet_.site(t.to).name)] += t.bytes;
      }
      break;
    }
    case EventKind::kFinish:
      if (runs_[e.a].live && runs_[e.a].epoch == e.b) Finish(e.a);
      break;
    case EventKind::kNodeFail:
    case EventKind::kPreempt: {
      NodeId node(e.a);
      if (removed_[e.a] || fleet_.node(node).health != model::NodeHealth::kHealthy) break;
      if (!Active()) break;  // nothing left to disturb: let the run end
      ++(e.kind == EventKind::kNodeFail ? result_.node_failures : result_.preemptions);
      SetHealth(node, model::NodeHealth::kUnhealthy);
      KillNode(node);
      Push(e.at_us + options_.repair_us, EventKind::kNodeRepair, e.a);
      break;
    }
    case EventKind::kNodeRepair:
      if (removed_[e.a]) break;
      SetHealth(NodeId(e.a), model::NodeHealth::kHealthy);
      ScheduleFailures(NodeId(e.a));
      break;
    case EventKind::kChange:
      --changes_left_;
      ChangeFleet(options_.changes[e.a]);
      break;
  }
}

SimResult Simulation::Run() {
  MonotonicTime wall0 = env_.clock().Now();
  snap_.fleet = &fleet_;
  snap_.throughput = &throughput_;
  snap_.free = sched::ResourceLedger(fleet_);
  snap_.tenant_usage.assign(fleet_.tenants.size() + 1, sched::TenantUsage{});
  // Built once; Move and Add keep it exact as nodes fail, recover or join.
  index_ = std::make_shared<sched::PoolIndex>(sched::PoolIndex::Build(fleet_));
  if (options_.share_pool_index) {
    snap_.pools = index_;
    snap_.release_index = release_index_;
    snap_.verdict_cache = std::make_shared<sched::VerdictCache>();
  }
  removed_.assign(fleet_.nodes.size(), false);
  original_nodes_ = fleet_.nodes.size();
  for (const model::Node& n : fleet_.nodes) {
    if (n.health == model::NodeHealth::kHealthy) healthy_gpu_milli_ += GpuMilli(n);
  }
  result_.gpus = healthy_gpu_milli_ / 1000;
  jobs_.resize(trace_.jobs.size());
  slot_of_job_.assign(trace_.jobs.size(), -1);
  for (uint32_t j = 0; j < trace_.jobs.size(); ++j) {
    jobs_[j].job = trace_.jobs[j].job.get();
    jobs_[j].outcome.name = trace_.jobs[j].job->name;
    jobs_[j].outcome.arrival_us = trace_.jobs[j].arrival_us;
    Push(trace_.jobs[j].arrival_us, EventKind::kArrival, j);
  }
  arrivals_left_ = trace_.jobs.size();
  changes_left_ = options_.changes.size();
  if (!trace_.jobs.empty()) now_us_ = last_us_ = trace_.jobs.front().arrival_us;
  for (const model::Node& n : fleet_.nodes) ScheduleFailures(n.id);
  for (uint32_t c = 0; c < options_.changes.size(); ++c) Push(options_.changes[c].at_us, EventKind::kChange, c);

  // Bounded: every event is consumed; new ones come from arrivals (finite), starts
  // (one per placement) and faults, which strike only while something may still
  // happen: tasks running, or jobs or fleet changes still to come.
  while (!events_.empty()) {
    const int64_t now = events_.top().at_us;
    Advance(now);
    while (!events_.empty() && events_.top().at_us == now) {
      Event e = events_.top();
      events_.pop();
      Handle(e);
    }
    if (!changed_) continue;  // a stage-in or a fault on a node already down
    if (backlog_.HasWork()) ScheduleRound();
    changed_ = false;
    if (options_.wall_limit_s > 0 &&
        static_cast<double>(env_.clock().Now().us - wall0.us) / kSecondUs > options_.wall_limit_s) {
      result_.stopped_early = true;
      break;
    }
    // The clock is read every 4096 rounds only: a round can take under a microsecond.
    if (options_.on_progress && (++rounds_ & 4095) == 0) {
      const double wall_s = static_cast<double>(env_.clock().Now().us - wall0.us) / kSecondUs;
      if (next_progress_s_ == 0) next_progress_s_ = options_.progress_every_s;  // nothing in the first period
      if (wall_s >= next_progress_s_) {
        next_progress_s_ = wall_s + options_.progress_every_s;
        const int64_t first = trace_.jobs.empty() ? 0 : trace_.jobs.front().arrival_us;
        const int64_t last = trace_.jobs.empty() ? 0 : trace_.jobs.back().arrival_us;
        options_.on_progress(SimProgress{static_cast<double>(now_us_ - first) / kSecondUs,
                                         static_cast<double>(last - first) / kSecondUs,
                                         trace_.jobs.size() - arrivals_left_, trace_.jobs.size(), wall_s});
      }
    }
    MeasureFragmentation();
    const double util = healthy_gpu_milli_ > 0
                            ? static_cast<double>(allocated_gpu_milli_) / static_cast<double>(healthy_gpu_milli_)
                            : 0.0;
    if (util_steps_.empty() || util_steps_.back().value != util) {
      util_steps_.push_back(SeriesPoint{static_cast<double>(now_us_) / kSecondUs, util});
    }
  }
  result_.wall_s = static_cast<double>(env_.clock().Now().us - wall0.us) / kSecondUs;
  Fill(&result_);
  return std::move(result_);
}

void Simulation::Fill(SimResult* r) {
  r->policy = options_.policy_name;
  r->trace = trace_.name;
  r->seed = options_.seed;
  r->nodes = fleet_.nodes.size();
  r->jobs = trace_.jobs.size();
  r->tasks = trace_.TaskCount();
  std::vector<double> jct, queueing;
  std::vector<std::string> reasons;
  for (JobRun& jr : jobs_) {
    JobOutcome& o = jr.outcome;
    if (o.start_us >= 0) queueing.push_back(static_cast<double>(o.start_us - o.arrival_us) / kSecondUs);
    if (o.rejected) {
      ++r->rejected_jobs;
    } else if (o.failed) {
      ++r->failed_jobs;
      if (reasons.size() < 20 && std::find(reasons.begin(), reasons.end(), o.reason) == reasons.end()) {
        reasons.push_back(o.reason);
      }
    } else if (o.infeasible) {
      ++r->infeasible_jobs;
      if (reasons.size() < 20 && std::find(reasons.begin(), reasons.end(), o.reason) == reasons.end()) {
        reasons.push_back(o.reason);
      }
    } else if (o.finish_us >= 0) {
      ++r->finished_jobs;
      jct.push_back(static_cast<double>(o.finish_us - o.arrival_us) / kSecondUs);
    } else if (!options_.fill) {
      ++r->unfinished_jobs;
    }
    r->outcomes.push_back(std::move(o));
  }
  r->infeasible_reasons = std::move(reasons);
  r->jct = Summarise(&jct);
  r->queueing = Summarise(&queueing);
  if (!jct.empty()) {
    for (int q = 0; q <= 100; ++q) {
      r->jct_quantiles_s.push_back(jct[static_cast<size_t>(q / 100.0 * static_cast<double>(jct.size() - 1) + 0.5)]);
    }
  }
  const double start_s = first_arrival_us_ < 0 ? 0 : static_cast<double>(first_arrival_us_) / kSecondUs;
  const double end_s = static_cast<double>(std::max(last_finish_us_, first_arrival_us_)) / kSecondUs;
  r->makespan_s = end_s - start_s;
  // Utilisation over [first arrival, last finish]; the integral ran to the last
  // event, which is the last finish unless fault events trailed (they stop once idle).
  r->gpu_utilisation = r->makespan_s > 0 ? util_integral_ / r->makespan_s : 0;
  r->gpu_waiting_s = waiting_s_;
  r->unusable_gpus_while_waiting = waiting_s_ > 0 ? unusable_integral_ / waiting_s_ : 0;
  r->free_gpus_while_waiting = waiting_s_ > 0 ? free_integral_ / waiting_s_ : 0;
  // Downsample the step series into equal buckets, time-weighted.
  if (r->makespan_s > 0 && !util_steps_.empty()) {
    const size_t n = std::max<size_t>(options_.series_points, 2);
    const double width = r->makespan_s / static_cast<double>(n);
    std::vector<double> acc(n, 0);
    for (size_t i = 0; i < util_steps_.size(); ++i) {
      double from = util_steps_[i].t_s;
      double to = i + 1 < util_steps_.size() ? util_steps_[i + 1].t_s : end_s;
      from = std::max(from, start_s);
      to = std::min(to, end_s);
      while (from < to) {
        size_t b = std::min(n - 1, static_cast<size_t>((from - start_s) / width));
        double bucket_end = start_s + static_cast<double>(b + 1) * width;
        double seg = std::min(to, bucket_end) - from;
        if (seg <= 0) break;
        acc[b] += seg * util_steps_[i].value;
        from += seg;
      }
    }
    for (size_t b = 0; b < n; ++b) {
      r->utilisation.push_back(SeriesPoint{start_s + (static_cast<double>(b) + 0.5) * width, acc[b] / width});
    }
  }
  std::vector<double> calls = call_us_;
  if (!calls.empty()) {
    double total = 0;
    for (double c : calls) total += c;
    r->sched_total_s = total / kSecondUs;
    std::sort(calls.begin(), calls.end());
    r->sched_call_p50_us = calls[calls.size() / 2];
    r->sched_call_p99_us = calls[std::min(calls.size() - 1, calls.size() * 99 / 100)];
  }
}

}  // namespace

StatusOr<SimResult> Simulate(const model::Fleet& fleet, const model::ThroughputTable& throughput,
                             const Trace& trace, const SimOptions& options, Env& env) {
  if (fleet.nodes.empty()) return InvalidArgumentError("the fleet has no nodes");
  for (const model::Node& n : fleet.nodes) {
    if (n.devices.size() > 64) {
      return InvalidArgumentError(fmt::format("node '{}' has {} devices; at most 64", n.name, n.devices.size()));
    }
  }
  if (trace.timeless && !options.fill) {
    return InvalidArgumentError(fmt::format(
        "trace '{}' has no arrival or run times (a pod list for the fill experiment): replay it with --fill",
        trace.name));
  }
  if (options.fill && (options.node_mtbf_us || options.spot_mtbp_us || !options.changes.empty())) {
    return InvalidArgumentError("the fill experiment takes no failures, preemptions or fleet changes");
  }
  if (options.max_restarts < 0) return InvalidArgumentError("max_restarts must be >= 0");
  for (const FleetChange& c : options.changes) {
    if (c.add < 0 || c.remove < 0) return InvalidArgumentError("a fleet change adds or removes a count >= 0");
  }
  Simulation sim(fleet, throughput, trace, options, env);
  return sim.Run();
}

std::vector<std::string> PolicyNames() {
  return {"meridian", "frag-aware", "first-fit", "best-fit", "random", "agnostic", "cheapest-region"};
}

namespace {

// The trace's request shapes as the expected workload (as FGD assumes it known):
// FGD's typical tasks, or Meridian's GPU-demand weighting.
std::vector<sched::WorkloadShape> TraceWorkload(const Trace& trace, bool fgd) {
  std::vector<const model::ResourceRequest*> requests;
  for (const TraceJob& j : trace.jobs) {
    for (const model::Task& t : j.job->tasks) requests.push_back(&t.resources);
  }
  return fgd ? sched::FgdWorkload(requests) : sched::GpuDemandWorkload(requests);
}

}  // namespace

StatusOr<sched::Policy> NamedPolicy(std::string_view name, const Trace& trace) {
  sched::Policy p;
  if (name == "meridian") {
    p = sched::Policy::Meridian(sched::QueueOrder::kFifo, TraceWorkload(trace, false));
  } else if (name == "frag-aware") {
    p.pools = sched::PoolChoice::kAnyPool;
    p.nodes = sched::NodeChoice::kLeastFragmentation;
    p.workload = TraceWorkload(trace, true);
  } else if (name == "first-fit") {
    p.pools = sched::PoolChoice::kAnyPool;
    p.nodes = sched::NodeChoice::kFirstFit;
  } else if (name == "best-fit") {
    p.pools = sched::PoolChoice::kAnyPool;
    p.nodes = sched::NodeChoice::kBestFit;
  } else if (name == "random") {
    p.pools = sched::PoolChoice::kAnyPool;
    p.nodes = sched::NodeChoice::kRandom;
  } else if (name == "agnostic") {
    p.heterogeneity_aware = false;
  } else if (name == "cheapest-region") {
    p.pools = sched::PoolChoice::kCheapestPrice;
  } else {
    return InvalidArgumentError(fmt::format("unknown policy '{}' (known: {})", name, fmt::join(PolicyNames(), ", ")));
  }
  return p;
}

}  // namespace meridian::sim
