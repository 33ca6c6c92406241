// The plain C++ interfaces behind meridian.v1's services. The coordinator implements
// them; src/rpc/server.cc hosts them over gRPC, translating at the edge, so the
// coordinator never sees protobuf and its logic can be tested without a network.
//
// Thread-safety: implementations must accept calls from many threads at once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/run_state.h"

namespace meridian::rpc {

struct SubmitResult {
  uint64_t job_id = 0;
  std::string name;
  int32_t tasks = 0;
  std::vector<std::string> warnings;
};

using TaskLog = model::TaskLog;

// A page of a job's tasks: at most this many, and tasks with this many bytes of
// outputs and reasons, in one answer.
inline constexpr uint32_t kMaxTasksPerPage = 10'000;
inline constexpr int64_t kMaxTaskPageBytes = 8 << 20;

class JobApi {
 public:
  virtual ~JobApi() = default;
  // Returns once the job is durable. InvalidArgument names what is wrong with the spec.
  virtual StatusOr<SubmitResult> Submit(const std::string& spec_yaml, const std::string& spec_name) = 0;
  // The job, and up to `max_tasks` of its tasks from index `first_task` (fewer when
  // their outputs are large: JobView::next_task says where to go on).
  virtual StatusOr<model::JobView> GetJob(uint64_t id, uint32_t first_task, uint32_t max_tasks) = 0;
  virtual std::vector<model::JobSummary> ListJobs(int32_t limit) = 0;
  virtual StatusOr<model::JobSummary> CancelJob(uint64_t id) = 0;
  // Removes a finished job, its tasks, attempts and logs, and lets go of the results
  // it kept on nodes. FailedPrecondition while it has not finished.
  virtual StatusOr<model::JobSummary> DeleteJob(uint64_t id) = 0;
  virtual StatusOr<std::vector<TaskLog>> Logs(uint64_t id, const std::string& task) = 0;
  // Waits until the job's version passes `after_version` or `timeout_us` elapses,
  // and returns its summary then.
  virtual StatusOr<model::JobSummary> WaitJob(uint64_t id, uint64_t after_version, int64_t timeout_us) = 0;
};

class NodeApi {
 public:
  virtual ~NodeApi() = default;
  virtual StatusOr<model::RegistrationReply> Register(const model::AgentRegistration& registration) = 0;
  // Waits up to `timeout_us` for work for the node; an empty batch on timeout.
  // FailedPrecondition when the session is no longer the node's current one.
  virtual StatusOr<model::AssignmentBatch> NextAssignments(uint32_t node_id, uint64_t session,
                                                           int64_t timeout_us) = 0;
  // Applies the updates durably; returns true when the agent must register again.
  virtual StatusOr<bool> Heartbeat(const model::AgentHeartbeat& heartbeat) = 0;
};

class ObjectApi {
 public:
  virtual ~ObjectApi() = default;
  // `ref` is an object id or a name. NotFound when the cluster holds no replica.
  virtual StatusOr<model::ObjectLocation> Locate(const std::string& ref) = 0;
  // A live agent to put a new object of `size` on: at `site` if given.
  virtual StatusOr<model::ObjectReplica> PlacePut(int64_t size, const std::string& site) = 0;
  // Records a replica the node now holds (after a put), named if `name` is set.
  virtual StatusOr<model::ObjectLocation> Commit(const std::string& id, int64_t size, uint32_t node_id,
                                                 const std::string& name) = 0;
  virtual std::vector<model::ObjectLocation> ListObjects() = 0;
  // Names objects the cluster holds, in order, as a dataset. Names are never reused.
  virtual StatusOr<model::DatasetView> DefineDataset(const std::string& name,
                                                     const std::vector<model::HeldObject>& shards) = 0;
  virtual StatusOr<model::DatasetView> GetDataset(const std::string& name) = 0;
  virtual std::vector<model::DatasetView> ListDatasets() = 0;
};

class AdminApi {
 public:
  virtual ~AdminApi() = default;
  virtual std::vector<model::NodeView> ListNodes() = 0;
};

}  // namespace meridian::rpc
