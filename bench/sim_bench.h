// `meridian bench sim`: how fast the simulator replays a real trace, at its own
// size and scaled (every node and every job N times), against a baseline run in
// the same process: the same replay where every scheduler call builds the fleet's
// pools itself instead of sharing a PoolIndex (run at the smallest scale only; it
// is O(nodes) per call).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/env.h"
#include "common/status.h"

namespace meridian::bench {

struct SimBenchOptions {
  std::string fleet = "examples/fleets/alibaba-gpu-2023.yaml";
  std::string trace = "../shared/data/traces/alibaba-gpu-v2023/openb_pod_list_default.csv";
  std::string policy = "meridian";
  std::vector<int> scales = {1, 100};
  uint64_t seed = 1;
  // The saturated case: this many jobs with the trace's shapes arrive this many a
  // second and run this long on average (exponential), so that the backlog grows
  // to nearly all of them; 0 jobs: not run. Each replay stops after wall_limit_s.
  size_t saturated_jobs = 20'000;
  double saturated_per_second = 100;
  double saturated_mean_run_s = 1800;
  double saturated_wall_limit_s = 150;
};

// One replay of the saturated case.
struct SaturatedRun {
  int64_t placements = 0;
  size_t peak_waiting = 0;
  bool finished = false;  // false: stopped at the wall limit
  double replay_s = 0;
  double sched_s = 0;
  int64_t sched_calls = 0;
  int64_t sched_decisions = 0;  // tasks offered to the scheduler, in all calls
  double sched_call_p50_us = 0;
  double sched_call_p99_us = 0;
  // Placements over the replay's wall time (the whole loop: snapshots, queue,
  // scheduler).
  double placements_per_second = 0;
};

struct SaturatedResult {
  size_t nodes = 0;
  size_t jobs = 0;
  SaturatedRun run;       // waiting tasks parked by request shape (sched::Backlog)
  SaturatedRun baseline;  // every waiting task offered to every scheduler call
  // Jobs the baseline started before its limit, and of those, any that started
  // at another time with parking (there should be none: parking changes no
  // decision).
  size_t compared_jobs = 0;
  size_t differing_jobs = 0;
};

struct SimBenchResult {
  int scale = 0;
  size_t nodes = 0;
  size_t tasks = 0;
  double load_s = 0;     // reading and scaling the fleet and trace
  double replay_s = 0;   // the simulation itself
  double tasks_per_second = 0;
  double sched_s = 0;    // inside sched::Schedule
  int64_t sched_calls = 0;
  double sched_call_p50_us = 0;
  double sched_call_p99_us = 0;
  double baseline_replay_s = -1;  // -1: not run at this scale
};

struct SimBenchReport {
  std::vector<SimBenchResult> scales;
  std::optional<SaturatedResult> saturated;  // when saturated_jobs > 0
};

// Loads the fleet and trace once, replays them at each scale, then the saturated
// case.
StatusOr<SimBenchReport> RunSimBench(const SimBenchOptions& options, Env& env);

}  // namespace meridian::bench
