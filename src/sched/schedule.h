// sched::Schedule: the scheduler as a pure function of a snapshot.
//
//   queue order (FIFO | priority | fair share)
//     -> for each task (a gang: all members, all-or-nothing):
//        Filter plugins per pool -> Score (finish time, cost; estimate.h)
//        -> hard constraints (deadline, budget, tenant quota)
//        -> Select by the job's objective -> the first node of the pool with room.
//
// Resources are accounted as tasks are taken, so one call places many tasks without
// over-committing any node. Every task that is not placed gets a reason, and
// "infeasible anywhere" (kInfeasible) is distinct from "not now" (kWaiting). The
// result depends only on the snapshot, the policy and the random source's seed
// (which breaks ties between equally good pools).
//
// Thread-safety: Schedule touches nothing but its arguments; calls on different
// snapshots may run in parallel.
#pragma once

#include <functional>

#include "common/env.h"
#include "sched/plan.h"
#include "sched/queue.h"
#include "sched/snapshot.h"

namespace meridian::sched {

struct Policy {
  QueueOrder order = QueueOrder::kFifo;
  // Called after each decision (a task or a whole gang) with the number of tasks
  // decided so far. The scheduler reads no clock; a benchmark timestamps here.
  std::function<void(size_t decided)> on_decision;
};

Plan Schedule(const Snapshot& snapshot, const Policy& policy, Random& rng);

}  // namespace meridian::sched
