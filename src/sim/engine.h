// The discrete-event simulator: replays a trace on a fleet, calling the same
// sched::Schedule as the coordinator, on a virtual clock.
//
// Events (job arrivals, task completions, node failures and repairs, spot
// preemptions, nodes added or removed) are processed in time order, ties by
// sequence number; after the events of one instant, if anything changed and tasks
// wait, the scheduler is called once with a snapshot of the simulated state. A
// placed task first stages its inputs over the fleet's links (the transfer the
// plan names, at the link's bandwidth), then computes for its run time on the
// device it got: a trace's fixed duration, or its work over the throughput of that
// device type. A gang runs at the pace of its slowest member. Tasks killed by a
// failure or preemption are queued again (all members, for a gang).
//
// Everything but the decision-time figures depends only on the inputs and the
// seed. The loop is bounded: it ends when no event is left.
//
// Thread-safety: a Simulation is used by one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/env.h"
#include "common/status.h"
#include "model/fleet.h"
#include "model/throughput.h"
#include "sched/schedule.h"
#include "sim/trace.h"

namespace meridian::sim {

// A change of the fleet at a virtual time.
struct FleetChange {
  int64_t at_us = 0;
  int32_t add = 0;     // copies of existing nodes (round-robin over the fleet)
  int32_t remove = 0;  // the newest healthy nodes leave; their tasks are requeued
};

// How far a replay has come, for a progress line on a long run.
struct SimProgress {
  double simulated_s = 0;    // virtual time since the first arrival
  double span_s = 0;         // from the first arrival to the last
  size_t arrived = 0;        // jobs arrived so far
  size_t jobs = 0;           // in the trace
  double wall_s = 0;         // real time so far
};

struct SimOptions {
  std::string policy_name = "meridian";
  sched::Policy policy;
  uint64_t seed = 1;
  // Failures: each node fails after an exponential time of this mean (0: never)
  // and comes back after repair_us; spot nodes are preempted likewise.
  int64_t node_mtbf_us = 0;
  int64_t spot_mtbp_us = 0;
  int64_t repair_us = 10 * 60 * 1'000'000LL;
  // A task whose node fails or is preempted is queued again at most this many
  // times; then its job fails with the reason. (Without checkpoints, a task longer
  // than the mean time between failures may never finish.)
  int32_t max_restarts = 10;
  std::vector<FleetChange> changes;
  // Queue order of the policy is the policy's; at most this many waiting tasks are
  // offered to one scheduler call, oldest first (0: all); parked ones (`park`)
  // are not offered and do not count.
  size_t max_offered = 0;
  // Points of the utilisation series kept for the report.
  size_t series_points = 240;
  // The fill experiment of Weng et al. (ATC 2023): tasks never finish, and one
  // that finds no room when it arrives is turned away rather than queued. Use with
  // FillTrace; the result's fill_curve shows GPU allocation as demand arrives.
  bool fill = false;
  // false: every scheduler call builds the fleet's pools itself, as a caller
  // without a long-lived PoolIndex would (the benchmark's baseline).
  bool share_pool_index = true;
  // Park tasks the scheduler found no room for until a node has room for them
  // again (sched::Backlog); false offers every waiting task to every call (the
  // saturated benchmark's baseline). The decisions are the same either way.
  bool park = true;
  // Stop the replay once it has run this long on the real clock (0: never); the
  // result says so (stopped_early). For benchmarks of replays that may not end.
  double wall_limit_s = 0;
  // Called with the replay's progress about every `progress_every_s` of real time
  // (not at all when empty), from the replaying thread.
  std::function<void(const SimProgress&)> on_progress;
  double progress_every_s = 1;
};

struct Percentiles {
  double mean = 0, p50 = 0, p99 = 0, max = 0;  // seconds
};

struct JobOutcome {
  std::string name;
  int64_t arrival_us = 0;
  int64_t start_us = -1;   // its first task's start
  int64_t finish_us = -1;  // the last task's finish; -1 if it did not finish
  bool infeasible = false;
  bool rejected = false;   // fill experiment: no room when it arrived
  bool failed = false;     // a task lost its node more than max_restarts times
  std::string reason;      // why it was infeasible or failed
  int32_t restarts = 0;    // task runs killed by failures or preemptions
  int64_t cost_micro_usd = 0;
  // Where its tasks ran: the sites and the device types ("CPU" for none), each once,
  // ';'-separated in the order first used.
  std::string sites;
  std::string device_types;
};

struct SeriesPoint {
  double t_s = 0;
  double value = 0;
};

struct SimResult {
  std::string policy;
  std::string trace;
  uint64_t seed = 0;
  size_t nodes = 0;
  int64_t gpus = 0;
  size_t jobs = 0;
  size_t tasks = 0;
  size_t finished_jobs = 0;
  size_t infeasible_jobs = 0;
  size_t failed_jobs = 0;      // a task restarted more than max_restarts times
  size_t unfinished_jobs = 0;  // none of these: waiting when events ran out
  Percentiles jct;             // arrival to finish, finished jobs
  Percentiles queueing;        // arrival to first start, started jobs
  double makespan_s = 0;       // first arrival to last finish
  double gpu_utilisation = 0;  // time-weighted allocated/healthy GPU capacity
  // Free GPU capacity (in GPUs) that none of the waiting GPU tasks could use,
  // time-weighted over the time GPU tasks waited; and that time.
  double unusable_gpus_while_waiting = 0;
  double gpu_waiting_s = 0;
  double free_gpus_while_waiting = 0;
  int64_t compute_cost_micro_usd = 0;
  int64_t egress_cost_micro_usd = 0;
  std::map<std::string, int64_t> wan_bytes;  // "from->to"
  int64_t node_failures = 0;
  int64_t preemptions = 0;
  int64_t task_restarts = 0;
  std::vector<SeriesPoint> utilisation;  // fraction over virtual time
  // Fill experiment: x = GPU demand arrived / capacity, value = allocated / capacity.
  std::vector<SeriesPoint> fill_curve;
  size_t rejected_jobs = 0;             // turned away for lack of room (fill)
  double unallocated_gpus_at_full = 0;  // when the demand arrived reaches capacity
  double unallocated_gpus_end = 0;
  std::vector<double> jct_quantiles_s;   // 101 points: 0th..100th percentile
  std::vector<JobOutcome> outcomes;      // by trace order
  std::vector<std::string> infeasible_reasons;  // distinct, at most 20

  // Wall-clock figures, not deterministic.
  double wall_s = 0;
  bool stopped_early = false;  // SimOptions::wall_limit_s ran out
  int64_t placements = 0;      // tasks started, restarts included
  size_t peak_waiting = 0;     // the most tasks waiting at one scheduler call
  int64_t sched_calls = 0;
  int64_t sched_decisions = 0;
  double sched_total_s = 0;
  double sched_call_p50_us = 0;
  double sched_call_p99_us = 0;
};

// Runs one replay. The fleet's throughput table gives run times of work-based
// tasks. `env` supplies the real clock for decision times only.
StatusOr<SimResult> Simulate(const model::Fleet& fleet, const model::ThroughputTable& throughput,
                             const Trace& trace, const SimOptions& options, Env& env);

// The simulator's named policies: "meridian", "meridian-packed" and the baselines
// "first-fit", "best-fit", "random", "agnostic", "cheapest-region". Fills the
// scheduler policy; fragmentation-aware ones take their workload from `trace`.
StatusOr<sched::Policy> NamedPolicy(std::string_view name, const Trace& trace);
std::vector<std::string> PolicyNames();

}  // namespace meridian::sim
