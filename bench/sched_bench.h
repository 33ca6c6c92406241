// `meridian bench sched`: placements per second and per-decision latency of
// sched::Schedule on synthetic fleets, against a baseline run in the same process:
// a scheduler that scans every node for every task (what a scheduler without
// node pools or sampling does).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/env.h"
#include "common/status.h"

namespace meridian::bench {

struct SchedBenchOptions {
  std::vector<int64_t> nodes = {1'000, 10'000, 100'000};
  int64_t tasks = 0;            // 0: as many as the fleet has GPUs, at most 100,000
  int64_t baseline_tasks = 2'000;  // the full-scan baseline is slow; fewer tasks
  uint64_t seed = 1;
};

struct SchedBenchResult {
  int64_t nodes = 0;
  int64_t pools = 0;
  int64_t tasks = 0;
  int64_t placed = 0;
  double seconds = 0;
  double placements_per_second = 0;
  double p50_us = 0;
  double p99_us = 0;
  // The full-scan baseline on the same fleet.
  int64_t baseline_tasks = 0;
  double baseline_placements_per_second = 0;
  double baseline_p50_us = 0;
  double baseline_p99_us = 0;
};

StatusOr<std::vector<SchedBenchResult>> RunSchedBench(const SchedBenchOptions& options, Env& env);

}  // namespace meridian::bench
