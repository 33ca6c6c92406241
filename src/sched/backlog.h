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
// resource request, tenant, priority, allowed regions, work kind and amount); a
// task with inputs (residency and transfers depend on them) is a class of its own.
// So when the first parked task of a class cannot use a node's room, none of the
// class can. Within a class, tasks are in the scheduler's queue order for every
// QueueOrder: by submission time, then seq.
//
// Thread-safety: none; one owner (the simulator's loop, the coordinator's lock).
// A round: Released for each node that grew, Offer, the scheduler call, Park for
// each needs_room answer, EndRound.
#pragma once

#include <cstdint>
#include <set>
#include <tuple>
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

  // Adds an active task of a job submitted at `submit_us`; `seq` is unique and
  // orders tasks submitted at once (PendingTask::seq, JobState::submit_us).
  void Add(Handle h, int64_t submit_us, int64_t seq, const model::Job& job, const model::Task& task,
           bool has_inputs);
  // Takes the task out, active or parked (placed, cancelled, its job ended).
  void Remove(Handle h);
  bool Contains(Handle h) const { return h < entries_.size() && entries_[h].present; }
  bool IsParked(Handle h) const { return Contains(h) && entries_[h].parked; }

  // The scheduler found no room for h, offered in this round
  // (Unplaced::needs_room).
  void Park(Handle h);
  // A node's free resources grew to `free`: parked tasks whose request fits come
  // back for the next round, per class as many as could fit on it. Between
  // rounds only (not between Offer and EndRound).
  void Released(const NodeFree& free);
  // Every parked task comes back (the fleet or the policy changed).
  void UnparkAll();

  // Whether a round has anything to offer: active tasks, or some came back.
  bool HasWork() const { return !active_.empty() || !back_classes_.empty(); }
  // A round: the active tasks and those that came back, oldest first, at most
  // `max` (0: all; parked tasks do not count): f(const Offered&). Call once per
  // round, then EndRound.
  struct Offered {
    int64_t submit_us;
    int64_t seq;
    Handle handle;
    // No node but those grown since the last round can have room for it
    // (PendingTask::room_only_on_grown): it came back, or its class had no room
    // left at the end of the last round.
    bool room_only_on_grown;
    bool came_back;
    // Its class: tasks of one class have the same request and the same filters
    // (PendingTask::room_class).
    uint32_t room_class;
  };
  template <typename F>
  void Offer(size_t max, F&& f) {
    in_round_ = true;
    Gather();
    for (size_t i = 0; i < offer_.size() && (max == 0 || i < max); ++i) f(offer_[i]);
  }
  // The round's answers are in (Park): what came back and was not parked again,
  // or was not offered, is active from now on.
  void EndRound();

  size_t size() const { return size_; }
  size_t active() const { return active_.size(); }  // not counting those come back
  size_t parked() const { return size_ - active_.size(); }
  size_t classes() const { return by_key_.size(); }

  // How many tasks of request r could fit on a node with these free resources,
  // at most (by CPU, memory and device share counted separately).
  static int64_t FitCount(const model::ResourceRequest& r, const NodeFree& free);

 private:
  using Key = std::tuple<int64_t, int64_t, Handle>;  // submit_us, seq, handle
  struct Entry {
    int64_t submit_us = 0;
    int64_t seq = 0;
    uint32_t cls = 0;
    bool present = false;
    bool parked = false;                   // in its class's parked set
    uint64_t parked_in_round = UINT64_MAX;  // Park called in this round
  };
  struct Class {
    std::string key;
    model::ResourceRequest request;
    size_t members = 0;                            // active and parked
    std::set<Key> parked;                          // oldest first
    // The oldest `back` parked tasks come back in the next round. They stay in
    // `parked` meanwhile: most are parked again, which then moves nothing.
    int64_t back = 0;
    bool in_parked_list = false;  // in parked_classes_
    bool in_back_list = false;    // in back_classes_
    // At the end of this round no node had room for a task of the class: one was
    // parked in it, or the class was full at the end of the round before and no
    // node grew to fit it since (nothing but growth makes room).
    uint64_t full_through = UINT64_MAX;
    bool in_full_list = false;  // in full_classes_
  };
  uint32_t ClassFor(std::string key, const model::ResourceRequest& request);
  void MakeActive(Handle h);
  // Fills offer_: the active tasks and those come back, by seq.
  void Gather();

  std::vector<Entry> entries_;                     // by handle
  std::set<Key> active_;                           // oldest first
  std::vector<Class> classes_;
  std::vector<uint32_t> free_classes_;             // ids of classes with no members
  std::unordered_map<std::string, uint32_t> by_key_;
  std::vector<uint32_t> parked_classes_;           // ids with parked tasks (maybe stale)
  std::vector<uint32_t> back_classes_;             // ids with back > 0
  std::vector<uint32_t> full_classes_;             // ids with full_through == round_ (and stale ones)
  std::vector<Offered> offer_;                     // this round's
  size_t size_ = 0;
  uint64_t round_ = 0;
  bool in_round_ = false;  // between Offer and EndRound
};

}  // namespace meridian::sched
