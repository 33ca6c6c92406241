// StateStore: where a coordinator keeps what must survive it — jobs as submitted,
// every task's state and output, every attempt and its logs. The coordinator keeps
// the working set in memory and writes through; on restart it loads everything back.
//
// Durability: a call returns only after its writes are committed; a batch is one
// transaction, all or nothing.
//
// Thread-safety: implementations are safe to call from several threads.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "common/status.h"
#include "model/run_state.h"

namespace meridian::store {

// Writes committed together. Records are upserts keyed by their ids.
struct StoreBatch {
  std::vector<model::JobRecord> jobs;  // status, reason and finish time (the spec is not rewritten)
  std::vector<model::TaskRecord> tasks;
  std::vector<model::AttemptRecord> attempts;
  std::vector<model::TaskLogRecord> logs;
  std::vector<model::ObjectName> names;  // inserted; names are never reused

  bool empty() const { return jobs.empty() && tasks.empty() && attempts.empty() && logs.empty() && names.empty(); }
};

struct LoadedState {
  std::vector<model::JobRecord> jobs;          // by id
  std::vector<model::TaskRecord> tasks;        // by (job, task)
  std::vector<model::AttemptRecord> attempts;  // by (job, task, attempt)
  std::vector<model::ObjectName> names;        // by (name, shard)
};

class StateStore {
 public:
  virtual ~StateStore() = default;
  // Gives the job the next id and stores it with its tasks.
  virtual StatusOr<uint64_t> CreateJob(model::JobRecord job, const std::vector<model::TaskRecord>& tasks) = 0;
  virtual Status Apply(const StoreBatch& batch) = 0;
  virtual StatusOr<LoadedState> Load() = 0;
  // Logs of a job's attempts, of one task when `task` is set.
  virtual StatusOr<std::vector<model::TaskLogRecord>> Logs(uint64_t job, std::optional<uint32_t> task) = 0;
};

}  // namespace meridian::store
