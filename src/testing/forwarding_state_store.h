// A state store that passes every call to another: a test derives from it and
// overrides the calls it intercepts (to stall, to fail, to count) and nothing else.
//
// Thread-safety: as the store it forwards to.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "store/state_store.h"

namespace meridian::testing {

class ForwardingStateStore : public store::StateStore {
 public:
  explicit ForwardingStateStore(store::StateStore& inner) : inner_(inner) {}
  StatusOr<uint64_t> CreateJob(model::JobRecord job, const std::vector<store::NewTask>& tasks) override {
    return inner_.CreateJob(std::move(job), tasks);
  }
  Status Apply(const store::StoreBatch& batch) override { return inner_.Apply(batch); }
  StatusOr<store::LoadedState> Load() override { return inner_.Load(); }
  StatusOr<std::vector<model::TaskLog>> Logs(uint64_t job, std::optional<uint32_t> task, uint32_t first_task,
                                             int32_t first_attempt, uint32_t limit, int64_t max_bytes) override {
    return inner_.Logs(job, task, first_task, first_attempt, limit, max_bytes);
  }
  StatusOr<std::vector<model::TaskView>> TaskPage(uint64_t job, uint32_t first, uint32_t limit,
                                                  int64_t max_bytes) override {
    return inner_.TaskPage(job, first, limit, max_bytes);
  }
  StatusOr<std::optional<uint32_t>> FindTask(uint64_t job, const std::string& name) override {
    return inner_.FindTask(job, name);
  }
  StatusOr<std::pair<std::string, std::string>> JobSpec(uint64_t job) override { return inner_.JobSpec(job); }
  Status DeleteJob(uint64_t job) override { return inner_.DeleteJob(job); }

 private:
  store::StateStore& inner_;
};

}  // namespace meridian::testing
