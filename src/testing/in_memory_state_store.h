// InMemoryStateStore: a StateStore that keeps everything in maps, for tests of code
// above the store; the shared suite in src/store/state_store_test.cc runs against it
// and SqliteStateStore alike.
//
// Thread-safety: a mutex guards everything.
#pragma once

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>

#include "store/state_store.h"

namespace meridian::testing {

class InMemoryStateStore final : public store::StateStore {
 public:
  StatusOr<uint64_t> CreateJob(model::JobRecord job, const std::vector<store::NewTask>& tasks) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (job.id == 0) job.id = next_job_;
    InsertJobLocked(job, tasks);
    ++commits_;
    return job.id;
  }
  Status Apply(const store::StoreBatch& batch) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!batch.empty()) ++commits_;
    for (const store::NewJob& j : batch.new_jobs) InsertJobLocked(j.record, j.tasks);
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
    for (const model::TokenRecord& t : batch.tokens) tokens_[t.id] = t;
    for (const model::TenantSpend& t : batch.spend) spend_[{t.tenant, t.day}] = t;
    return OkStatus();
  }
  StatusOr<store::LoadedState> Load() override {
    std::lock_guard<std::mutex> lock(mu_);
    store::LoadedState out;
    for (const auto& [id, j] : jobs_) out.jobs.push_back(j);
    for (const auto& [k, t] : tasks_) {
      if (!model::IsTerminal(jobs_.at(t.job).status)) {
        out.tasks.push_back(t);
        continue;
      }
      model::JobSummary& c = out.finished_counts[t.job];
      model::CountTasks(c, t.status, 1);
      c.retries += std::max(0, t.attempt - 1);
    }
    for (const auto& [k, a] : attempts_) {
      if (!model::IsTerminal(jobs_.at(a.job).status)) out.attempts.push_back(a);
    }
    for (const auto& [k, n] : names_) out.names.push_back(n);
    for (const auto& [id, t] : tokens_) out.tokens.push_back(t);
    for (const auto& [k, t] : spend_) out.spend.push_back(t);
    out.next_job_id = next_job_;
    return out;
  }
  StatusOr<std::vector<model::TaskLog>> Logs(uint64_t job, std::optional<uint32_t> task, uint32_t first_task,
                                             int32_t first_attempt, uint32_t limit, int64_t max_bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<model::TaskLog> out;
    int64_t bytes = 0;
    for (const auto& [k, l] : logs_) {
      if (out.size() >= limit || bytes >= max_bytes) break;
      if (l.job != job || (task && l.task != *task)) continue;
      if (std::pair(l.task, l.attempt) < std::pair(first_task, first_attempt)) continue;
      out.push_back(model::TaskLog{LabelOf(job, l.task).name, l});
      bytes += static_cast<int64_t>(l.stdout_tail.size() + l.stderr_tail.size());
    }
    return out;
  }
  StatusOr<std::vector<model::TaskView>> TaskPage(uint64_t job, uint32_t first, uint32_t limit,
                                                  int64_t max_bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<model::TaskView> out;
    int64_t bytes = 0;
    for (auto it = tasks_.lower_bound({job, first}); it != tasks_.end() && it->first.first == job; ++it) {
      if (out.size() >= limit || bytes >= max_bytes) break;
      const store::NewTask label = LabelOf(job, it->first.second);
      model::TaskView v{label.name, label.result, it->second, {}};
      for (auto a = attempts_.lower_bound({job, it->first.second, 0});
           a != attempts_.end() && std::get<0>(a->first) == job && std::get<1>(a->first) == it->first.second; ++a) {
        v.history.push_back(a->second);
      }
      bytes += static_cast<int64_t>(v.record.output.size() + v.record.reason.size() + v.name.size());
      out.push_back(std::move(v));
    }
    return out;
  }
  StatusOr<std::optional<uint32_t>> FindTask(uint64_t job, const std::string& name) override {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = labels_.lower_bound({job, 0}); it != labels_.end() && it->first.first == job; ++it) {
      if (it->second.name == name) return std::optional<uint32_t>(it->first.second);
    }
    return std::optional<uint32_t>();
  }
  StatusOr<std::pair<std::string, std::string>> JobSpec(uint64_t job) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = jobs_.find(job);
    if (it == jobs_.end()) return NotFoundError("no job " + std::to_string(job));
    return std::make_pair(it->second.spec_yaml, it->second.spec_name);
  }
  Status DeleteJob(uint64_t job) override {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.erase(job);
    std::erase_if(tasks_, [&](const auto& e) { return e.first.first == job; });
    std::erase_if(labels_, [&](const auto& e) { return e.first.first == job; });
    std::erase_if(attempts_, [&](const auto& e) { return std::get<0>(e.first) == job; });
    std::erase_if(logs_, [&](const auto& e) { return std::get<0>(e.first) == job; });
    return OkStatus();
  }

  // How many transactions were committed (CreateJob, and Apply of a non-empty batch).
  int commits() const {
    std::lock_guard<std::mutex> lock(mu_);
    return commits_;
  }

 private:
  void InsertJobLocked(const model::JobRecord& job, const std::vector<store::NewTask>& tasks) {
    next_job_ = std::max(next_job_, job.id + 1);
    jobs_[job.id] = job;
    for (size_t i = 0; i < tasks.size(); ++i) {
      model::TaskRecord t;
      t.job = job.id;
      t.task = static_cast<uint32_t>(i);
      t.status = tasks[i].status;
      tasks_[{t.job, t.task}] = t;
      labels_[{t.job, t.task}] = tasks[i];
    }
  }
  store::NewTask LabelOf(uint64_t job, uint32_t task) const {
    auto it = labels_.find({job, task});
    return it == labels_.end() ? store::NewTask{} : it->second;
  }

  mutable std::mutex mu_;
  uint64_t next_job_ = 1;
  int commits_ = 0;
  std::map<std::pair<uint64_t, uint32_t>, store::NewTask> labels_;
  std::map<std::pair<std::string, int32_t>, model::ObjectName> names_;
  std::map<std::pair<std::string, int64_t>, model::TenantSpend> spend_;
  std::map<std::string, model::TokenRecord> tokens_;
  std::map<uint64_t, model::JobRecord> jobs_;
  std::map<std::pair<uint64_t, uint32_t>, model::TaskRecord> tasks_;
  std::map<std::tuple<uint64_t, uint32_t, int32_t>, model::AttemptRecord> attempts_;
  std::map<std::tuple<uint64_t, uint32_t, int32_t>, model::TaskLogRecord> logs_;
};

}  // namespace meridian::testing
