// The coordinator's moving parts: the scheduling step, task updates from agents,
// retries, losses, failure detection and the ends of jobs. All called with mu_ held.
#include <algorithm>

#include <limits>

#include <fmt/format.h>

#include "common/logging.h"
#include "common/net.h"
#include "common/units.h"
#include "coordinator/coordinator.h"
#include "sched/estimate.h"
#include "security/ticket.h"

namespace meridian::coordinator {
namespace {

// Attempts a task may lose to inputs no replica of which could be read before its job
// fails: each such loss drops the bad copies and makes lost outputs again, so a few
// are expected after faults, and more means the inputs cannot be had.
constexpr int32_t kMaxInputLosses = 10;

// Retiring jobs of this many tasks at once returns the freed heap to the system.
constexpr size_t kTrimAfterTasks = 10'000;

}  // namespace

using model::JobStatus;
using model::TaskStatus;

void Coordinator::Enqueue(TaskRt& task) {
  task.seq = next_seq_++;
  task.queued_us = env_.clock().Now().us;
  ready_[task.seq] = {task.rec.job, task.rec.task};
  dirty_ = true;
}

void Coordinator::Dequeue(TaskRt& task) {
  if (task.seq >= 0) ready_.erase(task.seq);
  task.seq = -1;
}

void Coordinator::Hold(TaskRt& task, int32_t node) {
  const model::TaskAllocation& a = task.rec.allocation;
  ledger_.Take(sched::Allocation{NodeId(static_cast<uint32_t>(node)), a.cpu_milli, a.memory_bytes, a.devices,
                                 a.device_share_milli});
  task.node = node;
  nodes_[node].tasks.insert({task.rec.job, task.rec.task});
  JobRt& job = jobs_.at(task.rec.job);
  ++job.held;
  CountTenantUsage(job.rec.tenant, a, node, 1);
}

void Coordinator::CountTenantUsage(const std::string& tenant, const model::TaskAllocation& a, int32_t node,
                                   int sign) {
  sched::TenantUsage& u = tenant_usage_[tenant];
  const int64_t gpu_milli = static_cast<int64_t>(a.devices.size()) * a.device_share_milli;
  u.gpu_milli += sign * gpu_milli;
  u.cpu_milli += sign * a.cpu_milli;
  u.memory_bytes += sign * a.memory_bytes;
  if (gpu_milli > 0) u.gpu_milli_by_type[std::string(fleet_.nodes[node].accelerator_type())] += sign * gpu_milli;
}

void Coordinator::ChargeLocked(const std::string& tenant, int64_t micro_usd) {
  const int64_t day = WallUs() / kDayUs;
  if (day != spend_day_) {
    // The day's last changes go to the store with the next batch, under their day.
    for (const std::string& t : spend_unsaved_) spend_rows_.push_back(model::TenantSpend{t, spend_day_, spent_today_[t]});
    spend_unsaved_.clear();
    spent_today_.clear();
    spend_day_ = day;
  }
  if (micro_usd == 0) return;
  spent_today_[tenant] += micro_usd;
  spend_unsaved_.insert(tenant);
}

int64_t Coordinator::SpentTodayLocked(const std::string& tenant) {
  ChargeLocked(tenant, 0);  // a new day starts from nothing
  auto spent = spent_today_.find(tenant);
  auto running = running_estimate_.find(tenant);
  return (spent == spent_today_.end() ? 0 : spent->second) +
         (running == running_estimate_.end() ? 0 : running->second);
}

int64_t Coordinator::RanCostLocked(const JobRt& job, const TaskRt& task, int32_t node) const {
  const model::Node& n = fleet_.nodes[node];
  if (!job.job || n.price_micro_usd_per_hour == 0) return task.charged_egress_micro_usd;
  sched::Pool shape;
  shape.device_count = static_cast<int32_t>(n.devices.size());
  shape.cpu_milli = n.cpu_milli;
  shape.memory_bytes = n.memory_bytes;
  const int64_t share = sched::NodeShareppm(job.job->tasks[task.rec.task].resources, shape);
  const int64_t ran_us = std::max<int64_t>(0, WallUs() - task.rec.started_us);
  return sched::RunCostMicroUsd(n.price_micro_usd_per_hour, share, ran_us) + task.charged_egress_micro_usd;
}

void Coordinator::Release(TaskRt& task) {
  if (task.node < 0) return;
  {
    // The estimate counted while it ran gives way to what it ran.
    const JobRt& job = jobs_.at(task.rec.job);
    if (task.charged_micro_usd != 0) running_estimate_[job.rec.tenant] -= task.charged_micro_usd;
    ChargeLocked(job.rec.tenant, RanCostLocked(job, task, task.node));
    task.charged_micro_usd = 0;
    task.charged_egress_micro_usd = 0;
  }
  const model::TaskAllocation& a = task.rec.allocation;
  ledger_.Give(sched::Allocation{NodeId(static_cast<uint32_t>(task.node)), a.cpu_milli, a.memory_bytes, a.devices,
                                 a.device_share_milli});
  const int32_t node = task.node;
  nodes_[task.node].tasks.erase({task.rec.job, task.rec.task});
  task.node = -1;
  dirty_ = true;
  JobRt& job = jobs_.at(task.rec.job);
  CountTenantUsage(job.rec.tenant, a, node, -1);
  if (--job.held == 0 && model::IsTerminal(job.rec.status)) to_retire_.insert(job.rec.id);
}

void Coordinator::LeavePlaced(JobRt& job, TaskRt& task) {
  --job.counts.running;
  --job.running_by_site[task.rec.site];
}

void Coordinator::ScheduleLocked() {
  dirty_ = false;
  if (ready_.empty()) return;
  sched::Snapshot snap;
  snap.now_us = env_.clock().Now().us;
  snap.fleet = &fleet_;
  snap.throughput = &options_.throughput;
  snap.pools = PoolsLocked();
  snap.free = ledger_;
  // What each tenant's running tasks hold, for quotas and fair shares (the fleet's
  // tenants by index; the last entry is everyone the fleet does not list).
  snap.tenant_usage.assign(fleet_.tenants.size() + 1, sched::TenantUsage{});
  for (const auto& [name, used] : tenant_usage_) {
    std::optional<TenantId> t = fleet_.FindTenant(name);
    sched::TenantUsage& u = snap.tenant_usage[t ? t->value() : fleet_.tenants.size()];
    u.gpu_milli += used.gpu_milli;
    u.cpu_milli += used.cpu_milli;
    u.memory_bytes += used.memory_bytes;
    for (const auto& [type, milli] : used.gpu_milli_by_type) u.gpu_milli_by_type[type] += milli;
  }
  for (size_t t = 0; t < fleet_.tenants.size(); ++t) {
    const model::Tenant& tenant = fleet_.tenants[t];
    if (tenant.budget_micro_usd_per_day > 0) {
      snap.tenant_usage[t].budget_left_micro_usd = tenant.budget_micro_usd_per_day - SpentTodayLocked(tenant.name);
    }
  }
  // A job's tasks that may run in its fallback regions now are offered as the job
  // with those regions allowed too (a job state of its own, second in the key).
  std::map<std::pair<uint64_t, bool>, uint32_t> job_index;
  std::vector<std::pair<JobRt*, TaskRt*>> offered;
  auto offer = [&](JobRt& job, TaskRt& task) {
    const std::optional<MonotonicTime> fallback_at = FallbackAtLocked(job, task);
    const bool fallen_back = fallback_at && snap.now_us >= fallback_at->us;
    auto [ji, inserted] =
        job_index.try_emplace({job.rec.id, fallen_back}, static_cast<uint32_t>(snap.jobs.size()));
    if (inserted) {
      snap.jobs.push_back(
          sched::JobState::Submitted(fallen_back ? FallbackJobLocked(job) : *job.job, job.rec.submitted_us));
    }
    snap.queue.push_back(sched::PendingTask{ji->second, TaskId(task.rec.task), InputsForScheduling(job, task),
                                            task.seq});
    offered.emplace_back(&job, &task);
  };
  // A gang is offered whole, with its first member in the queue, once every member is
  // queued with its inputs there: its members start together, in one pass, and each
  // is told where the others run.
  std::set<std::pair<uint64_t, int32_t>> gangs_seen;
  for (auto it = ready_.begin(); it != ready_.end() && offered.size() < options_.schedule_window; ++it) {
    JobRt& job = jobs_.at(it->second.first);
    TaskRt& task = job.tasks[it->second.second];
    const int32_t gang = job.job->tasks[task.rec.task].gang_id;
    if (gang < 0) {
      if (!DepOutputsAvailableLocked(job, task)) {
        awaiting_inputs_.insert(it->second);
        continue;
      }
      offer(job, task);
      continue;
    }
    if (!gangs_seen.insert({job.rec.id, gang}).second) continue;
    // An elastic gang's members that run go on: the queued ones (replacements) are
    // offered without them.
    const bool elastic = job.job->gang_failure == model::GangFailure::kElastic;
    std::vector<TaskId> members;
    bool ready = true;
    for (TaskId m : job.job->gangs[static_cast<size_t>(gang)].members) {
      TaskRt& member = job.tasks[m.value()];
      if (member.seq < 0) {
        // Still blocked, or placed and stopping; or placed and running, in an elastic gang.
        if (!(elastic && model::IsPlaced(member.rec.status))) ready = false;
        continue;
      }
      members.push_back(m);
      if (!DepOutputsAvailableLocked(job, member)) {
        awaiting_inputs_.insert({job.rec.id, m.value()});
        ready = false;
      }
    }
    // Never split across two passes; a gang larger than the window goes alone.
    if (!ready || (!offered.empty() && offered.size() + members.size() > options_.schedule_window)) continue;
    for (TaskId m : members) offer(job, job.tasks[m.value()]);
  }
  const MonotonicTime pass_start = env_.clock().Now();
  sched::Plan plan = sched::Schedule(snap, policy_, rng_);
  const MonotonicTime pass_end = env_.clock().Now();
  if (!snap.queue.empty()) schedule_pass_.ObserveUs(pass_end.us - pass_start.us);
  if (plan.placements.empty() && plan.unplaced.empty()) return;

  store::StoreBatch batch;
  const int64_t now = WallUs();
  std::set<int32_t> nodes_with_work;
  std::vector<std::pair<JobRt*, TaskRt*>> gang_placed;
  for (const sched::Placement& p : plan.placements) {
    auto [job, task] = offered[p.queue_index];
    const int32_t node = static_cast<int32_t>(p.allocation.node.value());
    Dequeue(*task);
    ++placements_;
    placement_latency_.ObserveUs(pass_end.us - task->queued_us);
    job->waiting.erase(task->rec.task);
    model::TaskRecord& r = task->rec;
    r.status = TaskStatus::kAssigned;
    // Retries are attempts past a task's first, whatever made them (a failure, a lost
    // node or input, a lost output): what a restart counts from the store too.
    if (++r.attempt > 1) ++job->counts.retries;
    r.node = fleet_.nodes[node].name;
    r.site = nodes_[node].site;
    r.device_type = p.device_type;
    r.emulated = !p.allocation.devices.empty() && fleet_.nodes[node].devices.front().emulated;
    r.allocation = {p.allocation.cpu_milli, p.allocation.memory_bytes, p.allocation.devices,
                    p.allocation.device_share_milli};
    r.reason.clear();
    r.started_us = now;
    Hold(*task, node);
    task->charged_micro_usd = p.cost_micro_usd();
    task->charged_egress_micro_usd = p.egress_cost_micro_usd;
    if (p.cost_micro_usd() != 0) running_estimate_[job->rec.tenant] += p.cost_micro_usd();
    ++job->running_by_site[r.site];
    task->attempt_outcome = "running";
    task->attempt_reason.clear();
    task->attempt_exit_code = 0;
    task->attempt_ended_us = 0;
    batch.tasks.push_back(r);
    batch.attempts.push_back(LatestAttempt(*task));
    --job->counts.waiting;
    ++job->counts.running;
    if (job->rec.status == JobStatus::kQueued) {
      job->rec.status = JobStatus::kRunning;
      batch.jobs.push_back(job->rec);
    }
    // A gang member's assignment says where its gang's other members run: made once
    // the whole pass is placed.
    if (job->job->tasks[task->rec.task].gang_id >= 0) {
      gang_placed.emplace_back(job, task);
    } else {
      OutboxLocked(node).assignments.push_back(AssignmentFor(*job, *task));
    }
    // Outputs of its dependencies that travel whole in the assignment (through the
    // coordinator) are counted here, those made at other sites as bytes between the
    // sites; outputs read as objects are counted when the agent reports the fetch.
    for (TaskId d : job->job->tasks[task->rec.task].after) {
      const model::TaskRecord& dep = job->tasks[d.value()].rec;
      if (dep.site.empty() || dep.site == r.site || !model::OutputWholeInline(dep.output, dep.output_object)) continue;
      AddTraffic(*job, dep.site, r.site, static_cast<int64_t>(dep.output.size()));
    }
    nodes_with_work.insert(node);
    if (!job->job->fallback_regions.empty() &&
        !model::SiteMatchesAnyRegionRule(fleet_.site(fleet_.nodes[node].site), job->job->allowed_regions)) {
      MERIDIAN_LOG_INFO("job {} ({}): task '{}' placed on {} at {}, in its fallback regions: it waited {} for a node "
                        "of its regions",
                        job->rec.id, job->rec.name, TaskName(*job, task->rec.task), r.node, r.site,
                        FormatDurationUs(pass_end.us - task->queued_us));
    }
    Changed(*job);
  }
  for (auto [job, task] : gang_placed) OutboxLocked(task->node).assignments.push_back(AssignmentFor(*job, *task));
  // Infeasible now may only mean that nodes have not registered (again) yet: a task
  // fails for it only once the fleet has been still for the grace period.
  const MonotonicTime settled{last_fleet_change_.us + options_.reconcile_grace_us};
  for (const sched::Unplaced& u : plan.unplaced) {
    auto [job, task] = offered[u.queue_index];
    // A task whose fallback is still to come is offered again when it comes, and is
    // not failed before: its fallback regions may run it.
    std::optional<MonotonicTime> fallback_at = FallbackAtLocked(*job, *task);
    if (fallback_at && fallback_at->us <= snap.now_us) fallback_at.reset();  // it was offered with them
    if (fallback_at) RecheckAt(*fallback_at);
    if (u.kind != sched::UnplacedKind::kInfeasible) {
      job->waiting[task->rec.task] = u.reason;
      continue;
    }
    if (model::IsTerminal(job->rec.status)) continue;
    task->rec.reason = u.reason;
    if (fallback_at) {
      job->waiting[task->rec.task] = u.reason;
      continue;
    }
    if (env_.clock().Now() < settled) {
      RecheckAt(settled);
      continue;
    }
    EndJob(*job, JobStatus::kFailed,
           fmt::format("task '{}' can no longer run: {}", TaskName(*job, task->rec.task), u.reason), batch);
  }
  // Stored before any agent hears of it (Commit hands the outboxes to the streams): a
  // restart finds every assignment it sent.
  Commit(std::move(batch));
  // The window was full and something was placed: more may fit behind it.
  if (!plan.placements.empty() && offered.size() == options_.schedule_window && !ready_.empty()) dirty_ = true;
}

void Coordinator::RecheckAt(MonotonicTime at) {
  if (!recheck_at_ || at < *recheck_at_) recheck_at_ = at;
}

std::optional<MonotonicTime> Coordinator::FallbackAtLocked(const JobRt& job, const TaskRt& task) const {
  if (job.job == nullptr || job.job->fallback_regions.empty() || task.seq < 0) return std::nullopt;
  return MonotonicTime{task.queued_us + job.job->fallback_after_us};
}

const model::Job& Coordinator::FallbackJobLocked(JobRt& job) {
  if (job.fallback_job == nullptr) job.fallback_job = std::make_unique<model::Job>(model::WithFallbackRegions(*job.job));
  return *job.fallback_job;
}

void Coordinator::AddTraffic(JobRt& job, const std::string& from, const std::string& to, int64_t bytes) {
  model::JobTraffic& t = job.traffic[{from, to}];
  t.from_site = from;
  t.to_site = to;
  t.bytes += bytes;
  t.objects++;
  t.egress_micro_usd += EgressMicroUsd(from, to, bytes);
  HeadChangedLocked(job);
}

model::TaskAssignment Coordinator::AssignmentFor(const JobRt& job, const TaskRt& task) const {
  const model::Task& spec = job.job->tasks[task.rec.task];
  model::TaskAssignment a;
  a.key = {task.rec.job, task.rec.task, task.rec.attempt};
  a.job_name = job.rec.name;
  a.tenant = job.rec.tenant;
  a.task_name = spec.name;
  a.index = spec.index;
  a.kernel = spec.kernel;
  a.command = spec.command;
  a.args = spec.args;
  a.env = spec.env;
  for (TaskId d : spec.after) {
    const model::TaskRecord& dep = job.tasks[d.value()].rec;
    a.inputs.push_back(dep.output);
    model::ObjectLocation where;
    if (!model::OutputWholeInline(dep.output, dep.output_object)) {
      auto it = objects_.find(dep.output_object);
      where = it != objects_.end() ? LocationLocked(dep.output_object, it->second)
                                   : model::ObjectLocation{dep.output_object, "", 0, {}};
    } else {
      // Whole in the assignment (no id), made at the producer's site: what an emulated
      // WAN paces as crossing from there.
      where.size = static_cast<int64_t>(dep.output.size());
      where.replicas.push_back(model::ObjectReplica{0, dep.node, dep.site, ""});
    }
    where.name = TaskName(job, d.value());
    a.dep_objects.push_back(std::move(where));
  }
  // Objects it reads, with where they are now; the agent fetches them before it runs.
  for (const model::ObjectRef& in : spec.inputs) {
    auto it = objects_.find(in.object_id);
    a.input_objects.push_back(it != objects_.end() ? LocationLocked(in.object_id, it->second)
                                                   : model::ObjectLocation{in.object_id, in.name, in.size_bytes, {}});
  }
  // The checkpoint an earlier attempt left, while a node that can serve it is up (else
  // the task starts afresh).
  if (!task.checkpoint.id.empty() && HasReadableReplicaLocked(task.checkpoint.id)) {
    a.checkpoint = LocationLocked(task.checkpoint.id, objects_.at(task.checkpoint.id));
    a.checkpoint.name = "checkpoint of " + TaskName(job, task.rec.task);
  }
  // One read ticket for every object it reads: its node may fetch those and no more
  // (a day, for inputs that take long to move; a restarted coordinator signs with the
  // same key, derived from the CA's).
  std::vector<std::string> ids;
  for (const auto* list : {&a.dep_objects, &a.input_objects}) {
    for (const model::ObjectLocation& l : *list) {
      if (!l.id.empty()) ids.push_back(l.id);
    }
  }
  if (!a.checkpoint.id.empty()) ids.push_back(a.checkpoint.id);
  if (!ids.empty()) {
    const std::string ticket = ReadTicketLocked(job.rec.tenant, ids, kDayUs);
    for (auto* list : {&a.dep_objects, &a.input_objects}) {
      for (model::ObjectLocation& l : *list) {
        if (!l.id.empty()) l.ticket = ticket;
      }
    }
    if (!a.checkpoint.id.empty()) a.checkpoint.ticket = ticket;
  }
  a.device_type = task.rec.device_type;
  a.allocation = task.rec.allocation;
  a.timeout_us = spec.timeout_us;
  a.stop_grace_us = spec.stop_grace_us;
  if (spec.gang_id >= 0) a.gang = GangInfoLocked(job, spec);
  return a;
}

namespace {

}  // namespace

model::GangInfo Coordinator::GangInfoLocked(const JobRt& job, const model::Task& spec) const {
  const model::Gang& gang = job.job->gangs[static_cast<size_t>(spec.gang_id)];
  model::GangInfo g;
  g.name = gang.name;
  g.rank = spec.gang_rank;
  for (TaskId m : gang.members) {
    const model::TaskRecord& r = job.tasks[m.value()].rec;
    model::GangMember& member = g.members.emplace_back(model::GangMember{r.node, r.site, r.node});
    auto node = node_by_name_.find(r.node);
    if (node != node_by_name_.end() && !nodes_[node->second].transfer_address.empty()) {
      member.host = HostOfAddress(nodes_[node->second].transfer_address);
    }
  }
  g.master_addr = g.members.front().host;
  // Drawn for this run of the gang (rank 0's attempt), so a restarted gang listens on
  // another port than the run it replaces, which may still be letting go of its own;
  // the same for every member, and after a coordinator restart too (with the cluster's
  // CA, the ticket key is the same). The ticket key is drawn in, so clusters sharing
  // hosts draw different ports for their first jobs. Two gangs drawing one port on
  // one host: rank 0's agent finds it taken and the gang runs again.
  const model::TaskRecord& rank0 = job.tasks[gang.members.front().value()].rec;
  uint64_t cluster = 0;
  for (const char c : ticket_key_) cluster = (cluster ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  uint64_t state = cluster ^ job.rec.id ^ (static_cast<uint64_t>(spec.gang_id) << 32) ^
                   (static_cast<uint64_t>(rank0.attempt) << 48);
  const uint64_t h = SplitMix64(&state);
  g.master_port = options_.gang_port_first +
                  static_cast<int32_t>(h % static_cast<uint64_t>(std::max(1, options_.gang_port_count)));
  g.secret = security::GangSecret(ticket_key_, job.rec.id, spec.gang_id, rank0.attempt);
  switch (job.job->gang_failure) {
    case model::GangFailure::kRestart:
      g.failure = "restart";
      break;
    case model::GangFailure::kFail:
      g.failure = "fail";
      break;
    case model::GangFailure::kElastic:
      g.failure = "elastic";
      break;
  }
  return g;
}

void Coordinator::RunAgainLocked(JobRt& job, TaskRt& task, const std::string& why, store::StoreBatch& batch) {
  const int32_t gang_id = job.job->tasks[task.rec.task].gang_id;
  if (gang_id < 0) {
    Requeue(job, task, batch);
    return;
  }
  const model::Gang& gang = job.job->gangs[static_cast<size_t>(gang_id)];
  const std::string member = TaskName(job, task.rec.task);
  if (job.job->gang_failure == model::GangFailure::kFail) {
    GiveUp(job, task,
           fmt::format("stopped ({}), and its gang '{}' fails with any member (gang_failure: fail)", why, gang.name),
           batch);
    return;
  }
  // A gang runs again only whole: a member that finished cannot rejoin it.
  for (TaskId m : gang.members) {
    if (job.tasks[m.value()].rec.status != TaskStatus::kSucceeded) continue;
    GiveUp(job, task,
           fmt::format("stopped ({}) after '{}' of its gang '{}' had finished; a gang runs again only whole", why,
                       TaskName(job, m.value()), gang.name),
           batch);
    return;
  }
  // Elastic: the others go on (their collectives wait for the replacement and resume
  // from their last checkpoint with it), and only this member is placed again. Rank 0
  // is the gang's master (MASTER_PORT, the launch secret are drawn by its attempt):
  // without it the gang runs again whole.
  if (job.job->gang_failure == model::GangFailure::kElastic && gang.members.front().value() != task.rec.task) {
    Requeue(job, task, batch);
    MERIDIAN_LOG_INFO("job {}: gang '{}' goes on while '{}' is placed again: it stopped ({})", job.rec.id, gang.name,
                      member, why);
    return;
  }
  Requeue(job, task, batch);
  MERIDIAN_LOG_INFO("job {}: gang '{}' runs again: '{}' stopped ({})", job.rec.id, gang.name, member, why);
  const std::string reason = fmt::format("its gang '{}' runs again: '{}' stopped ({})", gang.name, member, why);
  for (TaskId m : gang.members) {
    TaskRt& other = job.tasks[m.value()];
    if (&other == &task || !model::IsPlaced(other.rec.status)) continue;
    // Placed before a coordinator restart and not yet adopted: not adopted now (its
    // agent is told to stop it when it registers).
    orphans_.erase({job.rec.id, m.value()});
    // Stopped on its agent (its report comes back as an earlier attempt's and is
    // ignored) and queued: not its fault, so neither a failure nor a loss is counted.
    if (other.node >= 0 && nodes_[other.node].alive) {
      OutboxLocked(other.node).cancel.push_back({other.rec.job, other.rec.task, other.rec.attempt});
    }
    Release(other);
    EndAttempt(job, other, "lost", reason, 0, batch);
    if (!other.attempt_outcome.empty()) batch.attempts.push_back(LatestAttempt(other));
    LeavePlaced(job, other);
    other.rec.reason = fmt::format("attempt {} stopped: {}", other.rec.attempt, reason);
    Requeue(job, other, batch);
  }
}

namespace {

// Appends `part`, which ends at byte `part_end` of its stream, to a tail that ends at
// `total`: what it has already is skipped (a report sent again), and a gap (output
// the agent could not report in time) starts the tail afresh, so that the tail is
// always the stream's last bytes, whole.
void AppendTail(std::string& tail, int64_t& total, std::string_view part, int64_t part_end) {
  if (part.size() > model::kMaxTaskLogTailBytes) part.remove_prefix(part.size() - model::kMaxTaskLogTailBytes);
  const int64_t part_start = part_end - static_cast<int64_t>(part.size());
  if (part_end <= total || part_start < 0) return;
  if (part_start > total) {
    tail.clear();
  } else {
    part.remove_prefix(static_cast<size_t>(total - part_start));
  }
  tail.append(part);
  total = part_end;
  model::KeepLogTail(tail);
}

}  // namespace

void Coordinator::AddLiveOutput(JobRt& job, TaskRt& task, const model::TaskUpdate& u) {
  if (!task.live || task.live->attempt != task.rec.attempt) {
    job.live_logs.insert(task.rec.task);
    task.live = std::make_unique<model::TaskLogRecord>();
    task.live->job = task.rec.job;
    task.live->task = task.rec.task;
    task.live->attempt = task.rec.attempt;
    task.live->node = task.rec.node;
  }
  AppendTail(task.live->stdout_tail, task.live->stdout_bytes, u.stdout_tail, u.stdout_bytes);
  AppendTail(task.live->stderr_tail, task.live->stderr_bytes, u.stderr_tail, u.stderr_bytes);
}

void Coordinator::EndAttempt(JobRt& job, TaskRt& task, const std::string& outcome, const std::string& reason,
                             int32_t exit_code, store::StoreBatch& batch) {
  // Ended without its agent's last report (its node died, its gang ran again, its node
  // came back without it): the output it reported so far is its log. An agent's last
  // report brings the whole log and has taken the live one already (ApplyUpdate).
  if (task.live && task.live->attempt == task.rec.attempt) batch.logs.push_back(std::move(*task.live));
  task.live.reset();
  job.live_logs.erase(task.rec.task);
  if (task.attempt_outcome.empty()) return;
  ++attempts_ended_[outcome];
  task.attempt_outcome = outcome;
  task.attempt_reason = reason;
  task.attempt_exit_code = exit_code;
  task.attempt_ended_us = WallUs();
}

model::AttemptRecord Coordinator::LatestAttempt(const TaskRt& task) {
  const model::TaskRecord& r = task.rec;
  return model::AttemptRecord{r.job, r.task, r.attempt, r.node, r.site, task.attempt_outcome, task.attempt_reason,
                              task.attempt_exit_code, r.started_us, task.attempt_ended_us};
}

void Coordinator::ReleaseCheckpointsLocked(TaskRt& task, int32_t before) {
  auto& copies = task.checkpoint_copies;
  for (auto c = copies.begin(); c != copies.end();) {
    if (c->attempt >= before) {
      ++c;
      continue;
    }
    if (c->node >= 0 && static_cast<size_t>(c->node) < nodes_.size() && nodes_[c->node].alive) {
      OutboxLocked(c->node).release_objects.push_back(c->id);
    }
    c = copies.erase(c);
  }
}

void Coordinator::KeepCheckpointLocked(JobRt& job, TaskRt& task, const model::TaskUpdate& u, int32_t node) {
  // The agent dropped this attempt's previous checkpoint when it kept this one.
  std::erase_if(task.checkpoint_copies, [&](const TaskRt::CheckpointCopy& c) {
    return c.node == node && c.attempt == static_cast<int32_t>(u.key.attempt);
  });
  task.checkpoint_copies.push_back({node, static_cast<int32_t>(u.key.attempt), u.checkpoint.id});
  if (auto o = objects_.find(u.checkpoint.id); o != objects_.end()) o->second.tenants.insert(job.rec.tenant);
  if (model::IsTerminal(job.rec.status)) {
    ReleaseCheckpointsLocked(task, std::numeric_limits<int32_t>::max());
    return;
  }
  // Only the current attempt's is given to the next one; earlier ones are done with.
  if (static_cast<int32_t>(u.key.attempt) != static_cast<int32_t>(task.rec.attempt)) return;
  task.checkpoint = u.checkpoint;
  ReleaseCheckpointsLocked(task, static_cast<int32_t>(u.key.attempt));
}

void Coordinator::ApplyUpdate(const model::TaskUpdate& u, int32_t node, store::StoreBatch& batch) {
  auto it = jobs_.find(u.key.job);
  if (it == jobs_.end() || u.key.task >= it->second.tasks.size()) return;
  JobRt& job = it->second;
  TaskRt& task = job.tasks[u.key.task];
  // Only the current attempt, on the node it was placed on, may change the task:
  // reports of earlier attempts and duplicates of this one are ignored, so a result
  // is committed once however often the agent resends it.
  const bool stale = task.rec.attempt != u.key.attempt || task.node != node;
  if (!u.checkpoint.id.empty()) KeepCheckpointLocked(job, task, u, node);
  if (stale && options_.planted_bug != CoordinatorOptions::PlantedBug::kAcceptStaleReports) return;
  if (u.kind != model::UpdateKind::kRunning) {
    for (const model::InputTransfer& t : u.transfers) AddTraffic(job, t.from_site, t.to_site, t.bytes);
    // This report's log replaces what was reported as the attempt ran.
    task.live.reset();
    job.live_logs.erase(task.rec.task);
    if (!u.stdout_tail.empty() || !u.stderr_tail.empty()) {
      model::TaskLogRecord& log = batch.logs.emplace_back(
          model::TaskLogRecord{u.key.job, u.key.task, u.key.attempt, task.rec.node, u.stdout_tail, u.stderr_tail,
                               u.stdout_bytes, u.stderr_bytes});
      // A log is a tail, and its count at least the tail, whatever an agent sends.
      for (auto [tail, bytes] : {std::pair{&log.stdout_tail, &log.stdout_bytes}, {&log.stderr_tail, &log.stderr_bytes}}) {
        *bytes = std::max<int64_t>(*bytes, static_cast<int64_t>(tail->size()));
        model::KeepLogTail(*tail);
      }
    }
  }
  if (!model::IsPlaced(task.rec.status)) {
    // Cancelled or failed with its job while the agent was finishing it.
    if (u.kind != model::UpdateKind::kRunning) {
      Release(task);
      EndAttempt(job, task, u.kind == model::UpdateKind::kSucceeded ? "succeeded" : "cancelled", u.reason, u.exit_code,
                 batch);
      batch.attempts.push_back(LatestAttempt(task));
    }
    return;
  }
  switch (u.kind) {
    case model::UpdateKind::kRunning:
      if (!u.stdout_tail.empty() || !u.stderr_tail.empty()) AddLiveOutput(job, task, u);
      if (task.rec.status == TaskStatus::kAssigned) {
        task.rec.status = TaskStatus::kRunning;
        batch.tasks.push_back(task.rec);
        Changed(job);
      }
      return;
    case model::UpdateKind::kSucceeded:
      Succeed(job, task, u, batch);
      return;
    case model::UpdateKind::kFailed:
      FailAttempt(job, task, u, batch);
      return;
    case model::UpdateKind::kCancelled:
      if (!u.lost_inputs.empty()) {
        LoseInputs(job, task, u, batch);
        return;
      }
      // The agent stopped it though the job goes on (it was told to, or is stopping).
      LoseAttempt(job, task, u.reason.empty() ? "stopped by its agent" : u.reason, batch);
      return;
  }
}

void Coordinator::Succeed(JobRt& job, TaskRt& task, const model::TaskUpdate& u, store::StoreBatch& batch) {
  Release(task);
  task.rec.status = TaskStatus::kSucceeded;
  task.rec.output = u.output;
  task.rec.output_object = u.output_object.id;
  if (auto o = objects_.find(task.rec.output_object); o != objects_.end()) o->second.tenants.insert(job.rec.tenant);
  if (task.rec.output.size() > model::kOutputPreviewBytes) task.rec.output.resize(model::kOutputPreviewBytes);
  if (!model::OutputWholeInline(task.rec.output, task.rec.output_object) && !task.dependents.empty()) {
    // Its dependents read the object from its node; the coordinator keeps a preview.
    producers_[task.rec.output_object].insert({task.rec.job, task.rec.task});
  }
  task.rec.reason.clear();
  task.rec.finished_us = WallUs();
  EndAttempt(job, task, "succeeded", "", u.exit_code, batch);
  batch.tasks.push_back(task.rec);
  batch.attempts.push_back(LatestAttempt(task));
  // A result's output is read from the store (job get, run): memory keeps only those
  // that dependents read.
  if (task.dependents.empty()) std::string().swap(task.rec.output);
  LeavePlaced(job, task);
  ++job.counts.succeeded;
  for (uint32_t d : task.dependents) {
    TaskRt& dep = job.tasks[d];
    if (--dep.deps_left == 0 && dep.rec.status == TaskStatus::kBlocked) {
      dep.rec.status = TaskStatus::kQueued;
      batch.tasks.push_back(dep.rec);
      Enqueue(dep);
    }
  }
  if (job.counts.succeeded == job.counts.tasks_total) EndJob(job, JobStatus::kSucceeded, "", batch);
  Changed(job);
}

void Coordinator::FailAttempt(JobRt& job, TaskRt& task, const model::TaskUpdate& u, store::StoreBatch& batch) {
  Release(task);
  const std::string reason = u.reason.empty() ? fmt::format("exit code {}", u.exit_code) : u.reason;
  EndAttempt(job, task, "failed", reason, u.exit_code, batch);
  batch.attempts.push_back(LatestAttempt(task));
  LeavePlaced(job, task);
  ++task.rec.failures;
  const int32_t retries = job.job->tasks[task.rec.task].retries;
  if (task.rec.failures <= retries) {
    task.rec.reason = fmt::format("attempt {} failed: {}; retrying ({} of {})", task.rec.attempt, reason,
                                  task.rec.failures, retries);
    RunAgainLocked(job, task, fmt::format("attempt {} failed: {}", task.rec.attempt, reason), batch);
    return;
  }
  task.rec.status = TaskStatus::kFailed;
  task.rec.reason = reason;
  task.rec.finished_us = WallUs();
  batch.tasks.push_back(task.rec);
  ++job.counts.failed;
  EndJob(job, JobStatus::kFailed,
         fmt::format("task '{}' failed after {} attempt{}: {}", TaskName(job, task.rec.task), task.rec.attempt,
                     task.rec.attempt == 1 ? "" : "s", reason),
         batch);
}

void Coordinator::LoseAttempt(JobRt& job, TaskRt& task, const std::string& reason, store::StoreBatch& batch) {
  // Queued again already, with its gang (another member on the same node went first).
  if (task.node < 0 && !model::IsPlaced(task.rec.status) && !model::IsTerminal(task.rec.status)) return;
  Release(task);
  EndAttempt(job, task, "lost", reason, 0, batch);
  if (!task.attempt_outcome.empty()) batch.attempts.push_back(LatestAttempt(task));
  if (!model::IsPlaced(task.rec.status)) return;
  LeavePlaced(job, task);
  ++task.rec.losses;
  if (task.rec.losses > options_.max_losses) {
    GiveUp(job, task, fmt::format("lost {} times, last: {}", task.rec.losses, reason), batch);
    return;
  }
  task.rec.reason = fmt::format("attempt {} lost: {}; running it again", task.rec.attempt, reason);
  RunAgainLocked(job, task, fmt::format("attempt {} lost: {}", task.rec.attempt, reason), batch);
}

void Coordinator::GiveUp(JobRt& job, TaskRt& task, const std::string& reason, store::StoreBatch& batch) {
  task.rec.status = TaskStatus::kFailed;
  task.rec.reason = reason;
  task.rec.finished_us = WallUs();
  batch.tasks.push_back(task.rec);
  ++job.counts.failed;
  EndJob(job, JobStatus::kFailed, fmt::format("task '{}' {}", TaskName(job, task.rec.task), reason), batch);
}

void Coordinator::LoseInputs(JobRt& job, TaskRt& task, const model::TaskUpdate& u, store::StoreBatch& batch) {
  Release(task);
  EndAttempt(job, task, "input lost", u.reason, 0, batch);
  if (!task.attempt_outcome.empty()) batch.attempts.push_back(LatestAttempt(task));
  LeavePlaced(job, task);
  std::set<std::string> lost;
  for (const model::LostInput& in : u.lost_inputs) {
    for (const std::string& name : in.damaged_nodes) {
      auto n = node_by_name_.find(name);
      if (n != node_by_name_.end()) DropReplicaLocked(n->second, in.object_id);
    }
    // Holders the agent could not reach (not found damaged): dead and not yet declared
    // so, or cut off. Not offered again for a heartbeat timeout: by then a dead one is
    // declared dead; until then the task waits, or the input is made again, instead of
    // retrying the same holder at once.
    auto o = objects_.find(in.object_id);
    if (in.damaged_nodes.empty() && o != objects_.end()) {
      const MonotonicTime until{env_.clock().Now().us + options_.heartbeat_timeout_us};
      for (int32_t n : o->second.nodes) {
        if (!Readable(n)) continue;
        nodes_[n].unreachable_until = until;
        MERIDIAN_LOG_WARN("node {} could not be reached for object {}; not offered for {}", fleet_.nodes[n].name,
                          in.object_id, FormatDurationUs(options_.heartbeat_timeout_us));
      }
      RecheckAt(until);
    }
    lost.insert(in.object_id);
  }
  if (++task.input_losses > kMaxInputLosses) {
    GiveUp(job, task, fmt::format("its inputs could not be fetched {} times, last: {}", task.input_losses, u.reason),
           batch);
    return;
  }
  task.rec.reason = fmt::format("attempt {} stopped: {}; running it again once its inputs are there",
                                task.rec.attempt, u.reason);
  RunAgainLocked(job, task, fmt::format("attempt {} could not read an input", task.rec.attempt), batch);
  // Queued first: making a lost input again puts its waiters, this one too, back to
  // waiting for it.
  RebuildLostLocked(lost, fmt::format("its output could not be read by {}", TaskName(job, task.rec.task)), batch);
}

void Coordinator::Requeue(JobRt& job, TaskRt& task, store::StoreBatch& batch) {
  // A dependency may be being made again meanwhile (its output was lost while this
  // attempt ran): then the task waits for it, and never runs without its input.
  task.deps_left = 0;
  for (TaskId d : job.job->tasks[task.rec.task].after) {
    if (job.tasks[d.value()].rec.status != TaskStatus::kSucceeded) ++task.deps_left;
  }
  task.rec.status = task.deps_left > 0 ? TaskStatus::kBlocked : TaskStatus::kQueued;
  batch.tasks.push_back(task.rec);
  ++job.counts.waiting;
  if (task.deps_left == 0) Enqueue(task);
  Changed(job);
}

void Coordinator::EndJob(JobRt& job, JobStatus status, const std::string& given_reason, store::StoreBatch& batch) {
  if (model::IsTerminal(job.rec.status)) return;
  std::string reason = given_reason;
  if (status == JobStatus::kSucceeded) {
    // Its outputs become the datasets it names, or it did not do what it said.
    if (Status defined = DefineOutputDatasetsLocked(job, batch); !defined.ok()) {
      status = JobStatus::kFailed;
      reason = defined.message();
    }
  }
  ReleaseOutputDatasetsLocked(job.rec.id);
  ForgetObjectReadersLocked(job.rec.id);
  // Outputs kept as objects for dependents are not needed any more: the node that
  // made each drops its reference (unless a dataset holds it). Results (outputs
  // nothing read) stay, as objects on their nodes, for the client to fetch.
  for (TaskRt& t : job.tasks) {
    // Checkpoints are for the job's later attempts: there are none now.
    ReleaseCheckpointsLocked(t, std::numeric_limits<int32_t>::max());
    t.checkpoint = {};
    if (t.rec.output_object.empty() || t.dependents.empty() || dataset_objects_.count(t.rec.output_object)) continue;
    auto node = node_by_name_.find(t.rec.node);
    if (node != node_by_name_.end() && nodes_[node->second].alive) {
      OutboxLocked(node->second).release_objects.push_back(t.rec.output_object);
    }
    auto p = producers_.find(t.rec.output_object);
    if (p != producers_.end()) {
      p->second.erase({t.rec.job, t.rec.task});
      if (p->second.empty()) producers_.erase(p);
    }
  }
  job.rec.status = status;
  job.rec.reason = reason;
  job.rec.finished_us = WallUs();
  batch.jobs.push_back(job.rec);
  if (status != JobStatus::kSucceeded) {
    // Everything not finished stops: queued tasks leave the queue, placed ones are
    // cancelled on their agents (their resources come back when the agent reports).
    for (TaskRt& t : job.tasks) {
      if (model::IsTerminal(t.rec.status)) continue;
      if (model::IsPlaced(t.rec.status)) {
        LeavePlaced(job, t);
        if (t.node >= 0) OutboxLocked(t.node).cancel.push_back({t.rec.job, t.rec.task, t.rec.attempt});
      } else {
        --job.counts.waiting;
        Dequeue(t);
      }
      t.rec.status = TaskStatus::kCancelled;
      if (t.rec.reason.empty()) t.rec.reason = reason;
      ++job.counts.cancelled;
      batch.tasks.push_back(t.rec);
    }
  }
  // Placed before a restart and not yet back: nothing of theirs is waited for now.
  for (auto it = orphans_.lower_bound({job.rec.id, 0}); it != orphans_.end() && it->first.first == job.rec.id;) {
    it = orphans_.erase(it);
  }
  if (job.held == 0) to_retire_.insert(job.rec.id);
  MERIDIAN_LOG_INFO("job {} ({}) {}{}", job.rec.id, job.rec.name, model::JobStatusName(status),
                    reason.empty() ? "" : ": " + reason);
  Changed(job);
}

void Coordinator::RetireFinishedLocked() {
  if (to_retire_.empty()) return;
  size_t freed = 0;
  for (uint64_t id : to_retire_) {
    auto it = jobs_.find(id);
    if (it == jobs_.end() || it->second.retired || it->second.held > 0 || !model::IsTerminal(it->second.rec.status)) {
      continue;
    }
    JobRt& job = it->second;
    freed += job.tasks.size();
    std::vector<TaskRt>().swap(job.tasks);
    job.live_logs.clear();
    job.job.reset();
    job.fallback_job.reset();
    std::string().swap(job.rec.spec_yaml);
    job.retired = true;
  }
  to_retire_.clear();
  // A large job leaves much of the heap free: give it back (the call walks the heap,
  // so not for every small job).
  if (freed >= kTrimAfterTasks) ReturnFreedMemory();
}

std::vector<uint64_t> Coordinator::ExpiredJobsLocked() const {
  std::vector<std::pair<int64_t, uint64_t>> finished;  // (finished_us, id), oldest first
  for (const auto& [id, job] : jobs_) {
    if (job.retired && !job.deleting) finished.emplace_back(job.rec.finished_us, id);
  }
  std::sort(finished.begin(), finished.end());
  const size_t keep = static_cast<size_t>(std::max(0, options_.retain_jobs));
  const size_t over = keep > 0 && finished.size() > keep ? finished.size() - keep : 0;
  const int64_t oldest_kept_us = WallUs() - options_.retain_for_us;
  std::vector<uint64_t> out;
  for (size_t i = 0; i < finished.size(); ++i) {
    if (i < over || (options_.retain_for_us > 0 && finished[i].first < oldest_kept_us)) {
      out.push_back(finished[i].second);
    }
  }
  return out;
}

void Coordinator::MarkDead(int32_t index, const std::string& reason, store::StoreBatch& batch, bool left) {
  NodeRt& node = nodes_[index];
  if (node.alive) --live_nodes_;
  node.alive = false;
  node.left = left;
  last_node_lost_ = env_.clock().Now();
  node.session = next_session_++;  // its streams and heartbeats are now stale
  node.outbox = {};
  node.stream_lost_at.reset();
  CloseSinkLocked(node, FailedPreconditionError("this node was declared dead; register again"));
  fleet_.nodes[index].health = model::NodeHealth::kUnhealthy;
  FleetChangedLocked();
  if (left) {
    MERIDIAN_LOG_INFO("{}", reason);
  } else {
    MERIDIAN_LOG_WARN("node {} is dead ({}); {} tasks run elsewhere", fleet_.nodes[index].name, reason,
                      node.tasks.size());
  }
  std::vector<std::pair<uint64_t, uint32_t>> held(node.tasks.begin(), node.tasks.end());
  for (const auto& [job_id, t] : held) {
    JobRt& job = jobs_.at(job_id);
    LoseAttempt(job, job.tasks[t], reason, batch);
  }
  // Its objects went with it: outputs still needed are made again elsewhere.
  const std::set<std::string> objects = node.objects;
  DropAllReplicasLocked(index);
  RebuildLostLocked(objects, fmt::format("its output was lost with node {}", fleet_.nodes[index].name), batch);
  dirty_ = true;
}

void Coordinator::DetectFailuresLocked() {
  const MonotonicTime now = env_.clock().Now();
  const int64_t timeout_us = HeartbeatTimeoutUs();
  store::StoreBatch batch;
  std::vector<Heard> heard;  // a copy: MarkDead below closes sinks, which heard_mu_ need not wait for
  {
    std::lock_guard<std::mutex> lock(heard_mu_);
    heard = heard_;
  }
  for (size_t i = 0; i < nodes_.size(); ++i) {
    NodeRt& n = nodes_[i];
    if (!n.alive) continue;
    // A heartbeat that arrived and waits for mu_ counts (heard_): from its arrival, and
    // while it waits, the node is not silent at all (its agent waits for the answer).
    MonotonicTime last = n.last_heartbeat;
    if (i < heard.size() && heard[i].session == n.session) {
      if (heard[i].waiting > 0) continue;
      if (last < heard[i].at) last = heard[i].at;
    }
    if (now.us - last.us > timeout_us) {
      MarkDead(static_cast<int32_t>(i),
               fmt::format("node {} sent no heartbeat for {}", fleet_.nodes[i].name, FormatDurationUs(now.us - last.us)),
               batch);
      continue;
    }
    // Its agent's connection closed (a killed process's does at once): it has the
    // configured timeout to connect again or heartbeat, however long the interval.
    if (n.sink && !n.sink->open()) {
      n.sink.reset();
      n.stream_lost_at = now;
    }
    if (n.stream_lost_at && last < *n.stream_lost_at &&
        now.us - n.stream_lost_at->us > options_.heartbeat_timeout_us) {
      MarkDead(static_cast<int32_t>(i),
               fmt::format("node {}'s connection closed {} ago and it did not come back", fleet_.nodes[i].name,
                           FormatDurationUs(now.us - n.stream_lost_at->us)),
               batch);
    }
  }
  for (auto it = orphans_.begin(); it != orphans_.end();) {
    if (now < it->second.deadline) {
      ++it;
      continue;
    }
    JobRt& job = jobs_.at(it->first.first);
    TaskRt& task = job.tasks[it->first.second];
    std::string node = it->second.node;
    it = orphans_.erase(it);
    LoseAttempt(job, task, fmt::format("node {} did not come back after the coordinator restarted", node), batch);
  }
  // Tasks waiting for inputs no live node holds, once the fleet has been still for the
  // grace period (nodes that will register again have): a dependency's output is made
  // again by its producer; an input put in the cluster (an object, a dataset's shard)
  // cannot be, and its task fails saying which, but only a grace period after the last
  // node was lost too (its holder's, which it may register again from).
  if (!awaiting_inputs_.empty() && now.us > last_fleet_change_.us + options_.reconcile_grace_us) {
    const bool holders_had_their_grace = now.us > last_node_lost_.us + options_.reconcile_grace_us;
    std::set<std::string> lost;
    for (const auto& [job_id, t] : awaiting_inputs_) {
      auto it = jobs_.find(job_id);
      if (it == jobs_.end() || model::IsTerminal(it->second.rec.status)) continue;
      TaskRt& task = it->second.tasks[t];
      const std::vector<model::ObjectRef>& inputs = it->second.job->tasks[t].inputs;
      auto gone = std::find_if(inputs.begin(), inputs.end(), [&](const model::ObjectRef& in) {
        return !in.object_id.empty() && !HasLiveReplicaLocked(in.object_id);
      });
      if (gone != inputs.end() && task.seq >= 0 && holders_had_their_grace) {
        --it->second.counts.waiting;
        Dequeue(task);
        GiveUp(it->second, task,
               fmt::format("could not run: its input {} ({}) was lost: no node that held it came back", gone->name,
                           gone->object_id),
               batch);
        continue;
      }
      for (TaskId d : it->second.job->tasks[t].after) {
        const model::TaskRecord& dep = it->second.tasks[d.value()].rec;
        if (!model::OutputWholeInline(dep.output, dep.output_object) && !HasReadableReplicaLocked(dep.output_object)) {
          lost.insert(dep.output_object);
        }
      }
    }
    awaiting_inputs_.clear();
    RebuildLostLocked(lost, "its output was lost: no node holding it came back", batch);
  }
  Commit(std::move(batch));
}

std::vector<model::ObjectRef> Coordinator::InputsForScheduling(const JobRt& job, const TaskRt& task) const {
  const model::Task& spec = job.job->tasks[task.rec.task];
  std::vector<model::ObjectRef> inputs = spec.inputs;
  // Dependencies' outputs sit where they ran: a merge goes where its inputs are.
  for (TaskId d : spec.after) {
    const model::TaskRecord& dep = job.tasks[d.value()].rec;
    std::optional<SiteId> site = fleet_.FindSite(dep.site);
    if (!site) continue;
    model::ObjectRef ref;
    ref.name = TaskName(job, d.value());
    ref.size_bytes = static_cast<int64_t>(dep.output.size());
    if (auto it = objects_.find(dep.output_object); !dep.output_object.empty() && it != objects_.end()) {
      ref.size_bytes = it->second.size;
    }
    ref.locations.push_back(*site);
    ref.residency = job.job->tasks[d.value()].output_residency;  // derived data stays where its sources may be
    if (!model::OutputWholeInline(dep.output, dep.output_object)) ref.object_id = dep.output_object;
    inputs.push_back(std::move(ref));
  }
  return inputs;
}

bool Coordinator::HasLiveReplicaLocked(const std::string& id) const {
  auto it = objects_.find(id);
  if (it == objects_.end()) return false;
  for (int32_t n : it->second.nodes) {
    if (nodes_[n].alive) return true;
  }
  return false;
}

bool Coordinator::Readable(int32_t node) const {
  return nodes_[node].alive && env_.clock().Now() >= nodes_[node].unreachable_until;
}

bool Coordinator::HasReadableReplicaLocked(const std::string& id) const {
  auto it = objects_.find(id);
  if (it == objects_.end()) return false;
  return std::any_of(it->second.nodes.begin(), it->second.nodes.end(), [&](int32_t n) { return Readable(n); });
}

bool Coordinator::DepOutputsAvailableLocked(const JobRt& job, const TaskRt& task) const {
  // An input no node can be read from now waits: its holder is unreachable for a while,
  // or was declared dead and may register again with it (a node falsely declared dead
  // under load does, within a second). Placed anyway, the task would fail its fetch at
  // once, as often as it may retry. Once the fleet has been still for the grace period,
  // an input no live node holds is lost, and the task fails (DetectFailuresLocked).
  for (const model::ObjectRef& in : job.job->tasks[task.rec.task].inputs) {
    if (!in.object_id.empty() && !HasReadableReplicaLocked(in.object_id)) return false;
  }
  for (TaskId d : job.job->tasks[task.rec.task].after) {
    const model::TaskRecord& dep = job.tasks[d.value()].rec;
    if (dep.status != TaskStatus::kSucceeded) {
      // Not reached when the counts are right; if they are not, waiting beats running
      // on an output that is not there.
      MERIDIAN_LOG_WARN("job {}: {} was ready before {} was done; it waits", job.rec.id, TaskName(job, task.rec.task),
                        TaskName(job, d.value()));
      return false;
    }
    if (!model::OutputWholeInline(dep.output, dep.output_object) && !HasReadableReplicaLocked(dep.output_object)) {
      return false;
    }
  }
  return true;
}

void Coordinator::RebuildLostLocked(const std::set<std::string>& ids, const std::string& reason,
                                    store::StoreBatch& batch) {
  for (const std::string& id : ids) {
    if (HasReadableReplicaLocked(id)) continue;
    auto p = producers_.find(id);
    if (p == producers_.end()) continue;
    const std::set<std::pair<uint64_t, uint32_t>> tasks = p->second;
    for (const auto& [job_id, t] : tasks) {
      auto it = jobs_.find(job_id);
      if (it != jobs_.end() && !model::IsTerminal(it->second.rec.status)) RebuildLocked(it->second, t, reason, batch);
    }
  }
  dirty_ = true;
}

void Coordinator::RebuildLocked(JobRt& job, uint32_t t, const std::string& reason, store::StoreBatch& batch) {
  TaskRt& task = job.tasks[t];
  if (task.rec.status != TaskStatus::kSucceeded) return;  // not done, or being made again already
  const bool needed = std::any_of(task.dependents.begin(), task.dependents.end(), [&](uint32_t d) {
    return job.tasks[d].rec.status != TaskStatus::kSucceeded;
  });
  if (!needed) return;
  MERIDIAN_LOG_WARN("job {}: running {} again: {}", job.rec.id, TaskName(job, t), reason);
  auto p = producers_.find(task.rec.output_object);
  if (p != producers_.end()) {
    p->second.erase({job.rec.id, t});
    if (p->second.empty()) producers_.erase(p);
  }
  if (!task.attempt_outcome.empty()) {
    task.attempt_outcome = "output lost";
    task.attempt_reason = reason;
    batch.attempts.push_back(LatestAttempt(task));
  }
  task.rec.output.clear();
  task.rec.output_object.clear();
  task.rec.reason = reason;
  task.rec.status = TaskStatus::kBlocked;  // not done: its inputs count as needed below
  --job.counts.succeeded;
  ++job.counts.waiting;
  // Its own inputs first: dependencies still being made, or whose outputs are lost too.
  for (TaskId d : job.job->tasks[t].after) {
    TaskRt& dep = job.tasks[d.value()];
    if (dep.rec.status == TaskStatus::kSucceeded && !model::OutputWholeInline(dep.rec.output, dep.rec.output_object) &&
        !HasReadableReplicaLocked(dep.rec.output_object)) {
      RebuildLocked(job, d.value(), reason, batch);
    }
  }
  // Counted afterwards: the rebuilds above count this task among their waiters too.
  task.deps_left = 0;
  for (TaskId d : job.job->tasks[t].after) {
    if (job.tasks[d.value()].rec.status != TaskStatus::kSucceeded) ++task.deps_left;
  }
  task.rec.status = task.deps_left > 0 ? TaskStatus::kBlocked : TaskStatus::kQueued;
  if (task.rec.status == TaskStatus::kQueued) Enqueue(task);
  batch.tasks.push_back(task.rec);
  // Whoever waits for it waits again.
  for (uint32_t d : task.dependents) {
    TaskRt& w = job.tasks[d];
    if (w.rec.status == TaskStatus::kQueued) {
      Dequeue(w);
      w.rec.status = TaskStatus::kBlocked;
      w.deps_left = 1;
      batch.tasks.push_back(w.rec);
    } else if (w.rec.status == TaskStatus::kBlocked) {
      ++w.deps_left;
    }
  }
  Changed(job);
}

}  // namespace meridian::coordinator
