// `meridian bench sim`: how fast the simulator replays a real trace, at its own
// size and scaled (every node and every job N times), against a baseline run in
// the same process: the same replay where every scheduler call builds the fleet's
// pools itself instead of sharing a PoolIndex (run at the smallest scale only; it
// is O(nodes) per call).
#pragma once

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

StatusOr<std::vector<SimBenchResult>> RunSimBench(const SimBenchOptions& options, Env& env);

}  // namespace meridian::bench
