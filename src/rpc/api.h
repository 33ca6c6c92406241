// The plain C++ interfaces behind meridian.v1's services. The coordinator implements
// them; src/rpc/server.cc hosts them over gRPC, translating at the edge, so the
// coordinator never sees protobuf and its logic can be tested without a network.
//
// Thread-safety: implementations must accept calls from many threads at once.
#pragma once

#include <compare>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/auth.h"
#include "model/plan_report.h"
#include "model/run_state.h"
#include "security/tls.h"

namespace meridian::rpc {

// Which jobs ListJobs gives: of `tenant` only unless it is empty; whose names start with
// `name_prefix` (a service's replica jobs: "serve/NAME/"); with `live_only`, those not
// finished. The coordinator filters, so a client polling a few jobs (a service's
// gateway) does not copy and receive every job it keeps (10,000 finished ones by
// default).
struct JobFilter {
  std::string tenant;
  std::string name_prefix;
  bool live_only = false;
};
inline constexpr size_t kMaxJobNamePrefixBytes = 512;

// How a client's channel proves itself: TLS with the cluster's CA (and this process's
// certificate, when it has one: a node joining has none yet), and a user's token sent
// with every call. Nothing: plaintext, to an insecure coordinator.
struct ChannelSecurity {
  security::TlsCredentials tls;
  std::string token;
};

struct SubmitResult {
  uint64_t job_id = 0;
  std::string name;
  int32_t tasks = 0;
  std::vector<std::string> warnings;
};

using TaskLog = model::TaskLog;

// A page of a job's logs (JobService.Logs): its attempts' logs in (task, attempt)
// order from a cursor on, at most kMaxLogsPerPage of them, ending with the one whose
// tails reach kMaxLogPageBytes (one log holds at most 2 x 64 KiB). `next`, when set,
// is where the next page starts; unset, this was the last.
struct LogCursor {
  uint32_t task = 0;
  int32_t attempt = 0;
  auto operator<=>(const LogCursor&) const = default;
};
inline constexpr uint32_t kMaxLogsPerPage = 10'000;
inline constexpr int64_t kMaxLogPageBytes = 8 << 20;
struct LogPage {
  std::vector<TaskLog> logs;
  std::optional<LogCursor> next;
};

// A page of a job's tasks: at most this many, and tasks with this many bytes of
// outputs and reasons, in one answer.
inline constexpr uint32_t kMaxTasksPerPage = 10'000;
inline constexpr int64_t kMaxTaskPageBytes = 8 << 20;

// A server stream the coordinator writes to as things happen, from the thread that
// makes them, with its own lock held: so Push never blocks; it queues and returns.
// An AssignmentSink is a node's assignment stream (batches pushed while one is being
// written are merged into the next write); a JobWatchSink is a client's watch of a job
// (only the newest summary waits: a reader too slow for every change gets the latest).
template <typename T>
class StreamSink {
 public:
  virtual ~StreamSink() = default;
  // Writes `item`, or keeps it for the next write, and empties it; false (leaving it
  // as it was) once the stream is closed or its reader gone.
  virtual bool Push(T& item) = 0;
  // Ends the stream with `status` once what was pushed is written.
  virtual void Close(const Status& status) = 0;
  // Whether it still takes pushes (not closed, the reader still there).
  virtual bool open() const = 0;
};
using AssignmentSink = StreamSink<model::AssignmentBatch>;
using JobWatchSink = StreamSink<model::JobSummary>;

class JobApi {
 public:
  virtual ~JobApi() = default;
  // Returns once the job is durable. InvalidArgument names what is wrong with the spec.
  // The job belongs to `tenant`, the caller's (a spec naming another is refused);
  // empty: the spec's own (an insecure coordinator, or a test).
  virtual StatusOr<SubmitResult> Submit(const std::string& spec_yaml, const std::string& spec_name,
                                        const std::string& tenant) = 0;
  // Submit, for a job of at most `max_tasks` tasks: one with more is found while its
  // spec is read, before any task is made, and nothing (nullopt) is stored. What a
  // caller that must not be held long (gRPC's callback threads) does in place.
  virtual StatusOr<std::optional<SubmitResult>> SubmitSmall(const std::string& spec_yaml,
                                                            const std::string& spec_name, const std::string& tenant,
                                                            int64_t max_tasks) = 0;
  // A dry run of the spec on the live nodes (as if idle) and `tenant`'s datasets (an
  // empty tenant: any): where each task would run, when and at what cost. Nothing is
  // stored. `order`: fifo, priority or fair.
  virtual StatusOr<model::PlanReport> Plan(const std::string& spec_yaml, const std::string& spec_name,
                                           const std::string& tenant, const std::string& order, uint64_t seed) = 0;
  // The job, and up to `max_tasks` of its tasks from index `first_task` (fewer when
  // their outputs are large: JobView::next_task says where to go on).
  virtual StatusOr<model::JobView> GetJob(uint64_t id, uint32_t first_task, uint32_t max_tasks) = 0;
  // The newest `limit` jobs (0: all) that `filter` keeps.
  virtual std::vector<model::JobSummary> ListJobs(int32_t limit, const JobFilter& filter) = 0;
  // The tenant a job belongs to; NotFound if there is no such job.
  virtual StatusOr<std::string> JobTenant(uint64_t id) = 0;
  virtual StatusOr<model::JobSummary> CancelJob(uint64_t id) = 0;
  // Removes a finished job, its tasks, attempts and logs, and lets go of the results
  // it kept on nodes. FailedPrecondition while it has not finished.
  virtual StatusOr<model::JobSummary> DeleteJob(uint64_t id) = 0;
  // The spec job `id` was submitted with, and its file name.
  virtual StatusOr<std::pair<std::string, std::string>> JobSpec(uint64_t id) = 0;
  // A page of the job's logs (of the task called `task`, when set) from `from` on:
  // the stored logs of ended attempts and the output so far of running ones.
  virtual StatusOr<LogPage> Logs(uint64_t id, const std::string& task, LogCursor from) = 0;
  // Waits until the job's version passes `after_version` or `timeout_us` elapses,
  // and returns its summary then.
  virtual StatusOr<model::JobSummary> WaitJob(uint64_t id, uint64_t after_version, int64_t timeout_us) = 0;
  // Pushes the job's summary to `sink` whenever it changes past `after_version` (at
  // once if it already has), and closes the sink (OK) once the job has finished and
  // that was pushed; NotFound when the job is deleted. NotFound if there is no such job.
  virtual Status WatchJob(uint64_t id, uint64_t after_version, std::shared_ptr<JobWatchSink> sink) = 0;
};

class NodeApi {
 public:
  virtual ~NodeApi() = default;
  virtual StatusOr<model::RegistrationReply> Register(const model::AgentRegistration& registration) = 0;
  // Waits up to `timeout_us` for work for the node; an empty batch on timeout.
  // FailedPrecondition when the session is no longer the node's current one.
  virtual StatusOr<model::AssignmentBatch> NextAssignments(uint32_t node_id, uint64_t session,
                                                           int64_t timeout_us) = 0;
  // From now on the node's work goes to `sink` as it is made (what waits is pushed at
  // once), from whichever thread makes it: no thread waits for it. The sink is closed
  // when another connects, when the node registers again or is declared dead
  // (FailedPrecondition: register again), or at shutdown. FailedPrecondition when the
  // session is no longer the node's.
  virtual Status ConnectAssignments(uint32_t node_id, uint64_t session, std::shared_ptr<AssignmentSink> sink) = 0;
  // Applies the updates durably; returns true when the agent must register again.
  virtual StatusOr<bool> Heartbeat(const model::AgentHeartbeat& heartbeat) = 0;
  // How often agents are to heartbeat now (it grows with the fleet).
  virtual int64_t HeartbeatIntervalUs() = 0;
  // Takes the node out of the pool, as its agent is about to exit: OK only while
  // nothing is placed on it (FailedPrecondition says what is, or that the session is
  // no longer the node's). Objects it held are gone with it, as with a dead node.
  virtual Status Leave(uint32_t node_id, uint64_t session) = 0;
  // The name of the node registered as `node_id`; NotFound if none.
  virtual StatusOr<std::string> NodeName(uint32_t node_id) = 0;
};

struct NewToken {
  model::TokenRecord record;
  std::string secret;  // "mrd_<id>_<secret>": what the user presents, shown once
};

// Credentials: API tokens and the certificates of joining nodes.
class AuthApi {
 public:
  virtual ~AuthApi() = default;
  // The caller a token stands for: Unauthenticated if it is unknown, revoked or
  // expired (the message says which, never echoing the secret).
  virtual StatusOr<model::Caller> Authenticate(const std::string& token) = 0;
  virtual StatusOr<NewToken> CreateToken(const std::string& user, const std::string& tenant, model::Role role,
                                         int64_t ttl_us) = 0;
  virtual std::vector<model::TokenRecord> ListTokens() = 0;
  virtual StatusOr<model::TokenRecord> RevokeToken(const std::string& id) = 0;
  // Signs a joining node's certificate request with the cluster's CA, naming it
  // "node:NAME": with a valid join token (role agent), for a node of the fleet that
  // is not live now. Returns the certificate and the CA bundle (PEM).
  virtual StatusOr<std::pair<std::string, std::string>> Join(const std::string& token, const std::string& node,
                                                             const std::string& csr_pem) = 0;
};

class ObjectApi {
 public:
  virtual ~ObjectApi() = default;
  // Every call is on behalf of `caller`: a user sees, reads and names its tenant's
  // objects and datasets only (an admin, or anyone on an insecure coordinator, all).
  //
  // `ref` is an object id or a name. NotFound when the cluster holds no replica;
  // PermissionDenied when the caller's tenant may not read it. With `job_id`
  // (and the task's name), an output of that task of a job the caller may see is
  // readable too. The answer carries a read ticket for the transfer servers.
  virtual StatusOr<model::ObjectLocation> Locate(const model::Caller& caller, const std::string& ref,
                                                 uint64_t job_id, const std::string& task) = 0;
  // A live agent to put a new object of `size` on: at `site` if given; with a put
  // ticket for the caller's tenant.
  virtual StatusOr<model::ObjectReplica> PlacePut(const model::Caller& caller, int64_t size,
                                                  const std::string& site) = 0;
  // Records a replica the node now holds (after a put), named if `name` is set; the
  // caller's tenant may read it from then on. `receipt` is the transfer server's for
  // the put (required, with TLS, for an object another tenant holds too).
  virtual StatusOr<model::ObjectLocation> Commit(const model::Caller& caller, const std::string& id, int64_t size,
                                                 uint32_t node_id, const std::string& name,
                                                 const std::string& receipt) = 0;
  virtual std::vector<model::ObjectLocation> ListObjects(const model::Caller& caller) = 0;
  // Undoes one put of object `id` by the caller's tenant (the receipt-backed Commits
  // since the coordinator started): the node that holds that put lets go of its
  // reference, and the object goes once nothing holds it. FailedPrecondition for a
  // dataset's shard, a named object (names are kept), an object the tenant has no
  // such put of, and the object's last put (of any tenant) while an unfinished job
  // reads it (object://ID); NotFound when there is no such object, PermissionDenied
  // when the caller's tenant may not read it.
  // Answers the object as the directory has it now.
  virtual StatusOr<model::ObjectLocation> DeleteObject(const model::Caller& caller, const std::string& id) = 0;
  // Names a list of objects the caller's tenant may read, in order, as a dataset of
  // that tenant. Names are never reused.
  virtual StatusOr<model::DatasetView> DefineDataset(const model::Caller& caller, const std::string& name,
                                                     const std::vector<model::HeldObject>& shards) = 0;
  virtual StatusOr<model::DatasetView> GetDataset(const model::Caller& caller, const std::string& name) = 0;
  virtual std::vector<model::DatasetView> ListDatasets(const model::Caller& caller) = 0;
};

// Where the coordinator serves HTTP(S): metrics, and the dashboard when it has one.
struct HttpEndpoints {
  std::string url;  // "https://host:port"; empty: no listener
  bool dashboard = false;
};

class AdminApi {
 public:
  virtual ~AdminApi() = default;
  virtual std::vector<model::NodeView> ListNodes() = 0;
  // The fleet's tenants and any other with an active job, by name.
  virtual std::vector<model::TenantView> ListTenants() = 0;
  virtual HttpEndpoints Endpoints() = 0;
};

}  // namespace meridian::rpc
