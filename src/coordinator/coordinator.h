// The coordinator: owns jobs and their tasks, the registry of nodes, and the loop
// that schedules. It implements the RPC interfaces (rpc/api.h) in plain C++; the
// gRPC server in src/rpc hosts it.
//
// State lives in memory and is written through to a StateStore before anything is
// acknowledged: a job before Submit returns, a placement before it is sent to an
// agent, a task's result before the agent's heartbeat is answered. On restart it
// loads the store back and reconciles with what agents report when they register
// again: tasks still running on live agents keep running, lost ones are queued
// again, finished ones are never run again.
//
// Task state machine: blocked -> queued -> assigned -> running -> succeeded; a
// failed attempt is retried up to the task's `retries`, then fails the job; an
// attempt lost with its node (or across a coordinator restart) is queued again, up
// to `max_losses` times. Each attempt is kept with its outcome and reason.
//
// Thread-safety: every public method may be called from any thread; one mutex
// guards the state in memory, and the store is written without it (group commit: see
// StateMutex). Client reads of jobs (ListJobs, GetJob's summary, JobTenant, WaitJob)
// take neither: they read each job's head, published once what it shows is stored
// (JobHead). A background thread runs scheduling and failure detection.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/env.h"
#include "http/metrics.h"
#include "model/fleet.h"
#include "model/run_state.h"
#include "model/throughput.h"
#include "model/work.h"
#include "rpc/api.h"
#include "security/pki.h"
#include "sched/schedule.h"
#include "spec/job_spec.h"
#include "store/state_store.h"

namespace meridian::coordinator {

// At most about this many heartbeats a second from idle agents, all together: past
// heartbeat_interval_us x this many nodes, agents are told to beat less often, and a
// silent node is declared dead after three of the longer intervals (or the configured
// timeout, if longer). A killed agent is noticed sooner, whatever the interval: its
// connection closes, and a node whose stream stays closed for the configured timeout,
// without a heartbeat, is declared dead.
inline constexpr int64_t kIdleHeartbeatsPerSecond = 250;

// A job of at most this many tasks is stored in the same transaction as its first
// placements (one commit less on its way); a larger one is stored first, on its own,
// since its rows take long to write.
inline constexpr size_t kStoredWithPlacementsTasks = 1'000;

struct CoordinatorOptions {
  // Sites, links, tenants and the throughput table. Nodes are not taken from here:
  // they join by registering. Empty: sites are created as agents name them.
  model::Fleet fleet;
  model::ThroughputTable throughput;
  int64_t heartbeat_interval_us = 200'000;
  // A node silent this long is declared dead and its tasks run elsewhere.
  int64_t heartbeat_timeout_us = 2'000'000;
  // After a restart, how long a task placed before it waits for its agent to report.
  int64_t reconcile_grace_us = 4'000'000;
  // Times an attempt may be lost with its node before the task fails.
  int32_t max_losses = 3;
  // Retention: a finished job is deleted (from memory and the store) once this many
  // jobs finished after it, or this long after it finished. 0: no limit.
  int32_t retain_jobs = 10'000;
  int64_t retain_for_us = int64_t{30} * 24 * 3600 * 1'000'000;
  // At most this many ready tasks are offered to one scheduling call, oldest first.
  size_t schedule_window = 1024;
  // A page of logs (JobService.Logs) holds at most this many, and ends with the one
  // whose tails reach log_page_bytes (rpc::LogPage).
  uint32_t log_page_logs = rpc::kMaxLogsPerPage;
  int64_t log_page_bytes = rpc::kMaxLogPageBytes;
  sched::QueueOrder order = sched::QueueOrder::kFifo;
  uint64_t seed = 1;
  // The ports a gang's rank 0 is told to listen on (MASTER_PORT): one of these, drawn
  // for each run of the gang from its job, name and rank 0's attempt.
  int32_t gang_port_first = 29500;
  int32_t gang_port_count = 1000;
  // Agents' transfers emulate the fleet's links (a local cluster playing its sites).
  bool emulate_wan = false;
  // With emulate_wan: the links' bandwidth too (false: only their round trips, where
  // a real network path shapes the bandwidth: scripts/netsim.sh's namespaces).
  bool emulate_wan_bandwidth = true;
  // The nodes the fleet file declares, by name, with their sites' names: a node that
  // registers must be one of them, at its site, declaring no more than it has. Empty:
  // any node may register (and join).
  std::map<std::string, std::pair<model::Node, std::string>> declared_nodes;
  // Devices are taken as the agents find them (real GPUs in place of the fleet's).
  bool accept_node_devices = false;
  // The cluster's CA and its key, which sign joining nodes' certificates, and the
  // bundle of CAs a node is told to trust. Empty: nodes cannot join.
  security::KeyPair ca;
  std::string ca_bundle;
  int64_t node_cert_valid_for_us = int64_t{30} * 24 * 3600 * 1'000'000;
  // false: no background thread; whoever owns the coordinator calls Turn() (the
  // deterministic simulation, src/vopr, which runs it on a virtual clock in one thread).
  bool run_loop = true;
  // A bug put in on purpose, for the simulator's own test that it finds such bugs
  // (nothing else sets it): kAckBeforeCommit acknowledges a small job before it is
  // stored, leaving it for the loop's next commit; kAcceptStaleReports takes a task's
  // report whatever attempt it is of and whichever node sends it.
  enum class PlantedBug { kNone, kAckBeforeCommit, kAcceptStaleReports };
  PlantedBug planted_bug = PlantedBug::kNone;
};

class Coordinator final : public rpc::JobApi,
                          public rpc::NodeApi,
                          public rpc::AdminApi,
                          public rpc::ObjectApi,
                          public rpc::AuthApi {
 public:
  // Loads the store's state and starts the background loop. `env` must outlive it.
  static StatusOr<std::unique_ptr<Coordinator>> Create(CoordinatorOptions options,
                                                       std::unique_ptr<store::StateStore> store, Env& env);
  ~Coordinator() override;

  // One turn of the background loop: failure detection, scheduling, retention, each
  // when it is due by the Env's clock. Only for a coordinator without its own loop
  // (CoordinatorOptions::run_loop false).
  void Turn();

  // rpc::JobApi
  StatusOr<rpc::SubmitResult> Submit(const std::string& spec_yaml, const std::string& spec_name,
                                     const std::string& tenant) override;
  StatusOr<std::optional<rpc::SubmitResult>> SubmitSmall(const std::string& spec_yaml, const std::string& spec_name,
                                                         const std::string& tenant, int64_t max_tasks) override;
  StatusOr<model::JobView> GetJob(uint64_t id, uint32_t first_task, uint32_t max_tasks) override;
  std::vector<model::JobSummary> ListJobs(int32_t limit, const rpc::JobFilter& filter) override;
  StatusOr<std::string> JobTenant(uint64_t id) override;
  StatusOr<model::JobSummary> CancelJob(uint64_t id) override;
  StatusOr<model::JobSummary> DeleteJob(uint64_t id) override;
  StatusOr<rpc::LogPage> Logs(uint64_t id, const std::string& task, rpc::LogCursor from) override;
  StatusOr<model::PlanReport> Plan(const std::string& spec_yaml, const std::string& spec_name,
                                   const std::string& tenant, const std::string& order, uint64_t seed) override;
  StatusOr<std::pair<std::string, std::string>> JobSpec(uint64_t id) override;
  StatusOr<model::JobSummary> WaitJob(uint64_t id, uint64_t after_version, int64_t timeout_us) override;
  Status WatchJob(uint64_t id, uint64_t after_version, std::shared_ptr<rpc::JobWatchSink> sink) override;

  // rpc::NodeApi
  StatusOr<model::RegistrationReply> Register(const model::AgentRegistration& registration) override;
  StatusOr<model::AssignmentBatch> NextAssignments(uint32_t node_id, uint64_t session,
                                                   int64_t timeout_us) override;
  Status ConnectAssignments(uint32_t node_id, uint64_t session, std::shared_ptr<rpc::AssignmentSink> sink) override;
  StatusOr<bool> Heartbeat(const model::AgentHeartbeat& heartbeat) override;
  Status Leave(uint32_t node_id, uint64_t session) override;
  StatusOr<std::string> NodeName(uint32_t node_id) override;
  // How often agents are to heartbeat now: the configured interval, stretched with
  // the number of live nodes so that all of them together send at most about
  // kIdleHeartbeatsPerSecond (docs/runtime.md, "At scale"). Takes no lock.
  int64_t HeartbeatIntervalUs() override;
  // Nodes alive now (for /readyz). Takes no lock.
  int32_t LiveNodes() const { return live_nodes_.load(std::memory_order_relaxed); }

  // rpc::AuthApi (auth.cc)
  StatusOr<model::Caller> Authenticate(const std::string& token) override;
  StatusOr<rpc::NewToken> CreateToken(const std::string& user, const std::string& tenant, model::Role role,
                                      int64_t ttl_us) override;
  std::vector<model::TokenRecord> ListTokens() override;
  StatusOr<model::TokenRecord> RevokeToken(const std::string& id) override;
  StatusOr<std::pair<std::string, std::string>> Join(const std::string& token, const std::string& node,
                                                     const std::string& csr_pem) override;

  // rpc::AdminApi
  std::vector<model::NodeView> ListNodes() override;
  std::vector<model::TenantView> ListTenants() override;
  rpc::HttpEndpoints Endpoints() override;
  // Set once its HTTPS listener is up (cli's RunCoordinator).
  void SetEndpoints(rpc::HttpEndpoints endpoints);

  // The index of job `id`'s task called `task`, from memory or the store; NotFound
  // names the job or the task missing.
  StatusOr<uint32_t> FindTaskIndex(uint64_t id, const std::string& task);

  // Entries of the commit queue waiting for the committer (a gauge in /metrics). Takes
  // no lock but the queue's.
  size_t CommitsQueued();
  // Tasks whose state is held in memory: those of jobs not yet finished (a finished
  // job's are in the store only). For metrics and tests.
  size_t TasksInMemory();

  // Its figures in Prometheus's text format, for /metrics (metrics.cc; the names and
  // what each means: docs/observability.md). Jobs come from their published heads
  // (heads_mu_ for one pass over them); the state's lock is held for one pass over
  // nodes and objects (not over jobs or tasks).
  void WriteMetrics(http::Exposition& out);
  // Where node `name`'s agent serves /metrics, and its site. NotFound: no such node;
  // FailedPrecondition: its agent serves none, or it is dead.
  StatusOr<std::pair<std::string, std::string>> NodeMetricsUrl(const std::string& name);
  // Every live node with a /metrics listener: name, site.
  std::vector<std::pair<std::string, std::string>> NodesWithMetrics();
  // The fleet's sites and links (nodes apart: ListNodes has them), for the dashboard.
  model::Fleet SitesAndLinks();

  // rpc::ObjectApi (objects.cc): the directory of objects and their replicas.
  StatusOr<model::ObjectLocation> Locate(const model::Caller& caller, const std::string& ref, uint64_t job_id,
                                         const std::string& task) override;
  StatusOr<model::ObjectReplica> PlacePut(const model::Caller& caller, int64_t size, const std::string& site) override;
  StatusOr<model::ObjectLocation> Commit(const model::Caller& caller, const std::string& id, int64_t size,
                                         uint32_t node_id, const std::string& name, const std::string& receipt) override;
  std::vector<model::ObjectLocation> ListObjects(const model::Caller& caller) override;
  StatusOr<model::ObjectLocation> DeleteObject(const model::Caller& caller, const std::string& id) override;
  StatusOr<model::DatasetView> DefineDataset(const model::Caller& caller, const std::string& name,
                                             const std::vector<model::HeldObject>& shards) override;
  StatusOr<model::DatasetView> GetDataset(const model::Caller& caller, const std::string& name) override;
  std::vector<model::DatasetView> ListDatasets(const model::Caller& caller) override;

 private:
  struct TaskRt {
    model::TaskRecord rec;
    // The latest attempt as it stands (its number, node, site and start are rec's);
    // earlier ones are in the store only. An empty outcome: no attempt yet.
    std::string attempt_outcome;
    std::string attempt_reason;
    int32_t attempt_exit_code = 0;
    int64_t attempt_ended_us = 0;
    std::vector<uint32_t> dependents;
    int32_t deps_left = 0;
    int64_t seq = -1;        // key in ready_ while queued
    // Monotonic: when it last joined the queue (placement latency, fallbacks); after a
    // restart, as long before the restart as it had waited then.
    int64_t queued_us = 0;
    int32_t node = -1;       // index in nodes_ while it holds resources there
    int32_t input_losses = 0;  // attempts stopped because an input could not be fetched
    // The estimated cost of this attempt, counted against its tenant's budget while
    // it runs (the egress part apart); when it ends, what it ran counts instead.
    int64_t charged_micro_usd = 0;
    int64_t charged_egress_micro_usd = 0;
    // The running attempt's output so far, from its agent's reports (`job logs -f`);
    // null until it writes some, gone when the attempt ends (the store has its log).
    std::unique_ptr<model::TaskLogRecord> live;
    // The newest checkpoint its current attempt reported (id empty: none): a later
    // attempt is given it. In memory only: after a coordinator restart a task starts
    // afresh.
    model::HeldObject checkpoint;
    // Each attempt's newest checkpoint and the node whose store holds a reference for
    // it, released when a later attempt reports one or the job ends.
    struct CheckpointCopy {
      int32_t node = -1;
      int32_t attempt = 0;
      std::string id;
    };
    std::vector<CheckpointCopy> checkpoint_copies;
  };
  struct JobRt {
    model::JobRecord rec;
    std::unique_ptr<model::Job> job;  // the parsed spec; null if it no longer parses
    // `job` with its fallback regions allowed too, for its tasks that have waited
    // their `fallback.after` (made when first needed; null until then).
    std::unique_ptr<model::Job> fallback_job;
    std::vector<TaskRt> tasks;
    model::JobSummary counts;         // counters only; rec is the source of the rest
    std::map<std::string, int32_t> running_by_site;
    // Input bytes its tasks moved, by (from site, to site). In memory only.
    std::map<std::pair<std::string, std::string>, model::JobTraffic> traffic;
    int32_t held = 0;  // tasks holding resources on a node
    // Finished with nothing left on a node: `tasks` and `job` are gone from memory,
    // and its tasks are read from the store (a finished job costs its record only).
    bool retired = false;
    bool deleting = false;
    std::vector<model::SiteBytes> input_bytes;  // where its inputs sat when it was submitted
    // Why queued tasks were not placed in the last pass that offered them (a quota,
    // no room): in memory only, shown by GetJob; a placed task's goes.
    std::map<uint32_t, std::string> waiting;
    // The tasks whose running attempt's output so far is held (TaskRt::live): a page
    // of logs looks at these, not at every task.
    std::set<uint32_t> live_logs;
    // Clients watching it (JobService.Watch), pushed its summary when it changed.
    std::vector<std::shared_ptr<rpc::JobWatchSink>> watchers;
    bool watch_dirty = false;  // listed in watch_dirty_
    bool head_dirty = false;   // listed in head_dirty_
  };
  struct NodeRt {
    std::string site;
    bool alive = false;
    bool left = false;  // its agent left the pool (Leave) rather than fell silent
    uint64_t session = 0;
    MonotonicTime last_heartbeat;
    int64_t registered_us = 0;
    std::set<std::string> kernels;
    std::set<std::pair<uint64_t, uint32_t>> tasks;  // held here
    model::AssignmentBatch outbox;  // made, not yet handed to the agent's stream
    bool outbox_dirty = false;      // listed in outbox_dirty_
    // The agent's assignment stream, where its work goes as it is made; null: none
    // connected (a blocking NextAssignments takes the outbox instead).
    std::shared_ptr<rpc::AssignmentSink> sink;
    // When its stream was found closed with none connected since: its agent is taken
    // for gone once that has lasted the configured heartbeat timeout with no heartbeat.
    std::optional<MonotonicTime> stream_lost_at;
    int32_t running = 0;
    double load_average = 0;
    std::string transfer_address;
    std::string metrics_url;  // its agent's /metrics; empty: none
    std::set<std::string> objects;                       // ids of the objects it holds
    // A task could not reach its transfer server: until then its replicas are not
    // offered (it is dead and about to be declared so, or cut off for a while), so
    // tasks wait, or their inputs are made again, rather than retry it at once.
    MonotonicTime unreachable_until;
    std::map<std::string, model::LinkTraffic> traffic;   // by destination site
  };
  struct ObjectRt {
    int64_t size = 0;
    std::string name;
    std::set<int32_t> nodes;  // holding a replica
    // Tenants that may read it: those whose tasks made it, who put it, or whose name
    // names it. In memory only (a name's tenant is stored with the name); after a
    // restart a task's output is readable through its job (Locate's job_id).
    std::set<std::string> tenants;
    // Each put of it by a tenant since this coordinator started (a Commit with the
    // put's receipt): the node it went to, one entry per put. DeleteObject undoes
    // them one at a time. In memory only.
    std::map<std::string, std::vector<int32_t>> puts;
  };
  // A task placed before a restart whose agent has not registered yet.
  struct Orphan {
    std::string node;
    MonotonicTime deadline;
  };

  Coordinator(CoordinatorOptions options, std::unique_ptr<store::StateStore> store, Env& env);
  Status LoadState();
  void Loop();
  // One turn of Loop; may release the lock while it deletes expired jobs.
  void TurnLocked(std::unique_lock<std::mutex>& lock);
  // Waits until every entry of the commit queue up to `seq` is stored and its effects
  // have run. The first caller to find work becomes the committer: it takes every entry
  // queued so far and stores them in one transaction (group commit), then runs their
  // effects in order, while the others wait for it (and one of them takes what was
  // queued meanwhile). Never called with mu_ held.
  void AwaitStored(uint64_t seq);
  // AwaitStored for all that was queued up to now: what a call saw or changed under
  // mu_ is stored before it answers (StateMutex::unlock calls it).
  void AwaitQueued() { AwaitStored(queued_seq_.load(std::memory_order_acquire)); }
  // Declared before a raw lock of mu_ (for a condition variable's wait): once that lock
  // is let go, waits as StateMutex::unlock does.
  struct AwaitAtExit {
    Coordinator& c;
    ~AwaitAtExit() { c.AwaitQueued(); }
  };

  // All below: called with mu_ held.
  StatusOr<SiteId> SiteFor(const model::AgentRegistration& reg);
  // Whether the node's free resources hold the allocation.
  bool Fits(int32_t node, const model::TaskAllocation& a) const;
  // The node's index, added or updated; tasks it can no longer hold are lost.
  int32_t UpsertNode(model::Node node, store::StoreBatch& batch);
  // Squares what the coordinator thinks runs on a (re)registering node with what the
  // agent reports: adopts, applies, loses, and lists what the agent should cancel.
  void Reconcile(int32_t index, const model::AgentRegistration& reg, store::StoreBatch& batch,
                 model::RegistrationReply& reply);
  void ScheduleLocked();
  void DetectFailuresLocked();
  // The node's outbox, marked to be handed to its stream by FlushOutboxesLocked.
  model::AssignmentBatch& OutboxLocked(int32_t node);
  // Queues every marked outbox to be pushed to its node's stream once all queued
  // before it is stored (Commit does so with its batch: no agent hears of anything
  // before it is stored).
  void FlushOutboxesLocked();
  // Queues the summary of every watched job that changed for its watchers (closing
  // them once it has finished), likewise pushed once what came before is stored.
  void FlushWatchersLocked();
  // What a commit queue entry makes due once it is stored: outboxes for node streams,
  // summaries for job watchers.
  struct OutboxPush {
    std::shared_ptr<rpc::AssignmentSink> sink;
    int32_t node = 0;
    uint64_t session = 0;
    model::AssignmentBatch batch;
  };
  struct WatchPush {
    std::vector<std::shared_ptr<rpc::JobWatchSink>> sinks;
    model::JobSummary summary;
    bool close = false;  // the job finished: the watch ends after it
  };
  // A job as client reads see it: made under mu_ when the next commit queue entry after
  // a change to the job is queued (EnqueueLocked), and published in heads_ by the
  // committer once that entry and all before it are stored, before the entry's pushes.
  // That entry holds the change: every operation commits what it changed at its end,
  // before a later one queues anything (Heartbeat: its reports, then what
  // ScheduleLocked placed). Never changed once made.
  struct JobHead {
    model::JobSummary summary;
    std::vector<model::JobTraffic> traffic;
    std::vector<model::SiteBytes> input_bytes;
  };
  struct PendingCommit {
    uint64_t seq = 0;
    store::StoreBatch batch;
    std::vector<OutboxPush> outboxes;
    std::vector<WatchPush> watches;
    // Jobs' new heads, by id; null: the job is gone.
    std::vector<std::pair<uint64_t, std::shared_ptr<const JobHead>>> heads;
  };
  // Marks the job's head to be made again (Changed does, for every change clients see).
  void HeadChangedLocked(JobRt& job);
  // Into `entry`: the heads of the jobs marked since the last call (null for those
  // deleted).
  void TakeHeadsLocked(PendingCommit& entry);
  // The end of a section under mu_ (StateMutex::unlock; the loop's turns; the give-back
  // of outboxes): heads of jobs changed since its last entry (a change in memory only)
  // are queued in one of their own.
  void EndSectionLocked();
  // Job `id`'s published head; null: no such job (or not yet stored). Takes heads_mu_.
  std::shared_ptr<const JobHead> HeadOf(uint64_t id);
  // FlushOutboxesLocked's and FlushWatchersLocked's work, into `entry`. A node with no
  // stream keeps its outbox (and blocking waiters are woken); watchers that left go.
  void TakeOutboxesLocked(PendingCommit& entry);
  void TakeWatchersLocked(PendingCommit& entry);
  // Queues `entry` (mu_ held), with the heads of the jobs changed since the last entry,
  // unless it holds nothing.
  void EnqueueLocked(PendingCommit entry);
  // The pushes of stored entries, in order (the committer, without mu_). An outbox
  // whose stream ended meanwhile goes back to its node, for its next stream; the
  // newest entry queued then (0: none) is returned.
  uint64_t RunEffects(std::vector<PendingCommit>& entries);
  // Ends the node's stream, if one is connected: its session is over.
  void CloseSinkLocked(NodeRt& node, const Status& why);
  // How long a node may stay silent at the current heartbeat interval.
  int64_t HeartbeatTimeoutUs();
  // Queues `batch` to be stored (with the jobs created and the spend rows not written
  // yet), with the outboxes and watchers' summaries it makes due: they go out once it
  // is stored. The write is made without mu_ (AwaitStored, once the call lets it go).
  void Commit(store::StoreBatch&& batch);
  // The submitted job, stored, in memory: its tasks queued (or blocked on others).
  void InstallJobLocked(model::JobRecord rec, model::Job job);
  // OK when every task could run on the registered fleet; else why one cannot.
  Status CheckFeasibleLocked(const model::Job& job);
  // The fleet's pools (made when first needed after it changed).
  const std::shared_ptr<const sched::PoolIndex>& PoolsLocked();
  // Forgets what was worked out from the fleet: a node registered or died.
  void FleetChangedLocked();
  model::TaskAssignment AssignmentFor(const JobRt& job, const TaskRt& task) const;
  // A gang member's view of its gang, as placed now (every member is, once one is).
  model::GangInfo GangInfoLocked(const JobRt& job, const model::Task& spec) const;
  // Queues a task that stopped without succeeding (`why`) to run again. A gang's
  // member takes its gang with it: the other members are stopped and queued too, so
  // the gang starts afresh together; or, per the job's policy (or a member that
  // finished already), the task fails and with it the job.
  void RunAgainLocked(JobRt& job, TaskRt& task, const std::string& why, store::StoreBatch& batch);
  void Enqueue(TaskRt& task);
  void Dequeue(TaskRt& task);
  void Release(TaskRt& task);
  void Hold(TaskRt& task, int32_t node);
  // Counters for a task that stops being assigned or running.
  void LeavePlaced(JobRt& job, TaskRt& task);
  void ApplyUpdate(const model::TaskUpdate& update, int32_t node, store::StoreBatch& batch);
  // A checkpoint an attempt of `task` kept on `node` (scheduling.cc).
  void KeepCheckpointLocked(JobRt& job, TaskRt& task, const model::TaskUpdate& update, int32_t node);
  // Tells the nodes holding `task`'s checkpoints of attempts before `before` to drop them.
  void ReleaseCheckpointsLocked(TaskRt& task, int32_t before);
  void Succeed(JobRt& job, TaskRt& task, const model::TaskUpdate& update, store::StoreBatch& batch);
  void FailAttempt(JobRt& job, TaskRt& task, const model::TaskUpdate& update, store::StoreBatch& batch);
  void LoseAttempt(JobRt& job, TaskRt& task, const std::string& reason, store::StoreBatch& batch);
  // An attempt stopped because inputs could not be fetched: copies its agent found
  // missing or damaged leave the directory, lost outputs are made again, and the
  // task runs again once its inputs are there (at most kMaxInputLosses times).
  void LoseInputs(JobRt& job, TaskRt& task, const model::TaskUpdate& update, store::StoreBatch& batch);
  // The task fails for `reason` (it was lost, or its inputs were, too often), and so
  // does its job.
  void GiveUp(JobRt& job, TaskRt& task, const std::string& reason, store::StoreBatch& batch);
  void Requeue(JobRt& job, TaskRt& task, store::StoreBatch& batch);
  void EndJob(JobRt& job, model::JobStatus status, const std::string& reason, store::StoreBatch& batch);
  // Output datasets (Task::output_dataset): a job's names must be free when it is
  // submitted, and stay its own while it runs; when it succeeds its outputs become
  // them (an error, which fails the job, when an output is missing).
  Status CheckOutputDatasetsLocked(const model::Job& job, const std::string& spec_name) const;
  // A service's name is the cluster's (docs/serving.md, "Services"): a replica job
  // (spec::ParseReplicaJobName) is refused while a live replica job of the same
  // service is another tenant's.
  Status CheckServiceNameLocked(const model::Job& job) const;
  void ReserveOutputDatasetsLocked(uint64_t job_id, const model::Job& job);
  Status DefineOutputDatasetsLocked(JobRt& job, store::StoreBatch& batch);
  void ReleaseOutputDatasetsLocked(uint64_t job_id);
  // Drops the per-task state of finished jobs with nothing left on a node. Called
  // where no TaskRt reference is live: at the end of a public call or a loop turn.
  void RetireFinishedLocked();
  // Finished jobs the retention policy says go now, oldest first.
  std::vector<uint64_t> ExpiredJobsLocked() const;
  void AddLiveOutput(JobRt& job, TaskRt& task, const model::TaskUpdate& u);
  void EndAttempt(JobRt& job, TaskRt& task, const std::string& outcome, const std::string& reason, int32_t exit_code,
                  store::StoreBatch& batch);
  // The record of the task's latest attempt, to be stored.
  static model::AttemptRecord LatestAttempt(const TaskRt& task);
  // Out of the pool: its tasks run elsewhere and its objects are gone. `left`: its
  // agent asked to leave (logged as such), rather than it fell silent.
  void MarkDead(int32_t node, const std::string& reason, store::StoreBatch& batch, bool left = false);
  // The directory: replicas a node gained or lost, or all it holds (on registering).
  void AddReplicaLocked(int32_t node, const std::string& id, int64_t size);
  void DropReplicaLocked(int32_t node, const std::string& id);
  void DropAllReplicasLocked(int32_t node);
  model::ObjectLocation LocationLocked(const std::string& id, const ObjectRt& object) const;
  model::DatasetView DatasetLocked(const std::string& name) const;
  // Dataset `name` as a job of `tenant` (empty: any) sees it, if it may read it:
  // shards with the sites of their live replicas. Looked up one name at a time: the
  // cluster may hold many datasets (a Python call's large payload is one), and a job
  // names few.
  std::optional<model::Dataset> DatasetForJobLocked(const std::string& name, const std::string& tenant) const;
  // The parser's resolver over DatasetForJobLocked: one that takes mu_ for each lookup
  // (for a parse outside the lock), or one for a parse under it.
  spec::DatasetResolver DatasetResolverFor(const std::string& tenant);
  spec::DatasetResolver DatasetResolverLocked(const std::string& tenant) const;
  // Object `id` as a job of `tenant` (empty: any) reads it (object://ID): one the
  // tenant may read, with its size and the sites of its live replicas. And the
  // parser's resolver over it, as for datasets.
  std::optional<model::ObjectRef> ObjectForJobLocked(const std::string& id, const std::string& tenant) const;
  spec::ObjectResolver ObjectResolverFor(const std::string& tenant);
  // For the jobs a restart reads back, accepted when submitted: any id, with what the
  // directory knows of it now (before the agents register again, nothing).
  spec::ObjectResolver AcceptedObjectResolverLocked() const;
  // The put objects an unfinished job reads by id (object://ID), noted while it runs:
  // nobody may undo the last put of one (DeleteObject).
  void NoteObjectReadersLocked(uint64_t job_id, const model::Job& job);
  void ForgetObjectReadersLocked(uint64_t job_id);
  // Whether object or dataset `name` is `tenant`'s; whether `caller` may use it.
  bool NameIsOfLocked(const std::string& name, const std::string& tenant) const;
  bool NameIsCallersLocked(const model::Caller& caller, const std::string& name) const;
  // Whether `caller` may read object `id` (the directory's entry `o`, if any).
  bool MayReadLocked(const model::Caller& caller, const ObjectRt* o) const;
  // A read ticket for `ids` of `tenant`, for the transfers of a client or an agent.
  std::string ReadTicketLocked(const std::string& tenant, const std::vector<std::string>& ids,
                               int64_t life_us) const;
  // Names and datasets from the store (their replicas come with the agents).
  void LoadNames(const std::vector<model::ObjectName>& names);
  std::vector<model::EmulatedLink> LinksFrom(SiteId site) const;
  // What moving `bytes` from one site to another costs in egress, in micro-dollars.
  int64_t EgressMicroUsd(const std::string& from, const std::string& to, int64_t bytes) const;
  // Lineage: whether the task's dependencies' output objects all have a live replica;
  // re-running a succeeded task whose output was lost (and, first, those of its own
  // dependencies that are lost too), with the tasks that wait for it waiting again.
  bool HasLiveReplicaLocked(const std::string& id) const;
  // Whether a replica of the object can be read now: its node is alive and was not
  // just reported unreachable by a task that tried (see NodeRt::unreachable_until).
  bool Readable(int32_t node) const;
  bool HasReadableReplicaLocked(const std::string& id) const;
  // What the scheduler weighs a task's placement by: its input objects, and its
  // dependencies' outputs at the sites where they ran.
  std::vector<model::ObjectRef> InputsForScheduling(const JobRt& job, const TaskRt& task) const;
  // Whether its dependencies' outputs and its input objects can be read now (an input
  // whose only holders are live but unreachable is waited for).
  bool DepOutputsAvailableLocked(const JobRt& job, const TaskRt& task) const;
  void RebuildLocked(JobRt& job, uint32_t task, const std::string& reason, store::StoreBatch& batch);
  // Rebuilds the producers of objects that just lost their last replica.
  void RebuildLostLocked(const std::set<std::string>& ids, const std::string& reason, store::StoreBatch& batch);
  // Counts `bytes` read at `to` from `from` against the job.
  void AddTraffic(JobRt& job, const std::string& from, const std::string& to, int64_t bytes);
  // Schedules again at `at`, or sooner if asked for sooner.
  void RecheckAt(MonotonicTime at);
  // When the queued task may run in its job's fallback regions too: its fallback's
  // `after` since it joined the queue. nullopt: it is not in the queue, or the job has
  // no fallback.
  std::optional<MonotonicTime> FallbackAtLocked(const JobRt& job, const TaskRt& task) const;
  // The job with its fallback regions allowed too (JobRt::fallback_job).
  const model::Job& FallbackJobLocked(JobRt& job);
  std::vector<model::SiteBytes> InputBytesBySite(const model::Job& job) const;
  void Changed(JobRt& job);
  model::JobSummary SummaryOf(const JobRt& job) const;
  std::string TaskName(const JobRt& job, uint32_t task) const;
  // Adds (sign 1) or takes back (-1) an allocation in its tenant's usage.
  void CountTenantUsage(const std::string& tenant, const model::TaskAllocation& a, int32_t node, int sign);
  // Adds an ended attempt's cost to what `tenant` spent today; written with the next
  // Commit. The day is UTC, by the wall clock; a new day starts from nothing.
  void ChargeLocked(const std::string& tenant, int64_t micro_usd);
  // What `tenant` spent today, and what its running attempts are estimated to cost.
  int64_t SpentTodayLocked(const std::string& tenant);
  // The cost of `task`'s attempt on `node` as it ran until now: its share of the
  // node's price for the time since it started, and the egress it was charged.
  int64_t RanCostLocked(const JobRt& job, const TaskRt& task, int32_t node) const;
  // A registration checked against options_.declared_nodes.
  Status CheckAgainstFleet(const model::AgentRegistration& reg) const;
  // Refuses reports on attempts node `index` (-1: not yet registered) does not hold.
  Status CheckReportsLocked(int32_t index, const std::string& name, const std::vector<model::TaskUpdate>& updates) const;
  // The task's name for a job that may be gone or out of memory ("#N" without its spec:
  // stored before names were).
  std::string TaskNameLocked(uint64_t job, uint32_t task) const;
  int64_t WallUs() const { return env_.clock().WallNow().us; }

  const CoordinatorOptions options_;
  const std::unique_ptr<store::StateStore> store_;
  Env& env_;
  const sched::Policy policy_;

  // The state's lock. Letting it go waits until all queued to be stored so far is
  // stored and its effects have run (AwaitQueued): whatever a call saw or changed under
  // it, its answer leaves only once that is stored, yet the store's write is made
  // without it (group commit, AwaitStored). The condition variables' waits take raw().
  class StateMutex {
   public:
    explicit StateMutex(Coordinator& owner) : owner_(owner) {}
    void lock() { mu_.lock(); }
    bool try_lock() { return mu_.try_lock(); }
    void unlock() {
      owner_.EndSectionLocked();
      mu_.unlock();
      owner_.AwaitQueued();
    }
    std::mutex& raw() { return mu_; }

   private:
    Coordinator& owner_;
    std::mutex mu_;
  };
  StateMutex mu_{*this};
  // The commit queue: entries made under mu_, in order, stored by AwaitStored's
  // committer. queued_seq_ is the newest entry's, stored_seq_ the newest stored (and its
  // effects run). Lock order: mu_ (or none), commit_mu_, mu_.raw() (an outbox going
  // back), queue_mu_.
  std::mutex commit_mu_;  // held by the committer
  std::mutex queue_mu_;
  std::vector<PendingCommit> queue_;  // guarded by queue_mu_
  std::atomic<uint64_t> queued_seq_{0};  // written under queue_mu_
  std::atomic<uint64_t> stored_seq_{0};  // written under commit_mu_
  // When each node's newest heartbeat arrived, noted before it waits for mu_: one that
  // came while the coordinator stalled (mu_ held by a long placement, a commit its
  // answer waits for, or the process starved of CPU) counts from its arrival, so that the failure check, which
  // may take mu_ first when the stall ends, does not charge the coordinator's own
  // stall to the node. By node id: its session (a heartbeat of another is not noted),
  // the time, and how many of its heartbeats arrived and are not yet answered. While
  // one waits, the node is not silent, however long the stall: its agent sends the
  // next only once this one is answered. Lock order: mu_, then heard_mu_ (Heartbeat
  // takes heard_mu_ alone).
  struct Heard {
    uint64_t session = 0;
    MonotonicTime at;
    int32_t waiting = 0;
  };
  std::mutex heard_mu_;
  std::vector<Heard> heard_;
  std::condition_variable loop_cv_;    // work for the loop
  std::condition_variable outbox_cv_;  // work for blocking NextAssignments calls
  bool stopping_ = false;
  bool dirty_ = true;                  // something the scheduler should look at changed
  model::Fleet fleet_;                 // sites from the options, nodes as they register
  std::shared_ptr<const sched::PoolIndex> pools_;  // these three: see FleetChangedLocked
  std::optional<std::set<std::string>> fleet_kernels_;  // the kernels of every node
  std::optional<sched::ResourceLedger> empty_ledger_;   // the fleet's resources, all free
  sched::ResourceLedger ledger_;
  std::vector<NodeRt> nodes_;          // parallel to fleet_.nodes
  std::map<std::string, int32_t> node_by_name_;
  std::vector<int32_t> outbox_dirty_;  // nodes whose outbox gained work since the last flush
  std::vector<uint64_t> watch_dirty_;  // watched jobs changed since the last flush
  std::vector<uint64_t> head_dirty_;   // jobs changed or deleted since the last entry (TakeHeadsLocked)
  // The published heads: what client reads of jobs see, by id (JobHead). Written by the
  // committer, read by those calls without mu_; a reader copies the pointers it needs
  // and lets go before it makes its answer. heads_cv_: heads_ changed (WaitJob). A
  // leaf: no lock is taken under heads_mu_.
  std::mutex heads_mu_;
  std::condition_variable heads_cv_;
  std::map<uint64_t, std::shared_ptr<const JobHead>> heads_;  // guarded by heads_mu_
  bool heads_closed_ = false;  // guarded by heads_mu_: shutting down
  // Alive nodes, for HeartbeatIntervalUs: written under mu_, read without it.
  std::atomic<int32_t> live_nodes_{0};
  std::map<uint64_t, JobRt> jobs_;
  // What tasks holding resources on nodes hold, by their job's tenant.
  std::map<std::string, sched::TenantUsage> tenant_usage_;
  int64_t spend_day_ = -1;                        // the UTC day spent_today_ is of
  std::map<std::string, int64_t> spent_today_;    // by tenant: ended attempts (stored)
  // By tenant: the estimates of its attempts running now (in memory only; after a
  // restart a running attempt counts once it ends, at what it ran).
  std::map<std::string, int64_t> running_estimate_;
  std::set<std::string> spend_unsaved_;           // tenants whose spend the store lacks
  std::vector<model::TenantSpend> spend_rows_;    // of days past, not stored yet
  uint64_t next_job_id_ = 1;                      // the next job's (ids are never reused)
  // Jobs submitted and in memory, to be stored by the next Commit with their first
  // placements (nobody sees them before they are stored: see StateMutex).
  std::vector<store::NewJob> new_jobs_;
  std::map<std::string, ObjectRt> objects_;        // by id
  std::map<std::string, std::string> object_names_;  // name -> id
  std::map<std::string, std::vector<model::HeldObject>> datasets_;  // name -> shards
  std::map<std::string, std::string> name_tenants_;  // object or dataset name -> its tenant
  std::set<std::string> dataset_objects_;  // ids that are shards of a dataset: never let go
  std::map<std::string, std::set<uint64_t>> object_readers_;  // object://ID -> unfinished jobs reading it
  std::map<std::string, uint64_t> output_datasets_reserved_;  // name -> the running job that will write it
  std::string ticket_key_;  // signs transfer tickets (objects/ticket.h); agents get it

  // Which tasks of running jobs made which output object.
  std::map<std::string, std::set<std::pair<uint64_t, uint32_t>>> producers_;
  // Ready tasks held back because a dependency's output has no live replica yet.
  std::set<std::pair<uint64_t, uint32_t>> awaiting_inputs_;
  std::map<int64_t, std::pair<uint64_t, uint32_t>> ready_;  // seq -> task, FIFO
  int64_t next_seq_ = 0;
  // Starts from the wall clock, so a session of an earlier incarnation never matches.
  uint64_t next_session_ = 1;
  uint64_t next_version_ = 1;
  std::map<std::pair<uint64_t, uint32_t>, Orphan> orphans_;
  std::set<uint64_t> to_retire_;       // finished, nothing on a node: RetireFinishedLocked's work
  MonotonicTime last_fleet_change_;    // start, or the last registration
  MonotonicTime last_node_lost_;       // the last node declared dead or gone
  MonotonicTime next_check_;           // of failures (TurnLocked)
  MonotonicTime next_retention_;       // of jobs past the retention policy (TurnLocked)
  std::optional<MonotonicTime> recheck_at_;  // schedule again then (infeasible tasks in the grace period)
  Random rng_;
  std::thread loop_;

  // Metrics: counters under mu_, histograms without it.
  uint64_t jobs_submitted_ = 0;
  uint64_t placements_ = 0;
  std::map<std::string, uint64_t> attempts_ended_;  // by outcome
  http::LatencyHistogram placement_latency_;        // a task's time in the queue, to its placement
  http::LatencyHistogram schedule_pass_;            // one scheduling call that had tasks to offer
  http::LatencyHistogram commit_latency_;           // one state-store transaction
  // Transactions the committer made, and the commit queue entries they stored.
  std::atomic<uint64_t> commit_transactions_{0};
  std::atomic<uint64_t> commit_entries_{0};

  std::mutex endpoints_mu_;
  rpc::HttpEndpoints endpoints_;  // guarded by endpoints_mu_

  // API tokens by id: a lock of their own, taken on every authenticated call.
  std::mutex auth_mu_;
  std::map<std::string, model::TokenRecord> tokens_;  // guarded by auth_mu_
};

}  // namespace meridian::coordinator
