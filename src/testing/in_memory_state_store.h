// InMemoryStateStore: a StateStore that keeps everything in maps, for tests of code
// above the store; the shared suite in src/store/state_store_test.cc runs against it
// and SqliteStateStore alike.
//
// Thread-safety: a mutex guards everything.
#pragma once

#include <map>
#include <mutex>
#include <tuple>

#include "store/state_store.h"

namespace meridian::testing {

class InMemoryStateStore final : public store::StateStore {
 public:
  StatusOr<uint64_t> CreateJob(model::JobRecord job, const std::vector<model::TaskRecord>& tasks) override {
    std::lock_guard<std::mutex> lock(mu_);
    job.id = jobs_.empty() ? 1 : jobs_.rbegin()->first + 1;
    jobs_[job.id] = job;
    for (model::TaskRecord t : tasks) {
      t.job = job.id;
      tasks_[{t.job, t.task}] = t;
    }
    return job.id;
  }
  Status Apply(const store::StoreBatch& batch) override {
    std::lock_guard<std::mutex> lock(mu_);
    for (const model::TaskRecord& t : batch.tasks) tasks_[{t.job, t.task}] = t;
    for (const model::JobRecord& j : batch.jobs) {
      auto it = jobs_.find(j.id);
      if (it == jobs_.end()) continue;
      it->second.status = j.status;
      it->second.reason = j.reason;
      it->second.finished_us = j.finished_us;
    }
    for (const model::AttemptRecord& a : batch.attempts) attempts_[{a.job, a.task, a.attempt}] = a;
    for (const model::TaskLogRecord& l : batch.logs) logs_[{l.job, l.task, l.attempt}] = l;
    for (const model::ObjectName& n : batch.names) names_[{n.name, n.shard}] = n;
    return OkStatus();
  }
  StatusOr<store::LoadedState> Load() override {
    std::lock_guard<std::mutex> lock(mu_);
    store::LoadedState out;
    for (const auto& [id, j] : jobs_) out.jobs.push_back(j);
    for (const auto& [k, t] : tasks_) out.tasks.push_back(t);
    for (const auto& [k, a] : attempts_) out.attempts.push_back(a);
    for (const auto& [k, n] : names_) out.names.push_back(n);
    return out;
  }
  StatusOr<std::vector<model::TaskLogRecord>> Logs(uint64_t job, std::optional<uint32_t> task) override {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<model::TaskLogRecord> out;
    for (const auto& [k, l] : logs_) {
      if (l.job == job && (!task || l.task == *task)) out.push_back(l);
    }
    return out;
  }

 private:
  std::mutex mu_;
  std::map<std::pair<std::string, int32_t>, model::ObjectName> names_;
  std::map<uint64_t, model::JobRecord> jobs_;
  std::map<std::pair<uint64_t, uint32_t>, model::TaskRecord> tasks_;
  std::map<std::tuple<uint64_t, uint32_t, int32_t>, model::AttemptRecord> attempts_;
  std::map<std::tuple<uint64_t, uint32_t, int32_t>, model::TaskLogRecord> logs_;
};

}  // namespace meridian::testing
