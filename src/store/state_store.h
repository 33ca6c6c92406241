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
#include <map>
#include <string>
#include <optional>
#include <vector>

#include "common/status.h"
#include "model/auth.h"
#include "model/run_state.h"

namespace meridian::store {

// A task as its job is created: its name in the job and whether it is a result
// (nothing in the job reads its output), kept so a job's tasks can be listed without
// its spec, and the status it starts in.
struct NewTask {
  std::string name;
  bool result = false;
  model::TaskStatus status = model::TaskStatus::kQueued;
};

// A job as it is created, task i being tasks[i].
struct NewJob {
  model::JobRecord record;
  std::vector<NewTask> tasks;
};

// Writes committed together. Records are upserts keyed by their ids.
struct StoreBatch {
  std::vector<model::JobRecord> jobs;  // status, reason and finish time (the spec is not rewritten)
  std::vector<model::TaskRecord> tasks;
  std::vector<model::AttemptRecord> attempts;
  std::vector<model::TaskLogRecord> logs;
  std::vector<model::ObjectName> names;  // inserted; names are never reused
  std::vector<model::TokenRecord> tokens;  // API tokens (hashes only), upserted by id
  std::vector<model::TenantSpend> spend = {};  // upserted by (tenant, day)
  // Jobs created, each with the id its coordinator gave it; written before the rest
  // (which may place their tasks).
  std::vector<NewJob> new_jobs = {};

  bool empty() const {
    return new_jobs.empty() && jobs.empty() && tasks.empty() && attempts.empty() && logs.empty() && names.empty() &&
           tokens.empty() && spend.empty();
  }
};

// What a coordinator needs to carry on after a restart. Only unfinished jobs come back
// with their tasks and attempts; a finished job comes back as its record and counts,
// its tasks stay in the store and are read a page at a time (TaskPage).
struct LoadedState {
  std::vector<model::JobRecord> jobs;          // by id, finished or not
  std::vector<model::TaskRecord> tasks;        // of unfinished jobs, by (job, task)
  std::vector<model::AttemptRecord> attempts;  // of unfinished jobs, by (job, task, attempt)
  std::vector<model::ObjectName> names;        // by (name, shard)
  std::vector<model::TokenRecord> tokens;      // by id
  std::vector<model::TenantSpend> spend;       // by (tenant, day)
  // The id the next job is to have: past every id given out, deleted jobs' too.
  uint64_t next_job_id = 1;
  // Finished jobs' task counts by status, and retries (attempts beyond the first).
  std::map<uint64_t, model::JobSummary> finished_counts;
};

class StateStore {
 public:
  virtual ~StateStore() = default;
  // Stores the job with its tasks, task i being tasks[i], under the id it has (given
  // by its coordinator from LoadedState::next_job_id on), or, when that is 0, the next
  // one (never one a deleted job had). Either way the next id given out is past it.
  virtual StatusOr<uint64_t> CreateJob(model::JobRecord job, const std::vector<NewTask>& tasks) = 0;
  virtual Status Apply(const StoreBatch& batch) = 0;
  virtual StatusOr<LoadedState> Load() = 0;
  // Logs of a job's attempts, of one task when `task` is set, with the task's name
  // (empty for a job stored before names were): in (task, attempt) order from
  // (`first_task`, `first_attempt`) on, at most `limit`, and none after the one with
  // which their tails (stdout and stderr) reach `max_bytes`.
  virtual StatusOr<std::vector<model::TaskLog>> Logs(uint64_t job, std::optional<uint32_t> task, uint32_t first_task,
                                                     int32_t first_attempt, uint32_t limit, int64_t max_bytes) = 0;
  // Up to `limit` of the job's tasks from index `first`, with their attempts, in
  // order; it stops early, after at least one, once their outputs pass `max_bytes`.
  virtual StatusOr<std::vector<model::TaskView>> TaskPage(uint64_t job, uint32_t first, uint32_t limit,
                                                          int64_t max_bytes) = 0;
  // The index of the job's task called `name`, if it has one.
  virtual StatusOr<std::optional<uint32_t>> FindTask(uint64_t job, const std::string& name) = 0;
  // The job's spec as submitted, and its file name. NotFound: no such job.
  virtual StatusOr<std::pair<std::string, std::string>> JobSpec(uint64_t job) = 0;
  // Removes the job, its tasks, attempts and logs. Its id is not given out again.
  virtual Status DeleteJob(uint64_t job) = 0;
};

}  // namespace meridian::store
