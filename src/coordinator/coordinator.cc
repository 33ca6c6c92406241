#include "coordinator/coordinator.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/logging.h"
#include "common/net.h"
#include "common/units.h"
#include "sched/forecast.h"
#include "security/ticket.h"
#include "spec/job_spec.h"
#include "spec/service_spec.h"

namespace meridian::coordinator {

using model::JobStatus;
using model::TaskStatus;

namespace {

model::Fleet SitesOnly(const model::Fleet& fleet) {
  model::Fleet out;
  out.sites = fleet.sites;
  out.links = fleet.links;
  out.tenants = fleet.tenants;
  return out;
}

// The most tasks a dry run on the coordinator expands (it runs on an RPC thread).
constexpr int64_t kMaxPlanTasks = 100'000;

// How often the loop looks for finished jobs the retention policy lets go.
constexpr int64_t kRetentionCheckUs = 1'000'000;

std::string JoinNames(const std::set<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

}  // namespace

Coordinator::Coordinator(CoordinatorOptions options, std::unique_ptr<store::StateStore> store, Env& env)
    : options_(std::move(options)),
      store_(std::move(store)),
      env_(env),
      policy_(sched::Policy::Meridian(options_.order)),
      fleet_(SitesOnly(options_.fleet)),
      ledger_(fleet_),
      next_session_(static_cast<uint64_t>(env.clock().WallNow().us)),
      rng_(options_.seed) {}

StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(CoordinatorOptions options,
                                                           std::unique_ptr<store::StateStore> store, Env& env) {
  std::unique_ptr<Coordinator> c(new Coordinator(std::move(options), std::move(store), env));
  c->last_fleet_change_ = c->next_check_ = c->next_retention_ = env.clock().Now();
  if (!c->options_.ca.key_pem.empty()) {
    // From the CA's key: the same after a restart, so tickets given out before it
    // (in assignments agents still run) stay good.
    c->ticket_key_ = security::TicketKeyFrom(c->options_.ca.key_pem);
  } else {
    MERIDIAN_ASSIGN_OR_RETURN(c->ticket_key_, security::NewTicketKey());
  }
  MERIDIAN_RETURN_IF_ERROR(c->LoadState());
  if (c->options_.run_loop) c->loop_ = std::thread([raw = c.get()] { raw->Loop(); });
  return c;
}

Coordinator::~Coordinator() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    for (NodeRt& n : nodes_) CloseSinkLocked(n, UnavailableError("the coordinator is shutting down"));
    for (auto& [id, job] : jobs_) {
      for (const std::shared_ptr<rpc::JobWatchSink>& w : job.watchers) {
        w->Close(UnavailableError("the coordinator is shutting down"));
      }
      job.watchers.clear();
    }
  }
  {
    std::lock_guard<std::mutex> heads(heads_mu_);
    heads_closed_ = true;
  }
  loop_cv_.notify_all();
  outbox_cv_.notify_all();
  heads_cv_.notify_all();
  if (loop_.joinable()) loop_.join();
}

Status Coordinator::LoadState() {
  MERIDIAN_ASSIGN_OR_RETURN(store::LoadedState state, store_->Load());
  std::lock_guard lock(mu_);
  next_job_id_ = state.next_job_id;
  for (model::JobRecord& rec : state.jobs) {
    next_job_id_ = std::max(next_job_id_, rec.id + 1);
    JobRt& job = jobs_[rec.id];
    job.rec = std::move(rec);
    if (model::IsTerminal(job.rec.status)) {
      // Finished before the restart: its record and counts; the tasks stay in the store.
      job.counts = state.finished_counts[job.rec.id];
      job.counts.version = next_version_++;
      job.rec.spec_yaml.clear();
      job.retired = true;
    }
  }
  for (model::TaskRecord& t : state.tasks) {
    auto it = jobs_.find(t.job);
    if (it == jobs_.end()) continue;
    std::vector<TaskRt>& tasks = it->second.tasks;
    if (tasks.size() <= t.task) tasks.resize(t.task + 1);
    tasks[t.task].rec = std::move(t);
  }
  LoadNames(state.names);
  spend_day_ = WallUs() / kDayUs;
  for (const model::TenantSpend& t : state.spend) {
    if (t.day == spend_day_) spent_today_[t.tenant] = t.micro_usd;
  }
  {
    std::lock_guard<std::mutex> auth_lock(auth_mu_);
    for (model::TokenRecord& t : state.tokens) tokens_[t.id] = std::move(t);
  }
  for (model::AttemptRecord& a : state.attempts) {
    auto it = jobs_.find(a.job);
    if (it == jobs_.end() || a.task >= it->second.tasks.size()) continue;
    TaskRt& t = it->second.tasks[a.task];
    if (a.attempt != t.rec.attempt) continue;  // earlier ones stay in the store only
    t.attempt_outcome = std::move(a.outcome);
    t.attempt_reason = std::move(a.reason);
    t.attempt_exit_code = a.exit_code;
    t.attempt_ended_us = a.ended_us;
  }
  const MonotonicTime grace{env_.clock().Now().us + options_.reconcile_grace_us};
  store::StoreBatch fixes;
  for (auto& [id, job] : jobs_) {
    if (job.retired) continue;
    StatusOr<model::Job> parsed = spec::ParseJob(job.rec.spec_yaml, job.rec.spec_name, fleet_, options_.throughput,
                                                 DatasetResolverLocked(""), 0, AcceptedObjectResolverLocked());
    if (!parsed.ok() || parsed->tasks.size() != job.tasks.size()) {
      if (!model::IsTerminal(job.rec.status)) {
        EndJob(job, JobStatus::kFailed,
               "its spec no longer matches the coordinator's fleet after a restart: " +
                   (parsed.ok() ? std::string("task count changed") : parsed.status().message()),
               fixes);
      }
      continue;
    }
    job.job = std::make_unique<model::Job>(std::move(*parsed));
    job.input_bytes = InputBytesBySite(*job.job);
    if (!model::IsTerminal(job.rec.status)) {
      ReserveOutputDatasetsLocked(id, *job.job);
      NoteObjectReadersLocked(id, *job.job);
    }
    for (size_t i = 0; i < job.tasks.size(); ++i) {
      for (TaskId d : job.job->tasks[i].after) job.tasks[d.value()].dependents.push_back(static_cast<uint32_t>(i));
    }
    for (size_t i = 0; i < job.tasks.size(); ++i) {
      TaskRt& t = job.tasks[i];
      model::CountTasks(job.counts, t.rec.status, 1);
      job.counts.retries += std::max(0, t.rec.attempt - 1);
      for (TaskId d : job.job->tasks[i].after) {
        if (job.tasks[d.value()].rec.status != TaskStatus::kSucceeded) ++t.deps_left;
      }
      switch (t.rec.status) {
        case TaskStatus::kSucceeded:
          if (t.dependents.empty()) std::string().swap(t.rec.output);  // read from the store
          // Lineage across the restart: who makes the outputs still to be read.
          if (!model::OutputWholeInline(t.rec.output, t.rec.output_object) && !t.dependents.empty()) {
            producers_[t.rec.output_object].insert({id, static_cast<uint32_t>(i)});
          }
          break;
        case TaskStatus::kQueued: {
          Enqueue(t);
          // It has waited since before the restart: since its last attempt ended, or
          // since it could first run (its job's submission, its inputs' making). Its
          // fallback comes when it would have come without the restart.
          int64_t since = t.rec.attempt > 0 ? t.attempt_ended_us : 0;
          if (since == 0) {
            since = job.rec.submitted_us;
            for (TaskId d : job.job->tasks[i].after) since = std::max(since, job.tasks[d.value()].rec.finished_us);
          }
          if (since > 0) t.queued_us -= std::max<int64_t>(WallUs() - since, 0);
          break;
        }
        case TaskStatus::kAssigned:
        case TaskStatus::kRunning:
          // Placed before the restart: wait for its agent to say whether it still runs.
          ++job.running_by_site[t.rec.site];
          orphans_[{id, static_cast<uint32_t>(i)}] = Orphan{t.rec.node, grace};
          break;
        case TaskStatus::kFailed:
        case TaskStatus::kCancelled:
        case TaskStatus::kBlocked:
          break;
      }
    }
    job.counts.version = next_version_++;
  }
  for (auto& [id, job] : jobs_) HeadChangedLocked(job);  // every job's first head
  Commit(std::move(fixes));
  RetireFinishedLocked();
  if (!jobs_.empty()) {
    MERIDIAN_LOG_INFO("loaded {} jobs; {} tasks were placed before the restart and wait for their agents",
                      jobs_.size(), orphans_.size());
  }
  return OkStatus();
}

void Coordinator::Commit(store::StoreBatch&& batch) {
  if (!new_jobs_.empty()) {
    batch.new_jobs.insert(batch.new_jobs.begin(), std::make_move_iterator(new_jobs_.begin()),
                          std::make_move_iterator(new_jobs_.end()));
    new_jobs_.clear();
  }
  for (model::TenantSpend& row : spend_rows_) batch.spend.push_back(std::move(row));
  spend_rows_.clear();
  for (const std::string& tenant : spend_unsaved_) {
    batch.spend.push_back(model::TenantSpend{tenant, spend_day_, spent_today_[tenant]});
  }
  spend_unsaved_.clear();
  PendingCommit entry;
  entry.batch = std::move(batch);
  TakeOutboxesLocked(entry);
  TakeWatchersLocked(entry);
  EnqueueLocked(std::move(entry));
}

void Coordinator::FlushOutboxesLocked() {
  PendingCommit entry;
  TakeOutboxesLocked(entry);
  EnqueueLocked(std::move(entry));
}

void Coordinator::FlushWatchersLocked() {
  PendingCommit entry;
  TakeWatchersLocked(entry);
  EnqueueLocked(std::move(entry));
}

size_t Coordinator::CommitsQueued() {
  std::lock_guard<std::mutex> lock(queue_mu_);
  return queue_.size();
}

void Coordinator::EnqueueLocked(PendingCommit entry) {
  if (!head_dirty_.empty()) TakeHeadsLocked(entry);
  if (entry.batch.empty() && entry.outboxes.empty() && entry.watches.empty() && entry.heads.empty()) return;
  std::lock_guard<std::mutex> lock(queue_mu_);
  // Made under queue_mu_ with its entry: whoever reads this seq finds the entry queued
  // or taken by a committer.
  entry.seq = queued_seq_.load(std::memory_order_relaxed) + 1;
  queue_.push_back(std::move(entry));
  queued_seq_.store(queue_.back().seq, std::memory_order_release);
}

void Coordinator::EndSectionLocked() {
  if (!head_dirty_.empty()) EnqueueLocked(PendingCommit{});
}

namespace {

// `from`'s items moved into `to` at `at`.
template <typename T>
void MoveInto(std::vector<T>& to, typename std::vector<T>::iterator at, std::vector<T>& from) {
  to.insert(at, std::make_move_iterator(from.begin()), std::make_move_iterator(from.end()));
}

// `from` appended to `to`, kind by kind. Stored as one, they leave the store as they
// would one after the other: every kind is written by key (the latest write of a key
// wins, and later batches come later), new jobs first (the rest may place their tasks).
void AppendBatch(store::StoreBatch& to, store::StoreBatch& from) {
  MoveInto(to.new_jobs, to.new_jobs.end(), from.new_jobs);
  MoveInto(to.jobs, to.jobs.end(), from.jobs);
  MoveInto(to.tasks, to.tasks.end(), from.tasks);
  MoveInto(to.attempts, to.attempts.end(), from.attempts);
  MoveInto(to.logs, to.logs.end(), from.logs);
  MoveInto(to.names, to.names.end(), from.names);
  MoveInto(to.tokens, to.tokens.end(), from.tokens);
  MoveInto(to.spend, to.spend.end(), from.spend);
}

}  // namespace

void Coordinator::AwaitStored(uint64_t seq) {
  if (stored_seq_.load(std::memory_order_acquire) >= seq) return;
  std::lock_guard<std::mutex> committer(commit_mu_);
  while (stored_seq_.load(std::memory_order_relaxed) < seq) {
    std::vector<PendingCommit> entries;
    {
      std::lock_guard<std::mutex> lock(queue_mu_);
      entries.swap(queue_);
    }
    MERIDIAN_CHECK_MSG(!entries.empty() && entries.back().seq >= seq, "commit queue lost an entry");
    store::StoreBatch all;
    size_t stored = 0;
    for (PendingCommit& e : entries) {
      if (e.batch.empty()) continue;
      ++stored;
      if (stored == 1) {
        all = std::move(e.batch);
      } else {
        AppendBatch(all, e.batch);
      }
    }
    if (!all.empty()) {
      const MonotonicTime start = env_.clock().Now();
      Status s = store_->Apply(all);
      commit_latency_.ObserveUs(env_.clock().Now().us - start.us);
      // Nothing is acknowledged that is not stored; a store that cannot write stops the
      // coordinator rather than let memory and disk disagree. Restarting reloads the store.
      MERIDIAN_CHECK_MSG(s.ok(), "state store write failed, stopping: " + s.ToString());
      commit_transactions_.fetch_add(1, std::memory_order_relaxed);
      commit_entries_.fetch_add(stored, std::memory_order_relaxed);
    }
    // An outbox that goes back to a newer stream is queued again: this call sees it out.
    seq = std::max(seq, RunEffects(entries));
    stored_seq_.store(entries.back().seq, std::memory_order_release);
  }
}

uint64_t Coordinator::RunEffects(std::vector<PendingCommit>& entries) {
  // Heads first: a client that hears of a change (a watch, or an agent's task) and
  // then reads the job sees it.
  bool published = false;
  {
    std::lock_guard<std::mutex> lock(heads_mu_);
    for (PendingCommit& e : entries) {
      for (auto& [id, head] : e.heads) {
        published = true;
        if (head) {
          heads_[id] = std::move(head);
        } else {
          heads_.erase(id);
        }
      }
    }
  }
  if (published) heads_cv_.notify_all();
  std::vector<OutboxPush*> back;  // outboxes whose stream ended before they went
  for (PendingCommit& e : entries) {
    for (OutboxPush& o : e.outboxes) {
      if (!o.sink->Push(o.batch)) back.push_back(&o);
    }
    for (WatchPush& w : e.watches) {
      for (const std::shared_ptr<rpc::JobWatchSink>& sink : w.sinks) {
        model::JobSummary copy = w.summary;  // a sink takes what it is pushed
        if (sink->Push(copy) && w.close) sink->Close(OkStatus());
      }
    }
  }
  if (back.empty()) return 0;
  // Under the raw lock: what is given back is stored already, nothing to wait for.
  std::lock_guard<std::mutex> lock(mu_.raw());
  for (OutboxPush* o : back) {
    if (o->node >= static_cast<int32_t>(nodes_.size())) continue;
    NodeRt& n = nodes_[o->node];
    if (n.session != o->session) continue;  // registered again since: it starts afresh
    if (n.sink == o->sink) n.sink.reset();
    // Before what was made since: in the order it was made.
    model::AssignmentBatch& out = n.outbox;
    MoveInto(out.assignments, out.assignments.begin(), o->batch.assignments);
    MoveInto(out.cancel, out.cancel.begin(), o->batch.cancel);
    MoveInto(out.release_objects, out.release_objects.begin(), o->batch.release_objects);
    OutboxLocked(o->node);
  }
  // To a newer stream that connected meanwhile; with none, it waits (and blocking
  // waiters are woken).
  FlushOutboxesLocked();
  EndSectionLocked();
  return queued_seq_.load(std::memory_order_acquire);
}

void Coordinator::TakeWatchersLocked(PendingCommit& entry) {
  for (uint64_t id : watch_dirty_) {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) continue;
    JobRt& job = it->second;
    job.watch_dirty = false;
    std::erase_if(job.watchers, [](const std::shared_ptr<rpc::JobWatchSink>& w) { return !w->open(); });
    if (job.watchers.empty()) continue;
    WatchPush& w = entry.watches.emplace_back();
    w.summary = SummaryOf(job);
    w.close = model::IsTerminal(job.rec.status);
    if (w.close) {
      w.sinks = std::move(job.watchers);
      job.watchers.clear();
    } else {
      w.sinks = job.watchers;
    }
  }
  watch_dirty_.clear();
}

model::AssignmentBatch& Coordinator::OutboxLocked(int32_t node) {
  NodeRt& n = nodes_[node];
  if (!n.outbox_dirty) {
    n.outbox_dirty = true;
    outbox_dirty_.push_back(node);
  }
  return n.outbox;
}

void Coordinator::TakeOutboxesLocked(PendingCommit& entry) {
  if (outbox_dirty_.empty()) return;
  bool waiters = false;
  for (int32_t i : outbox_dirty_) {
    NodeRt& n = nodes_[i];
    n.outbox_dirty = false;
    if (n.outbox.assignments.empty() && n.outbox.cancel.empty() && n.outbox.release_objects.empty()) continue;
    // A stream that ended keeps nothing: the outbox waits for the next one (and what
    // it never got is sent again: see Heartbeat). A blocking NextAssignments takes it.
    if (n.sink && !n.sink->open()) n.sink.reset();
    if (!n.sink) {
      waiters = true;
      continue;
    }
    OutboxPush& o = entry.outboxes.emplace_back();
    o.sink = n.sink;
    o.node = i;
    o.session = n.session;
    o.batch = std::move(n.outbox);
    n.outbox = {};
  }
  outbox_dirty_.clear();
  if (waiters) outbox_cv_.notify_all();
}

void Coordinator::CloseSinkLocked(NodeRt& node, const Status& why) {
  if (!node.sink) return;
  node.sink->Close(why);
  node.sink.reset();
}

int64_t Coordinator::HeartbeatIntervalUs() {
  return std::max(options_.heartbeat_interval_us,
                  static_cast<int64_t>(live_nodes_.load()) * 1'000'000 / kIdleHeartbeatsPerSecond);
}

int64_t Coordinator::HeartbeatTimeoutUs() {
  return std::max(options_.heartbeat_timeout_us, 3 * HeartbeatIntervalUs());
}

void Coordinator::Loop() {
  AwaitAtExit stored{*this};
  std::unique_lock<std::mutex> lock(mu_.raw());
  while (!stopping_) {
    TurnLocked(lock);
    EndSectionLocked();
    if (stopping_) break;
    // What this turn placed goes out before the loop sleeps.
    lock.unlock();
    AwaitQueued();
    lock.lock();
    loop_cv_.wait_for(lock, std::chrono::microseconds(HeartbeatIntervalUs() / 2),
                      [this] { return stopping_ || dirty_; });
  }
}

void Coordinator::Turn() {
  MERIDIAN_CHECK_MSG(!options_.run_loop, "Turn is for a coordinator without its own loop");
  AwaitAtExit stored{*this};
  std::unique_lock<std::mutex> lock(mu_.raw());
  if (!stopping_) TurnLocked(lock);
  EndSectionLocked();
}

void Coordinator::TurnLocked(std::unique_lock<std::mutex>& lock) {
  if (env_.clock().Now() >= next_check_) {
    DetectFailuresLocked();
    next_check_ = MonotonicTime{env_.clock().Now().us + HeartbeatIntervalUs() / 2};
  }
  if (recheck_at_ && env_.clock().Now() >= *recheck_at_) {
    recheck_at_.reset();
    dirty_ = true;
  }
  if (dirty_) ScheduleLocked();
  RetireFinishedLocked();
  if (env_.clock().Now() >= next_retention_) {
    next_retention_ = MonotonicTime{env_.clock().Now().us + kRetentionCheckUs};
    std::vector<uint64_t> expired = ExpiredJobsLocked();
    if (!expired.empty()) {
      EndSectionLocked();
      lock.unlock();
      for (uint64_t id : expired) {
        StatusOr<model::JobSummary> gone = DeleteJob(id);
        if (!gone.ok()) MERIDIAN_LOG_WARN("retention: {}", gone.status().ToString());
      }
      lock.lock();
    }
  }
}

// ------------------------------------------------------------------ jobs

StatusOr<rpc::SubmitResult> Coordinator::Submit(const std::string& spec_yaml, const std::string& spec_name,
                                                const std::string& tenant) {
  MERIDIAN_ASSIGN_OR_RETURN(std::optional<rpc::SubmitResult> r, SubmitSmall(spec_yaml, spec_name, tenant, 0));
  return std::move(*r);
}

StatusOr<std::optional<rpc::SubmitResult>> Coordinator::SubmitSmall(const std::string& spec_yaml,
                                                                   const std::string& spec_name,
                                                                   const std::string& tenant, int64_t max_tasks) {
  model::Fleet sites;
  {
    std::lock_guard<std::mutex> lock(mu_.raw());  // the sites are not stored: nothing to wait for
    sites = SitesOnly(fleet_);
  }
  // A job reads its tenant's datasets only (an admin's, any). Datasets never change
  // once defined, so looking each up as the parser meets it is a consistent view.
  StatusOr<model::Job> parsed =
      spec::ParseJob(spec_yaml, spec_name, sites, options_.throughput, DatasetResolverFor(tenant), max_tasks,
                     ObjectResolverFor(tenant));
  if (max_tasks > 0 && parsed.status().code() == StatusCode::kOutOfRange) return std::optional<rpc::SubmitResult>();
  MERIDIAN_ASSIGN_OR_RETURN(model::Job job, std::move(parsed));
  if (!tenant.empty()) {
    // The credential says whose job it is; a spec cannot charge it to someone else.
    if (job.tenant != tenant && job.tenant != model::Job{}.tenant) {
      return PermissionDeniedError(fmt::format(
          "{}: the job names tenant '{}', but your credential is of tenant '{}'; a job's tenant comes from the "
          "credential (remove 'tenant:')",
          spec_name, job.tenant, tenant));
    }
    job.tenant = tenant;
  }
  model::JobRecord rec;
  rec.name = job.name;
  rec.tenant = job.tenant;
  rec.spec_yaml = spec_yaml;
  rec.spec_name = spec_name;
  rec.status = JobStatus::kQueued;
  rec.submitted_us = WallUs();
  std::vector<store::NewTask> tasks(job.tasks.size());
  for (size_t i = 0; i < tasks.size(); ++i) {
    tasks[i].name = job.tasks[i].name;
    tasks[i].result = true;
    tasks[i].status = job.tasks[i].after.empty() ? TaskStatus::kQueued : TaskStatus::kBlocked;
  }
  for (const model::Task& t : job.tasks) {
    for (TaskId d : t.after) tasks[d.value()].result = false;
  }
  rpc::SubmitResult result{0, job.name, static_cast<int32_t>(job.tasks.size()), job.warnings};
  // Durable first; only then does the job exist for anyone. A small job is queued
  // to be stored in the same transaction as its first placements (nobody sees it
  // before: StateMutex); a large one (its rows take long to write) is stored before,
  // outside the lock.
  const bool small = tasks.size() <= kStoredWithPlacementsTasks;
  {
    std::unique_lock lock(mu_);
    MERIDIAN_RETURN_IF_ERROR(CheckFeasibleLocked(job));
    MERIDIAN_RETURN_IF_ERROR(CheckOutputDatasetsLocked(job, spec_name));
    MERIDIAN_RETURN_IF_ERROR(CheckServiceNameLocked(job));
    rec.id = result.job_id = next_job_id_++;
    if (!small) {
      lock.unlock();
      MERIDIAN_RETURN_IF_ERROR(store_->CreateJob(rec, tasks).status());
      std::vector<store::NewTask>().swap(tasks);  // a large job's names: not held twice
      lock.lock();
    } else {
      new_jobs_.push_back(store::NewJob{rec, std::move(tasks)});
    }
    InstallJobLocked(std::move(rec), std::move(job));
    ++jobs_submitted_;
    if (small && options_.planted_bug == CoordinatorOptions::PlantedBug::kAckBeforeCommit) {
      dirty_ = true;  // the loop's next commit stores it: acknowledged before stored
      lock.unlock();
      loop_cv_.notify_one();
      return std::optional<rpc::SubmitResult>(std::move(result));
    }
    // Place at once rather than wake the loop: a thread hop less per job.
    ScheduleLocked();
    if (!new_jobs_.empty()) Commit({});  // nothing placed: stored alone
    FlushWatchersLocked();
  }
  loop_cv_.notify_one();
  return std::optional<rpc::SubmitResult>(std::move(result));
}

StatusOr<model::PlanReport> Coordinator::Plan(const std::string& spec_yaml, const std::string& spec_name,
                                              const std::string& tenant, const std::string& order_name,
                                              uint64_t seed) {
  std::optional<sched::QueueOrder> order = order_name.empty() ? options_.order : sched::ParseQueueOrder(order_name);
  if (!order) return InvalidArgumentError(fmt::format("order: expected fifo, priority or fair, got '{}'", order_name));
  model::Fleet fleet;
  {
    std::lock_guard lock(mu_);
    fleet = SitesOnly(fleet_);
    // The nodes alive now, numbered afresh; what they run is not counted (the dry run
    // starts from an idle fleet, as `plan --fleet` does).
    for (size_t i = 0; i < fleet_.nodes.size(); ++i) {
      if (!nodes_[i].alive) continue;
      model::Node& n = fleet.nodes.emplace_back(fleet_.nodes[i]);
      n.id = NodeId(static_cast<uint32_t>(fleet.nodes.size() - 1));
    }
  }
  MERIDIAN_ASSIGN_OR_RETURN(
      model::Job job, spec::ParseJob(spec_yaml, spec_name, SitesOnly(fleet), options_.throughput,
                                     DatasetResolverFor(tenant), kMaxPlanTasks, ObjectResolverFor(tenant)));
  const sched::Forecast f =
      sched::ForecastJob(fleet, options_.throughput, job, sched::Policy::Meridian(*order), seed);
  return sched::Describe(fleet, job, f);
}

void Coordinator::InstallJobLocked(model::JobRecord rec, model::Job job) {
  const uint64_t id = rec.id;
  ReserveOutputDatasetsLocked(id, job);
  NoteObjectReadersLocked(id, job);
  const size_t n = job.tasks.size();
  JobRt& rt = jobs_[id];
  rt.rec = std::move(rec);
  rt.job = std::make_unique<model::Job>(std::move(job));
  rt.input_bytes = InputBytesBySite(*rt.job);
  rt.tasks.resize(n);
  rt.counts.tasks_total = static_cast<int32_t>(n);
  rt.counts.waiting = rt.counts.tasks_total;
  for (size_t i = 0; i < n; ++i) {
    TaskRt& t = rt.tasks[i];
    t.rec.job = id;
    t.rec.task = static_cast<uint32_t>(i);
    t.rec.status = rt.job->tasks[i].after.empty() ? TaskStatus::kQueued : TaskStatus::kBlocked;
    t.deps_left = static_cast<int32_t>(rt.job->tasks[i].after.size());
    for (TaskId d : rt.job->tasks[i].after) rt.tasks[d.value()].dependents.push_back(static_cast<uint32_t>(i));
  }
  for (TaskRt& t : rt.tasks) {
    if (t.rec.status == TaskStatus::kQueued) Enqueue(t);
  }
  Changed(rt);
}

void Coordinator::FleetChangedLocked() {
  pools_.reset();
  fleet_kernels_.reset();
  empty_ledger_.reset();
}

const std::shared_ptr<const sched::PoolIndex>& Coordinator::PoolsLocked() {
  if (!pools_) pools_ = std::make_shared<const sched::PoolIndex>(sched::PoolIndex::Build(fleet_));
  return pools_;
}

Status Coordinator::CheckServiceNameLocked(const model::Job& job) const {
  // A service is the set of its live replica jobs, found by name, and the gateways
  // route /v1/services/NAME/ by it: another tenant's replica under the name would join
  // the set (its secrets, its tenant) and take the service's requests.
  const std::optional<spec::ReplicaJobId> id = spec::ParseReplicaJobName(job.name);
  if (!id) return OkStatus();
  if (job.tasks.size() != 1) {
    return InvalidArgumentError(fmt::format("job '{}': names serve/SERVICE/REGION/N are services' replica jobs (meridian "
                                            "serve), of one task; this one has {}",
                                            job.name, job.tasks.size()));
  }
  const std::string prefix = spec::ReplicaJobNamePrefix(id->service);
  for (const auto& [other_id, other] : jobs_) {
    if (other.rec.tenant == job.tenant || model::IsTerminal(other.rec.status) || !other.rec.name.starts_with(prefix)) {
      continue;
    }
    const std::optional<spec::ReplicaJobId> of = spec::ParseReplicaJobName(other.rec.name);
    if (!of || of->service != id->service) continue;
    return FailedPreconditionError(
        fmt::format("job '{}': a service named '{}' runs already, of another tenant; a service's name is the "
                    "cluster's (the gateways route by it): serve yours under another name",
                    job.name, id->service));
  }
  return OkStatus();
}

Status Coordinator::CheckFeasibleLocked(const model::Job& job) {
  if (fleet_.nodes.empty()) {
    return FailedPreconditionError("the cluster has no nodes yet: start agents (meridian up) and submit again");
  }
  for (const model::Task& t : job.tasks) {
    for (const model::ObjectRef& in : t.inputs) {
      if (in.object_id.empty()) {
        return InvalidArgumentError(fmt::format(
            "task '{}' reads '{}', which the spec only declares (for 'meridian plan'); a job that runs reads "
            "datasets put in the cluster: 'meridian data put --name NAME PATH', then dataset://NAME",
            t.name, in.name));
      }
      if (!HasLiveReplicaLocked(in.object_id)) {
        return FailedPreconditionError(
            fmt::format("task '{}' reads {} ({}), which no live node holds: it was lost", t.name, in.name, in.object_id));
      }
    }
  }
  // What the fleet offers is worked out once after it changes, not per job: with
  // thousands of nodes it is most of a submission's work.
  if (!fleet_kernels_) {
    fleet_kernels_.emplace();
    for (const NodeRt& n : nodes_) fleet_kernels_->insert(n.kernels.begin(), n.kernels.end());
  }
  const std::set<std::string>& kernels = *fleet_kernels_;
  for (const model::Task& t : job.tasks) {
    if (!t.kernel.empty() && !kernels.count(t.kernel)) {
      return InvalidArgumentError(
          fmt::format("task '{}': unknown kernel '{}' (the agents run: {})", t.name, t.kernel, JoinNames(kernels)));
    }
  }
  // Ask the scheduler about one task of each distinct request on an empty fleet:
  // what it calls infeasible there can never run. A task may run in its job's
  // fallback regions once it has waited: what runs there only is feasible.
  std::optional<model::Job> widened;
  if (!job.fallback_regions.empty()) widened.emplace(model::WithFallbackRegions(job));
  sched::Snapshot snap;
  snap.fleet = &fleet_;
  snap.throughput = &options_.throughput;
  snap.pools = PoolsLocked();
  if (!empty_ledger_) empty_ledger_.emplace(fleet_);
  snap.free = *empty_ledger_;
  snap.jobs.push_back(sched::JobState::Submitted(widened ? *widened : job, 0));
  std::vector<const model::ResourceRequest*> seen;
  for (const model::Task& t : job.tasks) {
    const model::ResourceRequest& r = t.resources;
    bool dup = std::any_of(seen.begin(), seen.end(), [&](const model::ResourceRequest* s) { return *s == r; });
    if (dup && t.gang.empty()) continue;
    seen.push_back(&r);
    snap.queue.push_back(sched::PendingTask{0, t.id, t.inputs, static_cast<int64_t>(snap.queue.size())});
  }
  Random rng(1);
  sched::Plan plan = sched::Schedule(snap, policy_, rng);
  for (const sched::Unplaced& u : plan.unplaced) {
    if (u.kind == sched::UnplacedKind::kInfeasible) {
      return InvalidArgumentError(
          fmt::format("task '{}' can never run on this cluster: {}", job.tasks[u.task.value()].name, u.reason));
    }
  }
  return OkStatus();
}

std::shared_ptr<const Coordinator::JobHead> Coordinator::HeadOf(uint64_t id) {
  std::lock_guard<std::mutex> lock(heads_mu_);
  auto it = heads_.find(id);
  return it == heads_.end() ? nullptr : it->second;
}

StatusOr<model::JobView> Coordinator::GetJob(uint64_t id, uint32_t first_task, uint32_t max_tasks) {
  const std::shared_ptr<const JobHead> head = HeadOf(id);
  if (!head) return NotFoundError(fmt::format("no job {}", id));
  model::JobView view;
  view.summary = head->summary;
  view.traffic = head->traffic;
  view.input_bytes = head->input_bytes;
  // Tasks come from the store, which holds what memory does once a call returns: a
  // page costs the coordinator no more than its own size, however large the job.
  view.next_task = first_task;
  if (max_tasks == 0) return view;
  MERIDIAN_ASSIGN_OR_RETURN(view.tasks,
                            store_->TaskPage(id, first_task, std::min(max_tasks, rpc::kMaxTasksPerPage),
                                             rpc::kMaxTaskPageBytes));
  if (!view.tasks.empty()) view.next_task = view.tasks.back().record.task + 1;
  // What memory adds to the stored rows: the names of rows stored without one, and why
  // queued tasks wait. A page with neither needs no lock.
  if (std::none_of(view.tasks.begin(), view.tasks.end(), [](const model::TaskView& t) {
        return t.name.empty() || t.record.status == TaskStatus::kQueued;
      })) {
    return view;
  }
  std::lock_guard lock(mu_);
  auto job = jobs_.find(id);
  const MonotonicTime now = env_.clock().Now();
  for (model::TaskView& t : view.tasks) {
    if (t.name.empty()) t.name = TaskNameLocked(id, t.record.task);
    if (job == jobs_.end() || job->second.retired || t.record.status != TaskStatus::kQueued) continue;
    auto w = job->second.waiting.find(t.record.task);
    if (t.record.reason.empty() && w != job->second.waiting.end()) t.record.reason = "waiting: " + w->second;
    // When it may run elsewhere, from now (docs/job-spec.md, "Fallback regions").
    const std::optional<MonotonicTime> fallback_at = FallbackAtLocked(job->second, job->second.tasks[t.record.task]);
    if (!fallback_at || *fallback_at <= now) continue;
    t.record.reason += fmt::format("{}it may run in its fallback regions ({}) too in {}",
                                   t.record.reason.empty() ? "" : "; ",
                                   fmt::join(job->second.job->fallback_regions, ", "),
                                   FormatDurationUs(fallback_at->us - now.us));
  }
  return view;
}

std::vector<model::JobSummary> Coordinator::ListJobs(int32_t limit, const rpc::JobFilter& filter) {
  std::vector<std::shared_ptr<const JobHead>> picked;
  {
    std::lock_guard<std::mutex> lock(heads_mu_);
    for (auto it = heads_.rbegin(); it != heads_.rend(); ++it) {
      if (limit > 0 && picked.size() >= static_cast<size_t>(limit)) break;
      const model::JobRecord& rec = it->second->summary.job;
      if (!filter.tenant.empty() && rec.tenant != filter.tenant) continue;
      if (!rec.name.starts_with(filter.name_prefix)) continue;
      if (filter.live_only && model::IsTerminal(rec.status)) continue;
      picked.push_back(it->second);
    }
  }
  // Copied without the lock: the heads never change.
  std::vector<model::JobSummary> out;
  out.reserve(picked.size());
  for (const std::shared_ptr<const JobHead>& h : picked) out.push_back(h->summary);
  return out;
}

StatusOr<std::string> Coordinator::JobTenant(uint64_t id) {
  const std::shared_ptr<const JobHead> head = HeadOf(id);
  if (!head) return NotFoundError(fmt::format("no job {}", id));
  return head->summary.job.tenant;
}

StatusOr<model::JobSummary> Coordinator::CancelJob(uint64_t id) {
  std::unique_lock lock(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return NotFoundError(fmt::format("no job {}", id));
  JobRt& job = it->second;
  if (model::IsTerminal(job.rec.status)) {
    return FailedPreconditionError(
        fmt::format("job {} has already {}", id, model::JobStatusName(job.rec.status)));
  }
  store::StoreBatch batch;
  EndJob(job, JobStatus::kCancelled, "cancelled by request", batch);
  Commit(std::move(batch));
  model::JobSummary summary = SummaryOf(job);
  RetireFinishedLocked();
  return summary;
}

StatusOr<model::JobSummary> Coordinator::DeleteJob(uint64_t id) {
  model::JobSummary summary;
  {
    std::lock_guard lock(mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return NotFoundError(fmt::format("no job {}", id));
    JobRt& job = it->second;
    if (!model::IsTerminal(job.rec.status)) {
      return FailedPreconditionError(fmt::format("job {} is {}: cancel it first (meridian job cancel {})", id,
                                                 model::JobStatusName(job.rec.status), id));
    }
    if (job.deleting) return FailedPreconditionError(fmt::format("job {} is being deleted", id));
    if (!job.retired) {
      return FailedPreconditionError(fmt::format(
          "job {} has tasks still stopping on their nodes ({}); try again in a moment", id, job.held));
    }
    job.deleting = true;
    summary = SummaryOf(job);
  }
  // The results it kept as objects on their nodes: each holds a reference for it.
  std::vector<std::pair<std::string, std::string>> results;  // (node, object)
  Status s = OkStatus();
  for (uint32_t first = 0; s.ok();) {
    StatusOr<std::vector<model::TaskView>> page =
        store_->TaskPage(id, first, rpc::kMaxTasksPerPage, rpc::kMaxTaskPageBytes);
    if (!page.ok()) s = page.status();
    if (!s.ok() || page->empty()) break;
    for (const model::TaskView& t : *page) {
      if (t.result && !t.record.output_object.empty()) results.emplace_back(t.record.node, t.record.output_object);
    }
    first = page->back().record.task + 1;
  }
  if (s.ok()) s = store_->DeleteJob(id);
  std::lock_guard lock(mu_);
  auto it = jobs_.find(id);
  if (!s.ok()) {
    if (it != jobs_.end()) it->second.deleting = false;
    return s.WithPrefix(fmt::format("deleting job {}", id));
  }
  if (it != jobs_.end()) {
    for (const std::shared_ptr<rpc::JobWatchSink>& w : it->second.watchers) {
      w->Close(NotFoundError(fmt::format("job {} was deleted", id)));
    }
    jobs_.erase(it);
  }
  head_dirty_.push_back(id);  // its head goes (TakeHeadsLocked finds no job)
  for (const auto& [node, object] : results) {
    if (dataset_objects_.count(object)) continue;  // a shard of a dataset outlives its job
    auto n = node_by_name_.find(node);
    if (n != node_by_name_.end() && nodes_[n->second].alive) OutboxLocked(n->second).release_objects.push_back(object);
  }
  FlushOutboxesLocked();
  MERIDIAN_LOG_INFO("job {} deleted ({} tasks, {} result objects let go)", id, summary.tasks_total, results.size());
  return summary;
}

StatusOr<uint32_t> Coordinator::FindTaskIndex(uint64_t id, const std::string& task) {
  std::optional<uint32_t> index;
  bool in_memory = false;
  {
    std::lock_guard lock(mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return NotFoundError(fmt::format("no job {}", id));
    in_memory = it->second.job != nullptr;
    for (uint32_t i = 0; in_memory && i < it->second.tasks.size(); ++i) {
      if (it->second.job->tasks[i].name == task) index = i;
    }
  }
  if (!in_memory) {
    MERIDIAN_ASSIGN_OR_RETURN(index, store_->FindTask(id, task));
  }
  if (!index) return NotFoundError(fmt::format("job {} has no task '{}'", id, task));
  return *index;
}

StatusOr<std::pair<std::string, std::string>> Coordinator::JobSpec(uint64_t id) {
  {
    std::lock_guard lock(mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return NotFoundError(fmt::format("no job {}", id));
    // A job not yet retired holds its spec; a retired one's is in the store only.
    if (!it->second.rec.spec_yaml.empty()) return std::make_pair(it->second.rec.spec_yaml, it->second.rec.spec_name);
  }
  return store_->JobSpec(id);
}

StatusOr<rpc::LogPage> Coordinator::Logs(uint64_t id, const std::string& task, rpc::LogCursor from) {
  std::optional<uint32_t> index;
  if (!task.empty()) {
    MERIDIAN_ASSIGN_OR_RETURN(index, FindTaskIndex(id, task));
    if (from.task > *index) return rpc::LogPage{};
    if (from.task < *index) from = rpc::LogCursor{*index, 0};
  } else if (std::lock_guard lock(mu_); !jobs_.count(id)) {
    return NotFoundError(fmt::format("no job {}", id));
  }
  const uint32_t limit = std::max<uint32_t>(options_.log_page_logs, 1);
  const int64_t max_bytes = std::max<int64_t>(options_.log_page_bytes, 1);
  auto tail_bytes = [](const model::TaskLogRecord& r) {
    return static_cast<int64_t>(r.stdout_tail.size() + r.stderr_tail.size());
  };
  // Running attempts' output so far first, then the store. An attempt that ends
  // between the two is in one or the other: its live output is copied here, or it had
  // ended before and its log, queued for the store under the same lock, is stored
  // (AwaitStored) before the store is read. Read the other way round, a log could end
  // after the store was read and before its live output was looked at, and be in
  // neither. The copies stop at the page's bounds: what lies past the last is the next
  // page's.
  std::vector<rpc::TaskLog> live;
  std::optional<rpc::LogCursor> live_end;
  uint64_t queued = 0;
  {
    std::lock_guard lock(mu_);
    auto it = jobs_.find(id);
    if (it != jobs_.end() && !it->second.tasks.empty()) {
      const JobRt& job = it->second;
      const uint32_t end = index ? std::min<uint32_t>(*index + 1, job.tasks.size()) : job.tasks.size();
      int64_t bytes = 0;
      for (auto at = job.live_logs.lower_bound(from.task);
           at != job.live_logs.end() && *at < end && live.size() < limit && bytes < max_bytes; ++at) {
        const uint32_t t = *at;
        const TaskRt& r = job.tasks[t];
        if (!r.live || r.live->attempt != r.rec.attempt || !model::IsPlaced(r.rec.status)) continue;
        if (rpc::LogCursor{t, r.live->attempt} < from) continue;
        bytes += tail_bytes(*r.live);
        live.push_back(rpc::TaskLog{TaskName(job, t), *r.live, true});
      }
      if (live.size() >= limit || bytes >= max_bytes) {
        live_end = rpc::LogCursor{live.back().record.task, live.back().record.attempt};
      }
    }
    queued = queued_seq_.load(std::memory_order_acquire);
  }
  AwaitStored(queued);
  MERIDIAN_ASSIGN_OR_RETURN(std::vector<rpc::TaskLog> stored,
                            store_->Logs(id, index, from.task, from.attempt, limit, max_bytes));
  int64_t stored_bytes = 0;
  for (const rpc::TaskLog& l : stored) stored_bytes += tail_bytes(l.record);
  std::optional<rpc::LogCursor> stored_end;
  if (stored.size() >= limit || stored_bytes >= max_bytes) {
    stored_end = rpc::LogCursor{stored.back().record.task, stored.back().record.attempt};
  }
  // Merged in (task, attempt) order, up to where both are whole; an attempt in both
  // (it ended meanwhile) comes once, as stored.
  std::optional<rpc::LogCursor> whole = stored_end;
  if (live_end && (!whole || *live_end < *whole)) whole = live_end;
  auto key = [](const rpc::TaskLog& l) { return rpc::LogCursor{l.record.task, l.record.attempt}; };
  rpc::LogPage page;
  size_t s = 0, l = 0;
  int64_t bytes = 0;
  while (page.logs.size() < limit && bytes < max_bytes) {
    if (l < live.size() && s < stored.size() && key(live[l]) == key(stored[s])) ++l;
    const bool take_stored = s < stored.size() && (l == live.size() || key(stored[s]) < key(live[l]));
    rpc::TaskLog* next = take_stored ? &stored[s] : l < live.size() ? &live[l] : nullptr;
    if (next == nullptr || (whole && *whole < key(*next))) break;
    bytes += tail_bytes(next->record);
    page.logs.push_back(std::move(*next));
    ++(take_stored ? s : l);
  }
  if (page.logs.size() >= limit || bytes >= max_bytes) {
    const model::TaskLogRecord& last = page.logs.back().record;
    page.next = rpc::LogCursor{last.task, last.attempt + 1};
  } else if (whole) {
    page.next = rpc::LogCursor{whole->task, whole->attempt + 1};
  }
  if (std::any_of(page.logs.begin(), page.logs.end(), [](const rpc::TaskLog& x) { return x.task.empty(); })) {
    std::lock_guard lock(mu_);
    for (rpc::TaskLog& x : page.logs) {
      if (x.task.empty()) x.task = TaskNameLocked(id, x.record.task);
    }
  }
  return page;
}

StatusOr<model::JobSummary> Coordinator::WaitJob(uint64_t id, uint64_t after_version, int64_t timeout_us) {
  std::shared_ptr<const JobHead> head;
  {
    std::unique_lock<std::mutex> lock(heads_mu_);
    if (!heads_.count(id)) return NotFoundError(fmt::format("no job {}", id));
    // Looked up again on each wake: the job may be deleted while this waits.
    heads_cv_.wait_for(lock, std::chrono::microseconds(timeout_us), [&] {
      auto it = heads_.find(id);
      return heads_closed_ || it == heads_.end() || it->second->summary.version > after_version ||
             model::IsTerminal(it->second->summary.job.status);
    });
    auto it = heads_.find(id);
    if (it == heads_.end()) return NotFoundError(fmt::format("job {} was deleted", id));
    head = it->second;
  }
  return head->summary;
}

Status Coordinator::WatchJob(uint64_t id, uint64_t after_version, std::shared_ptr<rpc::JobWatchSink> sink) {
  std::lock_guard lock(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return NotFoundError(fmt::format("no job {}", id));
  JobRt& job = it->second;
  const bool finished = model::IsTerminal(job.rec.status);
  // Pushed in the commit queue's order: after what it shows is stored, before any
  // later change's summary.
  PendingCommit entry;
  if (job.counts.version > after_version || finished) {
    WatchPush& w = entry.watches.emplace_back();
    w.sinks.push_back(sink);
    w.summary = SummaryOf(job);
    w.close = finished;
  }
  if (!finished) {
    std::erase_if(job.watchers, [](const std::shared_ptr<rpc::JobWatchSink>& w) { return !w->open(); });
    job.watchers.push_back(std::move(sink));
  }
  EnqueueLocked(std::move(entry));
  return OkStatus();
}

model::JobSummary Coordinator::SummaryOf(const JobRt& job) const {
  model::JobSummary s = job.counts;
  // The record but its spec (which may be large).
  s.job.id = job.rec.id;
  s.job.name = job.rec.name;
  s.job.tenant = job.rec.tenant;
  s.job.spec_name = job.rec.spec_name;
  s.job.status = job.rec.status;
  s.job.reason = job.rec.reason;
  s.job.submitted_us = job.rec.submitted_us;
  s.job.finished_us = job.rec.finished_us;
  for (const auto& [site, n] : job.running_by_site) {
    if (n > 0) s.running_by_site[site] = n;
  }
  return s;
}

std::string Coordinator::TaskName(const JobRt& job, uint32_t task) const {
  return job.job && task < job.job->tasks.size() ? job.job->tasks[task].name : fmt::format("#{}", task);
}

std::string Coordinator::TaskNameLocked(uint64_t job, uint32_t task) const {
  auto it = jobs_.find(job);
  return it == jobs_.end() ? fmt::format("#{}", task) : TaskName(it->second, task);
}

void Coordinator::Changed(JobRt& job) {
  job.counts.version = next_version_++;
  HeadChangedLocked(job);
  if (!job.watchers.empty() && !job.watch_dirty) {
    job.watch_dirty = true;
    watch_dirty_.push_back(job.rec.id);
  }
}

void Coordinator::HeadChangedLocked(JobRt& job) {
  if (job.head_dirty) return;
  job.head_dirty = true;
  head_dirty_.push_back(job.rec.id);
}

void Coordinator::TakeHeadsLocked(PendingCommit& entry) {
  entry.heads.reserve(entry.heads.size() + head_dirty_.size());
  for (uint64_t id : head_dirty_) {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) {
      entry.heads.emplace_back(id, nullptr);
      continue;
    }
    JobRt& job = it->second;
    if (!job.head_dirty) continue;  // made already in this pass
    job.head_dirty = false;
    auto head = std::make_shared<JobHead>();
    head->summary = SummaryOf(job);
    head->traffic.reserve(job.traffic.size());
    for (const auto& [sites, t] : job.traffic) head->traffic.push_back(t);
    head->input_bytes = job.input_bytes;
    entry.heads.emplace_back(id, std::move(head));
  }
  head_dirty_.clear();
}

// ------------------------------------------------------------------ nodes

bool Coordinator::Fits(int32_t node, const model::TaskAllocation& a) const {
  const sched::NodeFree& f = ledger_.free(NodeId(static_cast<uint32_t>(node)));
  bool fits = f.cpu_milli >= a.cpu_milli && f.memory_bytes >= a.memory_bytes;
  for (int32_t d : a.devices) {
    fits = fits && d >= 0 && d < static_cast<int32_t>(f.device_free_milli.size()) &&
           f.device_free_milli[d] >= a.device_share_milli;
  }
  return fits;
}

StatusOr<SiteId> Coordinator::SiteFor(const model::AgentRegistration& reg) {
  if (std::optional<SiteId> site = fleet_.FindSite(reg.site)) return *site;
  if (!options_.fleet.sites.empty()) {
    std::set<std::string> known;
    for (const model::Site& s : fleet_.sites) known.insert(s.name);
    return InvalidArgumentError(fmt::format("node '{}': unknown site '{}' (the coordinator's fleet has: {})",
                                            reg.node.name, reg.site, JoinNames(known)));
  }
  // No fleet file: sites are what the agents say they are.
  model::Site s;
  s.id = SiteId(static_cast<uint32_t>(fleet_.sites.size()));
  s.name = reg.site;
  s.region = reg.site;
  fleet_.sites.push_back(s);
  return s.id;
}

int32_t Coordinator::UpsertNode(model::Node node, store::StoreBatch& batch) {
  node.health = model::NodeHealth::kHealthy;
  auto found = node_by_name_.find(node.name);
  if (found == node_by_name_.end()) {
    const int32_t index = static_cast<int32_t>(fleet_.nodes.size());
    node.id = NodeId(static_cast<uint32_t>(index));
    fleet_.nodes.push_back(std::move(node));
    nodes_.emplace_back();
    node_by_name_[fleet_.nodes.back().name] = index;
    ledger_.Add(fleet_.nodes.back());
    return index;
  }
  // A node coming back may bring other resources: recount the ledger from what is
  // held, and lose what no longer fits on it.
  const int32_t index = found->second;
  node.id = NodeId(static_cast<uint32_t>(index));
  fleet_.nodes[index] = std::move(node);
  ledger_ = sched::ResourceLedger(fleet_);
  std::vector<std::pair<uint64_t, uint32_t>> misfits;
  for (size_t n = 0; n < nodes_.size(); ++n) {
    for (const auto& [job_id, task] : nodes_[n].tasks) {
      const model::TaskAllocation& a = jobs_.at(job_id).tasks[task].rec.allocation;
      sched::Allocation alloc{NodeId(static_cast<uint32_t>(n)), a.cpu_milli, a.memory_bytes, a.devices,
                              a.device_share_milli};
      if (Fits(static_cast<int32_t>(n), a)) {
        ledger_.Take(alloc);
      } else {
        misfits.emplace_back(job_id, task);
      }
    }
  }
  for (const auto& [job_id, t] : misfits) {
    JobRt& job = jobs_.at(job_id);
    nodes_[index].tasks.erase({job_id, t});
    job.tasks[t].node = -1;  // nothing to give back
    LoseAttempt(job, job.tasks[t], fmt::format("node {} came back too small for it", fleet_.nodes[index].name), batch);
  }
  return index;
}

void Coordinator::Reconcile(int32_t index, const model::AgentRegistration& reg, store::StoreBatch& batch,
                            model::RegistrationReply& reply) {
  const std::string& name = fleet_.nodes[index].name;
  std::set<model::TaskKey> running(reg.running.begin(), reg.running.end());
  for (const model::TaskUpdate& u : reg.unacked) running.insert(u.key);
  // Tasks placed here before a coordinator restart: adopt those the agent still has.
  for (auto it = orphans_.begin(); it != orphans_.end();) {
    if (it->second.node != name) {
      ++it;
      continue;
    }
    JobRt& job = jobs_.at(it->first.first);
    TaskRt& task = job.tasks[it->first.second];
    it = orphans_.erase(it);
    if (running.count({task.rec.job, task.rec.task, task.rec.attempt}) && Fits(index, task.rec.allocation)) {
      Hold(task, index);
    } else {
      LoseAttempt(job, task, fmt::format("node {} no longer had it after the coordinator restarted", name), batch);
    }
  }
  // Finished while nobody was listening.
  for (const model::TaskUpdate& u : reg.unacked) ApplyUpdate(u, index, batch);
  // Held here but no longer running: lost with the agent's restart.
  std::vector<std::pair<uint64_t, uint32_t>> held(nodes_[index].tasks.begin(), nodes_[index].tasks.end());
  for (const auto& [job_id, t] : held) {
    JobRt& job = jobs_.at(job_id);
    if (!running.count({job_id, t, job.tasks[t].rec.attempt})) {
      LoseAttempt(job, job.tasks[t], fmt::format("node {} restarted without it", name), batch);
    }
  }
  // Running there but no longer wanted (its job ended, or it was run elsewhere).
  for (const model::TaskKey& k : reg.running) {
    auto j = jobs_.find(k.job);
    bool wanted = j != jobs_.end() && k.task < j->second.tasks.size() &&
                  j->second.tasks[k.task].rec.attempt == k.attempt && j->second.tasks[k.task].node == index &&
                  model::IsPlaced(j->second.tasks[k.task].rec.status);
    if (!wanted) reply.cancel.push_back(k);
  }
}

StatusOr<model::RegistrationReply> Coordinator::Register(const model::AgentRegistration& reg) {
  // A registration comes off the network: nothing it declares is trusted until checked.
  MERIDIAN_RETURN_IF_ERROR(model::CheckNodeSpec(reg.node));
  if (reg.site.empty()) return InvalidArgumentError(fmt::format("node '{}' names no site", reg.node.name));
  MERIDIAN_RETURN_IF_ERROR(model::CheckName(reg.site, fmt::format("node '{}': site", reg.node.name)));
  MERIDIAN_RETURN_IF_ERROR(CheckAgainstFleet(reg));
  if (!reg.metrics_url.empty() &&
      (reg.metrics_url.size() > 256 ||
       (reg.metrics_url.rfind("http://", 0) != 0 && reg.metrics_url.rfind("https://", 0) != 0) ||
       reg.metrics_url.find_first_of(" \t\r\n\"<>") != std::string::npos)) {
    return InvalidArgumentError(fmt::format("node '{}': metrics URL: expected http(s)://HOST:PORT of at most 256 bytes",
                                            reg.node.name));
  }
  std::unique_lock lock(mu_);
  if (auto it = node_by_name_.find(reg.node.name); it != node_by_name_.end()) {
    const NodeRt& current = nodes_[it->second];
    const int64_t silent_us = env_.clock().Now().us - current.last_heartbeat.us;
    const int64_t timeout_us = HeartbeatTimeoutUs();
    if (current.alive && reg.previous_session != current.session && silent_us < timeout_us) {
      return FailedPreconditionError(fmt::format(
          "node {} already has a live session (heard from {} ms ago); a second agent for one node is refused: "
          "stop the other, or wait {} ms for it to be declared dead",
          reg.node.name, silent_us / 1000, (timeout_us - silent_us) / 1000));
    }
  }
  {
    auto it = node_by_name_.find(reg.node.name);
    MERIDIAN_RETURN_IF_ERROR(CheckReportsLocked(it == node_by_name_.end() ? -1 : it->second, reg.node.name, reg.unacked));
  }
  MERIDIAN_ASSIGN_OR_RETURN(SiteId site, SiteFor(reg));
  model::Node node = reg.node;
  node.site = site;
  store::StoreBatch batch;
  const int32_t index = UpsertNode(std::move(node), batch);
  FleetChangedLocked();
  last_fleet_change_ = env_.clock().Now();
  NodeRt& rt = nodes_[index];
  rt.site = reg.site;
  if (!rt.alive) ++live_nodes_;
  rt.alive = true;
  rt.left = false;
  CloseSinkLocked(rt, FailedPreconditionError("this session is no longer the node's; register again"));
  // Random: a session cannot be guessed from an earlier one, nor match one of an
  // earlier incarnation of this coordinator.
  StatusOr<std::string> random = security::RandomHex(8);
  rt.session = random.ok() ? (std::stoull(*random, nullptr, 16) >> 1) | 1 : next_session_++;
  rt.last_heartbeat = env_.clock().Now();
  {
    std::lock_guard<std::mutex> heard(heard_mu_);
    if (heard_.size() <= static_cast<size_t>(index)) heard_.resize(static_cast<size_t>(index) + 1);
    heard_[static_cast<size_t>(index)] = Heard{rt.session, rt.last_heartbeat};
  }
  rt.registered_us = WallUs();
  rt.kernels = std::set<std::string>(reg.kernels.begin(), reg.kernels.end());
  rt.outbox = {};
  rt.transfer_address = reg.transfer_address;
  rt.metrics_url = reg.metrics_url;
  rt.unreachable_until = MonotonicTime{};  // a new incarnation, at a new address
  // Objects it held before and no longer does went with its restart (after a restart of
  // ours it held none that we knew of): outputs still needed are made again at once,
  // not after the grace period.
  std::set<std::string> gone = rt.objects;
  DropAllReplicasLocked(index);
  for (const model::HeldObject& o : reg.objects) {
    AddReplicaLocked(index, o.id, o.size);
    gone.erase(o.id);
  }
  model::RegistrationReply reply;
  if (options_.emulate_wan) reply.links = LinksFrom(site);
  reply.ticket_key = ticket_key_;
  Reconcile(index, reg, batch, reply);
  RebuildLostLocked(gone, fmt::format("its output was lost when node {} restarted", reg.node.name), batch);
  Commit(std::move(batch));
  RetireFinishedLocked();
  reply.node_id = static_cast<uint32_t>(index);
  reply.session = rt.session;
  reply.heartbeat_interval_us = HeartbeatIntervalUs();
  dirty_ = true;
  MERIDIAN_LOG_INFO("node {} registered at site {} (session {}, {} running)", reg.node.name, reg.site, rt.session,
                    reg.running.size());
  lock.unlock();
  loop_cv_.notify_one();
  return reply;
}

StatusOr<model::AssignmentBatch> Coordinator::NextAssignments(uint32_t node_id, uint64_t session,
                                                              int64_t timeout_us) {
  AwaitAtExit stored{*this};
  std::unique_lock<std::mutex> lock(mu_.raw());
  auto stale = [&] { return node_id >= nodes_.size() || nodes_[node_id].session != session; };
  if (stale()) return FailedPreconditionError("this session is no longer the node's; register again");
  outbox_cv_.wait_for(lock, std::chrono::microseconds(timeout_us), [&] {
    return stopping_ || stale() || !nodes_[node_id].outbox.assignments.empty() ||
           !nodes_[node_id].outbox.cancel.empty() || !nodes_[node_id].outbox.release_objects.empty();
  });
  if (stale()) return FailedPreconditionError("this session is no longer the node's; register again");
  model::AssignmentBatch out;
  std::swap(out, nodes_[node_id].outbox);
  return out;
}

Status Coordinator::ConnectAssignments(uint32_t node_id, uint64_t session, std::shared_ptr<rpc::AssignmentSink> sink) {
  std::lock_guard lock(mu_);
  if (node_id >= nodes_.size() || nodes_[node_id].session != session) {
    return FailedPreconditionError("this session is no longer the node's; register again");
  }
  NodeRt& node = nodes_[node_id];
  CloseSinkLocked(node, FailedPreconditionError("another assignment stream of this node replaced this one"));
  node.sink = std::move(sink);
  node.stream_lost_at.reset();
  // What was made while no stream was connected goes now.
  OutboxLocked(static_cast<int32_t>(node_id));
  FlushOutboxesLocked();
  return OkStatus();
}

StatusOr<bool> Coordinator::Heartbeat(const model::AgentHeartbeat& hb) {
  bool noted = false;
  {
    std::lock_guard<std::mutex> heard(heard_mu_);
    if (hb.node_id < heard_.size() && heard_[hb.node_id].session == hb.session) {
      heard_[hb.node_id].at = env_.clock().Now();
      ++heard_[hb.node_id].waiting;
      noted = true;
    }
  }
  // Answered (whichever way this returns): no longer waiting. Made before `lock`, so
  // it runs once mu_ is let go.
  struct Answered {
    Coordinator& c;
    const model::AgentHeartbeat& hb;
    bool noted;
    ~Answered() {
      if (!noted) return;
      std::lock_guard<std::mutex> heard(c.heard_mu_);
      Heard& h = c.heard_[hb.node_id];  // heard_ only grows
      if (h.session == hb.session && h.waiting > 0) --h.waiting;
    }
  } answered{*this, hb, noted};
  std::unique_lock lock(mu_);
  if (hb.node_id >= nodes_.size() || nodes_[hb.node_id].session != hb.session) return true;
  const int32_t index = static_cast<int32_t>(hb.node_id);
  MERIDIAN_RETURN_IF_ERROR(CheckReportsLocked(index, fleet_.nodes[index].name, hb.updates));
  NodeRt& node = nodes_[index];
  node.last_heartbeat = env_.clock().Now();
  node.running = hb.running;
  node.load_average = hb.load_average;
  for (const model::HeldObject& o : hb.objects_added) AddReplicaLocked(index, o.id, o.size);
  for (const std::string& id : hb.objects_removed) DropReplicaLocked(index, id);
  for (const model::LinkTraffic& t : hb.traffic) node.traffic[t.to_site] = t;
  store::StoreBatch batch;
  for (const model::TaskUpdate& u : hb.updates) ApplyUpdate(u, index, batch);
  Commit(std::move(batch));
  // Freed resources and dependents made ready are placed before the agent hears back.
  if (dirty_) ScheduleLocked();
  // Placed here a while ago but not on the agent: the assignment was lost on the way.
  // The agent's set is built only when some assignment is that old.
  const int64_t resend_before = WallUs() - 4 * options_.heartbeat_interval_us;
  std::optional<std::set<model::TaskKey>> holding;
  bool resent = false;
  for (const auto& [job_id, t] : node.tasks) {
    const JobRt& job = jobs_.at(job_id);
    const TaskRt& task = job.tasks[t];
    if (task.rec.status != TaskStatus::kAssigned || task.rec.started_us >= resend_before ||
        model::IsTerminal(job.rec.status)) {
      continue;
    }
    if (!holding) {
      holding.emplace(hb.holding.begin(), hb.holding.end());
      for (const model::TaskUpdate& u : hb.updates) holding->insert(u.key);
    }
    if (!holding->count({job_id, t, task.rec.attempt})) {
      OutboxLocked(index).assignments.push_back(AssignmentFor(job, task));
      resent = true;
    }
  }
  if (resent) FlushOutboxesLocked();
  RetireFinishedLocked();
  const bool more = dirty_;  // more ready than one call placed
  lock.unlock();
  if (more) loop_cv_.notify_one();
  return false;
}

Status Coordinator::Leave(uint32_t node_id, uint64_t session) {
  std::unique_lock lock(mu_);
  if (node_id >= nodes_.size() || nodes_[node_id].session != session || !nodes_[node_id].alive) {
    return FailedPreconditionError("this session is no longer the node's; register again");
  }
  const int32_t index = static_cast<int32_t>(node_id);
  const NodeRt& node = nodes_[index];
  // Placed here since the agent last reported: it stays to run it.
  if (!node.tasks.empty()) {
    const auto& [job_id, t] = *node.tasks.begin();
    return FailedPreconditionError(fmt::format("node {} holds {} task{} (first: {} of job {}): it stays",
                                               fleet_.nodes[index].name, node.tasks.size(),
                                               node.tasks.size() == 1 ? "" : "s", TaskNameLocked(job_id, t), job_id));
  }
  store::StoreBatch batch;
  MarkDead(index, fmt::format("node {} left the pool, idle", fleet_.nodes[index].name), batch, true);
  Commit(std::move(batch));
  lock.unlock();
  loop_cv_.notify_one();
  return OkStatus();
}

std::vector<model::TenantView> Coordinator::ListTenants() {
  std::lock_guard lock(mu_);
  std::map<std::string, model::TenantView> by_name;
  for (const model::Tenant& t : fleet_.tenants) {
    model::TenantView& v = by_name[t.name];
    v.name = t.name;
    v.weight = t.weight;
    v.max_gpu_milli = t.max_gpu_milli;
    v.max_cpu_milli = t.max_cpu_milli;
    v.max_memory_bytes = t.max_memory_bytes;
    v.max_gpu_milli_by_type.insert(t.max_gpu_milli_by_type.begin(), t.max_gpu_milli_by_type.end());
    v.budget_micro_usd_per_day = t.budget_micro_usd_per_day;
    v.listed = true;
  }
  for (const auto& [id, job] : jobs_) {
    if (model::IsTerminal(job.rec.status)) continue;
    model::TenantView& v = by_name[job.rec.tenant];
    v.name = job.rec.tenant;
    ++v.jobs_active;
    v.tasks_running += job.counts.running;
    v.tasks_waiting += job.counts.waiting;
  }
  for (const auto& [name, used] : tenant_usage_) {
    auto it = by_name.find(name);
    if (it == by_name.end()) continue;
    it->second.gpu_milli = used.gpu_milli;
    it->second.cpu_milli = used.cpu_milli;
    it->second.memory_bytes = used.memory_bytes;
    for (const auto& [type, milli] : used.gpu_milli_by_type) {
      if (milli != 0) it->second.gpu_milli_by_type[type] = milli;
    }
  }
  for (auto& [name, v] : by_name) v.spent_today_micro_usd = SpentTodayLocked(name);
  std::vector<model::TenantView> out;
  for (auto& [name, v] : by_name) out.push_back(std::move(v));
  return out;
}

StatusOr<std::string> Coordinator::NodeName(uint32_t node_id) {
  std::lock_guard lock(mu_);
  if (node_id >= fleet_.nodes.size()) return NotFoundError(fmt::format("no node {}", node_id));
  return fleet_.nodes[node_id].name;
}

Status Coordinator::CheckAgainstFleet(const model::AgentRegistration& reg) const {
  if (options_.declared_nodes.empty()) return OkStatus();
  auto it = options_.declared_nodes.find(reg.node.name);
  if (it == options_.declared_nodes.end()) {
    return PermissionDeniedError(fmt::format("node '{}' is not in the fleet; only its nodes may register", reg.node.name));
  }
  const model::Node& declared = it->second.first;
  const std::string& where = it->second.second;
  auto refuse = [&](std::string what) {
    return PermissionDeniedError(fmt::format("node '{}' declares {}, more than the fleet gives it", reg.node.name, what));
  };
  if (reg.site != where) {
    return PermissionDeniedError(
        fmt::format("node '{}' says it is at site {}; the fleet puts it at {}", reg.node.name, reg.site, where));
  }
  if (reg.node.cpu_milli > declared.cpu_milli) return refuse(fmt::format("{} millicores", reg.node.cpu_milli));
  if (reg.node.memory_bytes > declared.memory_bytes) return refuse(fmt::format("{} bytes of memory", reg.node.memory_bytes));
  if (reg.node.disk_bytes > declared.disk_bytes && declared.disk_bytes > 0) {
    return refuse(fmt::format("{} bytes of disk", reg.node.disk_bytes));
  }
  if (options_.accept_node_devices) return OkStatus();
  std::map<std::string, int> have, allowed;
  for (const model::Device& d : reg.node.devices) ++have[d.type];
  for (const model::Device& d : declared.devices) ++allowed[d.type];
  for (const auto& [type, n] : have) {
    if (n > allowed[type]) return refuse(fmt::format("{} devices of type {}", n, type));
  }
  return OkStatus();
}

Status Coordinator::CheckReportsLocked(int32_t index, const std::string& name,
                                       const std::vector<model::TaskUpdate>& updates) const {
  for (const model::TaskUpdate& u : updates) {
    auto j = jobs_.find(u.key.job);
    if (j == jobs_.end() || j->second.retired || u.key.task >= j->second.tasks.size()) continue;
    const TaskRt& task = j->second.tasks[u.key.task];
    // Earlier attempts change nothing (ApplyUpdate ignores them); the current one, or
    // one never made, may be reported only by the node that holds it.
    const bool current_elsewhere = u.key.attempt == task.rec.attempt && task.node >= 0 && task.node != index;
    if (current_elsewhere || u.key.attempt > task.rec.attempt) {
      return PermissionDeniedError(fmt::format(
          "node {} reported on attempt {} of task {} of job {}, which it does not hold; nothing of this report "
          "was applied",
          name, u.key.attempt, u.key.task, u.key.job));
    }
  }
  return OkStatus();
}

size_t Coordinator::TasksInMemory() {
  std::lock_guard lock(mu_);
  size_t n = 0;
  for (const auto& [id, job] : jobs_) n += job.tasks.size();
  return n;
}

std::vector<model::NodeView> Coordinator::ListNodes() {
  std::lock_guard lock(mu_);
  std::vector<model::NodeView> out;
  const MonotonicTime now = env_.clock().Now();
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const NodeRt& rt = nodes_[i];
    model::NodeView v;
    v.node = fleet_.nodes[i];
    v.site = rt.site;
    v.alive = rt.alive;
    v.left = rt.left;
    v.heartbeat_age_us = now.us - rt.last_heartbeat.us;
    v.running = static_cast<int32_t>(rt.tasks.size());
    const sched::NodeFree& f = ledger_.free(NodeId(static_cast<uint32_t>(i)));
    v.cpu_allocated_milli = v.node.cpu_milli - f.cpu_milli;
    v.memory_allocated_bytes = v.node.memory_bytes - f.memory_bytes;
    for (int32_t free : f.device_free_milli) v.devices_allocated_milli += 1000 - free;
    v.load_average = rt.load_average;
    v.registered_us = rt.registered_us;
    for (const auto& [site, t] : rt.traffic) v.sent.push_back(t);
    v.metrics_url = rt.metrics_url;
    v.host = HostOfAddress(rt.transfer_address);
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace meridian::coordinator
