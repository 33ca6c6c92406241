// The scheduler's input: an immutable picture of the fleet's free resources, the
// jobs and their tasks waiting to run, and the tenants' usage. The coordinator and
// the simulator build one, call sched::Schedule, and commit the plan themselves.
//
// Lifetimes: a Snapshot points into the Fleet, ThroughputTable and Jobs it was built
// from; they must outlive it. Thread-safety: immutable once built.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>
#include <string>
#include <vector>

#include "common/ids.h"
#include "model/fleet.h"
#include "model/throughput.h"
#include "model/work.h"
#include "sched/pool.h"

namespace meridian::sched {

// Free resources of one node.
struct NodeFree {
  int64_t cpu_milli = 0;
  int64_t memory_bytes = 0;
  std::vector<int32_t> device_free_milli;  // per device; 1000 = wholly free
};

// What one placement takes from one node.
struct Allocation {
  NodeId node;
  int64_t cpu_milli = 0;
  int64_t memory_bytes = 0;
  std::vector<int32_t> devices;  // device indices on the node
  int32_t device_share_milli = 0;
};

// The free resources of every node, indexed by NodeId; Take and Give keep it exact.
class ResourceLedger {
 public:
  ResourceLedger() = default;
  // Everything free.
  explicit ResourceLedger(const model::Fleet& fleet);

  const NodeFree& free(NodeId node) const { return free_[node.value()]; }
  size_t size() const { return free_.size(); }
  // Stops the process if the allocation does not fit: the caller checked.
  void Take(const Allocation& a);
  void Give(const Allocation& a);
  // A node added to the fleet after the ledger was built, wholly free.
  void Add(const model::Node& node);

  static void TakeFrom(NodeFree& f, const Allocation& a);
  static void GiveTo(NodeFree& f, const Allocation& a);

 private:
  std::vector<NodeFree> free_;
};

// A copy-on-write view of a ledger: reads fall through to the base until a node is
// changed. One Schedule call uses one, so a call copies only the nodes it places on.
// Lifetime: the base must outlive the overlay.
class LedgerOverlay {
 public:
  explicit LedgerOverlay(const ResourceLedger& base) : base_(base) {}
  const NodeFree& free(NodeId node) const {
    if (!changed_.empty()) {
      auto it = changed_.find(node.value());
      if (it != changed_.end()) return it->second;
    }
    return base_.free(node);
  }
  void Take(const Allocation& a) { ResourceLedger::TakeFrom(Mutable(a.node), a); }
  void Give(const Allocation& a) { ResourceLedger::GiveTo(Mutable(a.node), a); }

 private:
  NodeFree& Mutable(NodeId node) {
    auto [it, inserted] = changed_.try_emplace(node.value());
    if (inserted) it->second = base_.free(node);
    return it->second;
  }
  const ResourceLedger& base_;
  std::unordered_map<uint32_t, NodeFree> changed_;
};

// Per-tenant resources in use, for quotas and fair sharing.
struct TenantUsage {
  int64_t gpu_milli = 0;
  int64_t cpu_milli = 0;
  int64_t memory_bytes = 0;
  // Accelerators held, by type (those of a type the tenant has a quota for, at least).
  std::map<std::string, int64_t, std::less<>> gpu_milli_by_type = {};
  // What is left of the tenant's budget for today; unset: it has none.
  std::optional<int64_t> budget_left_micro_usd = {};
};

// A job as the scheduler sees it.
struct JobState {
  const model::Job* job = nullptr;
  int64_t submit_us = 0;                 // queue order
  std::optional<int64_t> deadline_at_us; // absolute, on the snapshot's clock
  std::optional<int64_t> budget_left_micro_usd;

  // A job submitted at `submit_us` that has spent nothing yet.
  static JobState Submitted(const model::Job& job, int64_t submit_us);
};

// One task ready to run (its dependencies are done).
struct PendingTask {
  uint32_t job = 0;                // index in Snapshot::jobs
  TaskId task;                     // in that job
  // Every input with its replicas: declared inputs and dependencies' outputs.
  std::vector<model::ObjectRef> inputs;
  int64_t seq = 0;                 // FIFO tie-breaker, unique
  // The caller knows that no node but those in Snapshot::grown can have room for
  // it (it was parked for want of room, sched::Backlog): only those are looked at.
  bool room_only_on_grown = false;
  // The caller's class of tasks with the same request and the same filters
  // (sched::Backlog's); with room_only_on_grown, no room for one means no room
  // for the others in this call. kNoRoomClass: none.
  uint32_t room_class = kNoRoomClass;
  static constexpr uint32_t kNoRoomClass = UINT32_MAX;
};

// A running task's resources, expected back at `at_us` (its estimated finish).
struct Release {
  int64_t at_us = 0;
  Allocation allocation;
};

// The releases of running tasks by pool (PoolIndex ids), in time order: kept up
// to date by a caller that schedules often (the simulator), so that a call that
// must know when a busy pool frees need not sort every release. Holds the same
// releases as Snapshot::releases.
struct ReleaseIndex {
  std::vector<std::multimap<int64_t, Allocation>> by_pool;
};

// Which filter turns each pool away for a kind of task (by what the filters read
// of a task without inputs), for calls on one PoolIndex (pools are only ever
// appended to it). A memo the caller may keep between calls so that each kind of
// task is judged against each pool once; calls sharing one must not run at once.
struct VerdictCache {
  std::unordered_map<std::string, std::vector<uint8_t>> by_key;  // by pool index; 0xFF: passed
};

struct Snapshot {
  int64_t now_us = 0;
  const model::Fleet* fleet = nullptr;
  const model::ThroughputTable* throughput = nullptr;
  // The fleet's pools, built once per fleet change by a caller that schedules
  // often; null: Schedule builds them.
  std::shared_ptr<const PoolIndex> pools;
  ResourceLedger free;
  std::vector<TenantUsage> tenant_usage;  // by TenantId; empty means no usage
  std::vector<JobState> jobs;
  std::vector<PendingTask> queue;
  // Estimated releases of running tasks, for the wait term of the finish time. A
  // busy node without one is taken to stay busy.
  std::vector<Release> releases;
  // The same, by pool and time, when the caller keeps them so; null: Schedule
  // sorts `releases` itself when it needs them.
  std::shared_ptr<const ReleaseIndex> release_index;
  // The caller's verdict memo, kept with `pools` (null: one per call).
  std::shared_ptr<VerdictCache> verdict_cache;
  // Nodes whose free resources grew since the previous call (tasks ended, nodes
  // joined or recovered), for tasks with PendingTask::room_only_on_grown.
  std::vector<NodeId> grown;

  const model::Task& task(const PendingTask& p) const {
    return jobs[p.job].job->tasks[p.task.value()];
  }
};

}  // namespace meridian::sched
