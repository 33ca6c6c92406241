// sched::Backlog: the tasks waiting to be scheduled, in queue order, with those
// the scheduler found no room for parked until a node has room for them again
// (Kubernetes' unschedulable queue).
//
// Under a backlog most waiting tasks cannot run, and offering all of them to every
// scheduler call makes each call cost O(queued tasks × nodes). A caller offers only
// the active tasks; a task the scheduler answers with Unplaced::needs_room is
// parked; when a node's free resources grow (a task ends there, the node joins or
// recovers), Released brings back the parked tasks whose request fits that node:
// per class, as many as could fit on it, oldest first. Nothing else can make room
// for a parked task, so none is left waiting while a node could run it; and a
// task that comes back can have room only on the nodes that grew since the last
// scheduler call (Snapshot::grown), so the scheduler looks at those alone
// (PendingTask::room_only_on_grown). With both, a call costs what changed, and
// its decisions are the ones it would make with every waiting task offered.
//
// Classes: tasks that the scheduler's filters cannot tell apart share one (same
// resource request, tenant, allowed regions, work kind and amount); a task with
// inputs (residency and transfers depend on them) is a class of its own. So when
// the oldest parked task of a class cannot use a node's room, none of the class
// can.
//
// Thread-safety: none; one owner (the simulator's loop, the coordinator's lock).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "model/work.h"
#include "sched/snapshot.h"

namespace meridian::sched {

class Backlog {
 public:
  // The caller's name for a task: small and dense (an index into its own table).
  using Handle = uint32_t;

  // Adds an active task; `seq` orders the queue (oldest first) and is unique.
  void Add(Handle h, int64_t seq, const model::Job& job, const model::Task& task, bool has_inputs);
  // Takes the task out, active or parked (placed, cancelled, its job ended).
  void Remove(Handle h);
  bool Contains(Handle h) const { return h < entries_.size() && entries_[h].present; }
  bool IsParked(Handle h) const { return Contains(h) && entries_[h].parked; }

  // The scheduler found no room for the active task h (Unplaced::needs_room).
  void Park(Handle h);
  // A node's free resources grew to `free`: parked tasks whose request fits come
  // back, per class as many as could fit on it.
  void Released(const NodeFree& free);
  // Every parked task comes back (the fleet or the policy changed).
  void UnparkAll();

  // The active tasks, oldest first, at most `max` (0: all):
  // f(handle, seq, room_only_on_grown), the last true for a task that came back
  // since the last EndRound (no node but those grown since can have room for it).
  template <typename F>
  void Offer(size_t max, F&& f) const {
    size_t n = 0;
    for (const auto& [seq, h] : active_) {
      if (max && n++ >= max) break;
      f(h, seq, entries_[h].back_in_round == round_);
    }
  }
  // A scheduler call was made: what came back before it is no longer known to
  // have room only on the nodes grown until then.
  void EndRound() { ++round_; }

  size_t size() const { return size_; }
  size_t active() const { return active_.size(); }
  size_t parked() const { return size_ - active_.size(); }
  size_t classes() const { return by_key_.size(); }

  // How many tasks of request r could fit on a node with these free resources,
  // at most (by CPU, memory and device share counted separately).
  static int64_t FitCount(const model::ResourceRequest& r, const NodeFree& free);

 private:
  struct Entry {
    int64_t seq = 0;
    uint32_t cls = 0;
    bool present = false;
    bool parked = false;
    uint64_t back_in_round = UINT64_MAX;  // the round it last came back in
  };
  struct Class {
    std::string key;
    model::ResourceRequest request;
    size_t members = 0;                            // active and parked
    std::set<std::pair<int64_t, Handle>> parked;   // oldest first
  };
  uint32_t ClassFor(std::string key, const model::ResourceRequest& request);
  void Unpark(Class& c, int64_t count);

  std::vector<Entry> entries_;                     // by handle
  std::set<std::pair<int64_t, Handle>> active_;    // oldest first
  std::vector<Class> classes_;
  std::vector<uint32_t> free_classes_;             // ids of classes with no members
  std::unordered_map<std::string, uint32_t> by_key_;
  std::vector<uint32_t> parked_classes_;           // ids with parked tasks (maybe stale)
  std::vector<bool> listed_;                       // by class: in parked_classes_
  size_t size_ = 0;
  uint64_t round_ = 0;
};

}  // namespace meridian::sched
