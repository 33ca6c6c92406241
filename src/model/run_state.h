// The runtime's view of work in flight: the states jobs and tasks move through, and
// the records the coordinator keeps, stores and reports. Plain value types shared by
// the state store, the coordinator, the RPC translation and the client.
//
// Thread-safety: value types.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/fleet.h"

namespace meridian::model {

// queued -> running -> succeeded | failed | cancelled
enum class JobStatus { kQueued, kRunning, kSucceeded, kFailed, kCancelled };
// blocked (dependencies not done) -> queued -> assigned -> running -> succeeded;
// failed and cancelled end it; a lost or retried attempt goes back to queued.
enum class TaskStatus { kBlocked, kQueued, kAssigned, kRunning, kSucceeded, kFailed, kCancelled };

std::string_view JobStatusName(JobStatus s);
std::string_view TaskStatusName(TaskStatus s);
std::optional<JobStatus> ParseJobStatus(std::string_view name);
std::optional<TaskStatus> ParseTaskStatus(std::string_view name);
inline bool IsTerminal(JobStatus s) { return s == JobStatus::kSucceeded || s == JobStatus::kFailed || s == JobStatus::kCancelled; }
inline bool IsTerminal(TaskStatus s) { return s == TaskStatus::kSucceeded || s == TaskStatus::kFailed || s == TaskStatus::kCancelled; }
inline bool IsPlaced(TaskStatus s) { return s == TaskStatus::kAssigned || s == TaskStatus::kRunning; }

struct JobRecord {
  uint64_t id = 0;
  std::string name;
  std::string tenant;
  std::string spec_yaml;   // as submitted; re-parsed when the coordinator restarts
  std::string spec_name;
  JobStatus status = JobStatus::kQueued;
  std::string reason;      // why it failed or was cancelled
  int64_t submitted_us = 0;  // wall time
  int64_t finished_us = 0;
};

// What a placed attempt holds on its node.
struct TaskAllocation {
  int64_t cpu_milli = 0;
  int64_t memory_bytes = 0;
  std::vector<int32_t> devices;
  int32_t device_share_milli = 0;
};

struct TaskRecord {
  uint64_t job = 0;
  uint32_t task = 0;        // index in the job
  TaskStatus status = TaskStatus::kBlocked;
  int32_t attempt = 0;      // of the latest attempt; 0 before the first
  int32_t failures = 0;     // attempts that failed on their own (count against retries)
  int32_t losses = 0;       // attempts lost with their node or the coordinator
  std::string node;         // of the latest attempt
  std::string site;
  std::string device_type;
  bool emulated = false;
  TaskAllocation allocation;
  std::string reason;
  std::string output;       // a finished task's result (a preview when it is an object others read)
  int64_t started_us = 0;
  int64_t finished_us = 0;
  // The object holding its whole output on the node it ran on (empty output: none).
  std::string output_object = {};
};

// How one attempt went; kept for every attempt so retries are visible.
struct AttemptRecord {
  uint64_t job = 0;
  uint32_t task = 0;
  int32_t attempt = 0;
  std::string node;
  std::string site;
  std::string outcome;      // "running", "succeeded", "failed", "lost", "cancelled"
  std::string reason;
  int32_t exit_code = 0;
  int64_t started_us = 0;
  int64_t ended_us = 0;
};

struct TaskLogRecord {
  uint64_t job = 0;
  uint32_t task = 0;
  int32_t attempt = 0;
  std::string node;
  std::string stdout_tail;
  std::string stderr_tail;
  // Bytes each stream had in all, of which the tails are the end (0 in stores
  // written before they were kept: the tails' sizes then).
  int64_t stdout_bytes = 0;
  int64_t stderr_bytes = 0;
};
// A log with the name of its task. `running`: the attempt runs still and this is
// its output so far, held in the coordinator's memory (the store has it once the
// attempt ends).
struct TaskLog {
  std::string task;
  TaskLogRecord record;
  bool running = false;
};

// A job as reported to users.
struct JobSummary {
  JobRecord job;
  int32_t tasks_total = 0;
  int32_t waiting = 0;
  int32_t running = 0;
  int32_t succeeded = 0;
  int32_t failed = 0;
  int32_t cancelled = 0;
  int32_t retries = 0;
  uint64_t version = 0;
  std::map<std::string, int32_t> running_by_site;
};

// Adds `n` tasks in `status` to the summary's counts (waiting, running, succeeded,
// failed or cancelled) and to its total.
void CountTasks(JobSummary& summary, TaskStatus status, int32_t n);

struct TaskView {
  std::string name;
  bool result = false;  // no task of its job depends on it
  TaskRecord record;
  std::vector<AttemptRecord> history;
};

// Input bytes a job's tasks read from one site at another (from == to: read where
// they were), and the egress that cost.
struct JobTraffic {
  std::string from_site;
  std::string to_site;
  int64_t bytes = 0;
  int32_t objects = 0;
  int64_t egress_micro_usd = 0;
};
// The bytes of a job's distinct input objects held at a site.
struct SiteBytes {
  std::string site;
  int64_t bytes = 0;
};

struct JobView {
  JobSummary summary;
  std::vector<TaskView> tasks;  // a page of them when asked for, by index
  uint32_t next_task = 0;       // the index after the last in `tasks`
  std::vector<JobTraffic> traffic;
  std::vector<SiteBytes> input_bytes;  // where its input data sat at submission
};

// What an agent's transfer server has sent to one site, since it started.
struct LinkTraffic {
  std::string to_site;
  int64_t bytes = 0;
  int64_t transfers = 0;  // objects (or ranges of one) sent
  int64_t egress_micro_usd = 0;
  int64_t requests = 0;   // requests that paid the link's round trip (a batch is one)
  int64_t waited_us = 0;  // the round trips and jitter those requests waited, in all
};

// A node as the coordinator's registry sees it.
struct NodeView {
  Node node;
  std::string site;
  bool alive = false;
  bool left = false;  // not alive because its agent left the pool (idle), not silent
  int64_t heartbeat_age_us = 0;
  int32_t running = 0;
  int64_t cpu_allocated_milli = 0;
  int64_t memory_allocated_bytes = 0;
  int32_t devices_allocated_milli = 0;
  double load_average = 0;
  int64_t registered_us = 0;
  std::vector<LinkTraffic> sent;  // what its transfer server sent, by destination site
  std::string metrics_url;        // its agent's /metrics listener; empty: none
  std::string host;               // the address its agent advertises (its tasks listen there)
};
// "alive", "left" or "dead", as `meridian nodes` and the API show it.
inline const char* NodeStateName(const NodeView& n) { return n.alive ? "alive" : n.left ? "left" : "dead"; }

// ---- between the coordinator and its agents

// What one task carries back: its output, and the tail of its stdout and stderr.
// A larger kernel output (up to kMaxObjectOutputBytes) stays on its node as an object
// and travels as a preview.
inline constexpr size_t kMaxTaskOutputBytes = 1 << 20;
inline constexpr size_t kMaxObjectOutputBytes = size_t{1} << 30;
// A task's checkpoint ($MERIDIAN_CHECKPOINT_DIR/checkpoint) is kept as an object up to
// this size; a larger one is not kept, and the agent's log says so.
inline constexpr int64_t kMaxCheckpointBytes = int64_t{1} << 30;
inline constexpr size_t kMaxTaskLogTailBytes = 64 << 10;
// Cuts a log stream down to its last kMaxTaskLogTailBytes.
inline void KeepLogTail(std::string& stream) {
  if (stream.size() > kMaxTaskLogTailBytes) stream.erase(0, stream.size() - kMaxTaskLogTailBytes);
}
// An output kept as an object travels as its first kOutputPreviewBytes; one shorter
// than that travels whole, and its dependents read it from the coordinator, never
// from the object.
inline constexpr size_t kOutputPreviewBytes = 4 << 10;

// Whether `output` is the whole of a finished task's output (else it is the preview
// of `output_object`): dependents then read it from the coordinator, fetching nothing.
inline bool OutputWholeInline(const std::string& output, const std::string& output_object) {
  return output_object.empty() || output.size() < kOutputPreviewBytes;
}

// One attempt at one task.
struct TaskKey {
  uint64_t job = 0;
  uint32_t task = 0;
  int32_t attempt = 0;
  friend auto operator<=>(const TaskKey&, const TaskKey&) = default;
};

// An object an agent holds: its id (32 hex digits) and size.
struct HeldObject {
  std::string id;
  int64_t size = 0;
  friend bool operator==(const HeldObject&, const HeldObject&) = default;
};

// Where an object is: its size and the nodes holding it.
struct ObjectReplica {
  uint32_t node_id = 0;
  std::string node;
  std::string site;
  std::string transfer_address;
  std::string ticket = {};  // PlacePut's answer: the put ticket for that node (objects/ticket.h)
};
struct ObjectLocation {
  std::string id;
  std::string name;  // empty when unnamed
  int64_t size = 0;
  std::vector<ObjectReplica> replicas;
  std::string ticket = {};  // to a client: the read ticket its transfers show
};
struct DatasetView {
  std::string name;
  std::vector<ObjectLocation> shards;
};

// A gang member's view of its gang: where every rank runs, and where rank 0 listens
// (MASTER_ADDR and MASTER_PORT for PyTorch; a peer list for MPI and the like).
struct GangMember {
  std::string node;
  std::string site;
  std::string host;  // the address its node's agent advertises to other nodes
};
struct GangInfo {
  std::string name;  // empty: not in a gang
  uint32_t rank = 0;
  std::vector<GangMember> members;  // by rank; the world size is their count
  std::string master_addr;          // rank 0's host
  int32_t master_port = 0;          // chosen by the coordinator for this run of the gang
  // Proves a launch between members of this run (`meridian gang`, docs/training.md):
  // the members' agents hand it to their commands only.
  std::string secret;
  // The job's gang_failure: "restart", "fail" or "elastic" (MERIDIAN_GANG_FAILURE).
  std::string failure = "restart";
};

struct TaskAssignment {
  TaskKey key;
  std::string job_name;
  std::string task_name;
  uint32_t index = 0;
  std::string kernel;
  std::vector<std::string> command;
  std::map<std::string, std::string> args;
  std::map<std::string, std::string> env;  // a command's environment variables (the spec's `env`)
  std::vector<std::string> inputs;  // outputs of its dependencies, in order
  std::vector<ObjectLocation> input_objects;  // objects it reads (before `inputs`), and where they are
  // Parallel to `inputs`: where a dependency's output is an object, its location (and
  // the entry in `inputs` is a preview); an empty id means `inputs` has it whole, and
  // its one replica names the node and site that made it.
  std::vector<ObjectLocation> dep_objects;
  std::string device_type;
  TaskAllocation allocation;
  int64_t timeout_us = 0;
  int64_t stop_grace_us = 0;  // stopped: SIGTERM, then SIGKILL this long after (0: at once)
  std::string tenant;  // whose job it is: a command runs as that tenant's user
  GangInfo gang;
  // The newest checkpoint an earlier attempt left (id empty: none), fetched like an
  // input and given to a command as the file $MERIDIAN_CHECKPOINT.
  ObjectLocation checkpoint;
};

struct AssignmentBatch {
  std::vector<TaskAssignment> assignments;
  std::vector<TaskKey> cancel;
  std::vector<std::string> release_objects;  // task outputs no longer needed (their job ended)
};

enum class UpdateKind { kRunning, kSucceeded, kFailed, kCancelled };

// An input object an agent fetched for a task: from which site to which, how much.
struct InputTransfer {
  std::string object_id;
  std::string from_site;
  std::string to_site;
  int64_t bytes = 0;
  double seconds = 0;
};

// An input object an attempt could not fetch from any replica it was given, and the
// nodes whose copies turned out to be missing or damaged (not merely unreachable).
struct LostInput {
  std::string object_id;
  std::vector<std::string> damaged_nodes;
};

struct TaskUpdate {
  TaskKey key;
  UpdateKind kind = UpdateKind::kRunning;
  int32_t exit_code = 0;
  std::string reason;
  std::string output;
  // With kRunning: the output that came since the last report (the newest part of
  // it); otherwise the end of each stream. The byte counts are each stream's total
  // up to the tail's end.
  std::string stdout_tail;
  std::string stderr_tail;
  int64_t stdout_bytes = 0;
  int64_t stderr_bytes = 0;
  std::vector<InputTransfer> transfers;  // the input objects it fetched
  HeldObject output_object;              // its output, stored on the node (id empty if none)
  // Its newest checkpoint ($MERIDIAN_CHECKPOINT_DIR/checkpoint), stored on the node
  // (id empty: none new since the last report).
  HeldObject checkpoint;
  // With kCancelled: inputs that could not be fetched; the attempt is lost, not failed.
  std::vector<LostInput> lost_inputs;
};


// A link the agent's transfers emulate (a local cluster playing several sites).
struct EmulatedLink {
  std::string to_site;
  int64_t rtt_us = 0;
  int64_t bandwidth_bps = 0;
  int64_t egress_micro_usd_per_gb = 0;
  int64_t jitter_us = 0;  // each request waits rtt plus a uniform 0 to this
};

// A tenant as the coordinator sees it: the fleet's weight and quotas (0: none) and
// what its jobs hold and wait for now.
struct TenantView {
  std::string name;
  int64_t weight = 1;
  int64_t max_gpu_milli = 0;
  int64_t max_cpu_milli = 0;
  int64_t max_memory_bytes = 0;
  bool listed = false;  // the fleet file declares it
  int64_t gpu_milli = 0;
  int64_t cpu_milli = 0;
  int64_t memory_bytes = 0;
  int32_t jobs_active = 0;  // queued or running
  int32_t tasks_running = 0;
  int32_t tasks_waiting = 0;
  std::map<std::string, int64_t> max_gpu_milli_by_type = {};  // quotas by accelerator type
  std::map<std::string, int64_t> gpu_milli_by_type = {};      // held now, by type
  int64_t budget_micro_usd_per_day = 0;                        // 0: none
  int64_t spent_today_micro_usd = 0;                           // UTC day
};

struct AgentRegistration {
  Node node;
  std::string site;
  std::vector<std::string> kernels;
  std::vector<TaskKey> running;
  std::vector<TaskUpdate> unacked;
  std::string transfer_address;     // host:port of its object transfer server
  std::vector<HeldObject> objects;  // every object it holds
  uint64_t previous_session = 0;    // the session this agent held before, if any
  std::string metrics_url;          // its /metrics listener ("https://host:port"); empty: none
};

struct RegistrationReply {
  uint32_t node_id = 0;
  uint64_t session = 0;
  int64_t heartbeat_interval_us = 0;
  std::vector<TaskKey> cancel;
  std::vector<EmulatedLink> links;  // empty unless the coordinator emulates the WAN
  std::string ticket_key = {};      // the key of the tickets its transfer server honours
};

struct AgentHeartbeat {
  uint32_t node_id = 0;
  uint64_t session = 0;
  std::vector<TaskUpdate> updates;
  int32_t running = 0;
  int64_t cpu_used_milli = 0;
  double load_average = 0;
  // Every attempt the agent has, running or finished but unacknowledged; the
  // coordinator sends again what it placed there long enough ago and is missing.
  std::vector<TaskKey> holding;
  // Objects gained and dropped since the last acknowledged heartbeat.
  std::vector<HeldObject> objects_added;
  std::vector<std::string> objects_removed;
  std::vector<LinkTraffic> traffic;  // totals since the agent started
};

// A name given to an object (shard -1), or shard `shard` of the dataset `name`.
// What a tenant's tasks cost on one day (UTC, days since 1970-01-01): placed tasks at
// their estimate, ended ones at what they ran.
struct TenantSpend {
  std::string tenant;
  int64_t day = 0;
  int64_t micro_usd = 0;
};

struct ObjectName {
  std::string name;
  int32_t shard = -1;
  HeldObject object;
  std::string tenant = {};  // whose it is: only that tenant (and admins) read it
};


}  // namespace meridian::model
