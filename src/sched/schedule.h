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
#include <string_view>
#include <vector>

#include "common/env.h"
#include "sched/plan.h"
#include "sched/queue.h"
#include "sched/snapshot.h"

namespace meridian::sched {

// How a task's pool is chosen among those that pass the filters and the hard
// constraints (deadline, budget, quota).
//   kScored         Meridian's: best by the job's objective (finish time from the
//                   throughput table, transfers and waits; cost), holding out for
//                   a busy pool that frees soon when that still wins;
//   kAnyPool        every passing pool alike: the node choice alone decides, over
//                   the nodes of all of them (classic first-fit, best-fit, random);
//   kCheapestPrice  the lowest hourly price per device first, whatever the speed
//                   ("always the cheapest region").
enum class PoolChoice { kScored, kAnyPool, kCheapestPrice };

// How a node is chosen among the nodes with room:
//   kNextFit             fill the node last used, then move on (fast: a placement
//                        usually probes one node);
//   kFirstFit            the first node in fleet order;
//   kBestFit             the node left with the least free device capacity, then CPU;
//   kRandom              uniformly at random (seeded);
//   kLeastFragmentation  the node whose free devices stay most usable by the
//                        expected workload (Weng et al., "Beware of Fragmentation",
//                        ATC 2023): the least growth of device capacity that the
//                        workload's request shapes could not use.
enum class NodeChoice { kNextFit, kFirstFit, kBestFit, kRandom, kLeastFragmentation };

std::string_view PoolChoiceName(PoolChoice c);
std::string_view NodeChoiceName(NodeChoice c);

// A request shape of the expected workload, with its share of tasks.
struct WorkloadShape {
  model::ResourceRequest request;
  double weight = 1;
};

// The expected workload of a set of requests, as FGD (Weng et al., ATC 2023) keys
// its typical tasks: by CPU, device count, device share and accepted device types,
// each weighted by how often it occurs; tasks that need no device included. The
// simulator's `frag-aware` (FGD as published).
std::vector<WorkloadShape> FgdWorkload(const std::vector<const model::ResourceRequest*>& requests);
// Meridian's: the GPU requests grouped by device count and share, the CPU and memory
// asked most within a group standing for it, each group weighted by its GPU demand
// (so a rare 8-GPU shape weighs what it takes). Leaves fewer GPUs unallocated than
// FGD's weighting when only a few nodes are compared (docs/results.md §2).
std::vector<WorkloadShape> GpuDemandWorkload(const std::vector<const model::ResourceRequest*>& requests);

struct Policy {
  QueueOrder order = QueueOrder::kFifo;
  PoolChoice pools = PoolChoice::kScored;
  NodeChoice nodes = NodeChoice::kNextFit;
  // false: every device type counts as equally fast for every kind of work and
  // equally priced (a heterogeneity-agnostic baseline, as in Gavel's evaluation):
  // equal candidates go by the seeded tie-break. The table still says which types
  // can run a kind, and budgets still hold.
  bool heterogeneity_aware = true;
  // kLeastFragmentation: the expected request shapes (at most 16, the heaviest
  // first). Empty: GpuDemandWorkload of the snapshot's queue.
  std::vector<WorkloadShape> workload;
  // kLeastFragmentation and kBestFit: how many nodes with room are compared per
  // pool and placement, from the pool's cursor (0: all). Bounds a decision at
  // large scale, as Kubernetes' percentageOfNodesToScore does.
  size_t node_sample = 0;
  // kScored with kBestFit or kLeastFragmentation: pools close enough to the best
  // candidate count as equally good, and the node choice compares the nodes of all
  // of them. Close enough: the job objective's own measure (finish time for
  // fastest, cost for cheapest, both for balanced) within near_best of the best's,
  // and the other measure within near_best_secondary. near_best 0: the best pool
  // only.
  double near_best = 0;
  double near_best_secondary = 0;
  // false: tasks left waiting get no reason (Unplaced::reason empty), which saves
  // composing words nobody reads (the simulator); infeasible ones always get one.
  bool explain_waiting = true;
  // Called after each decision (a task or a whole gang) with the number of tasks
  // decided so far. The scheduler reads no clock; a benchmark timestamps here.
  std::function<void(size_t decided)> on_decision;

  static Policy WithOrder(QueueOrder order) {
    Policy p;
    p.order = order;
    return p;
  }
  // Meridian's policy, the one the coordinator runs, `plan` forecasts and the
  // simulator replays as "meridian": pools scored by the job's objective; among
  // the pools within 5% of the best's own measure (finish time, or cost for
  // cheapest jobs) and within 2x of its other, the node that leaves the expected
  // workload's shapes the most usable capacity, comparing at most 4 nodes with
  // room per pool. `workload`: the expected request shapes (empty: those waiting
  // in each call's queue).
  static Policy Meridian(QueueOrder order = QueueOrder::kFifo, std::vector<WorkloadShape> workload = {}) {
    Policy p;
    p.order = order;
    p.nodes = NodeChoice::kLeastFragmentation;
    p.node_sample = 4;
    p.near_best = 0.05;
    p.near_best_secondary = 1.0;
    p.workload = std::move(workload);
    return p;
  }
};

Plan Schedule(const Snapshot& snapshot, const Policy& policy, Random& rng);

}  // namespace meridian::sched
