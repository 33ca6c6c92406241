// The `meridian` subcommands. Each returns a Status; main prints a non-OK one as
// one line on stderr and exits non-zero.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "common/status.h"

namespace meridian::cli {

struct PlanOptions {
  std::string fleet;
  std::string job;
  std::string order = "fifo";
  uint64_t seed = 1;
  bool json = false;
};
// `meridian plan --fleet FLEET.yaml JOB.yaml`: the dry run.
Status RunPlan(const PlanOptions& options, std::ostream& out);

struct BenchSchedOptions {
  std::vector<int64_t> nodes;
  int64_t tasks = 0;
  uint64_t seed = 1;
  bool json = false;
};
// `meridian bench sched`.
Status RunBenchSched(const BenchSchedOptions& options, std::ostream& out);

struct BenchSimOptions {
  std::string fleet;
  std::string trace;
  std::string policy = "meridian";
  std::vector<int> scales;
  uint64_t seed = 1;
  bool json = false;
};
// `meridian bench sim`.
Status RunBenchSim(const BenchSimOptions& options, std::ostream& out);

struct SimOptions {
  std::string fleet;
  std::string trace;
  std::string trace_format = "auto";
  std::string policy = "meridian";
  std::vector<std::string> compare;
  std::string order = "fifo";
  uint64_t seed = 1;
  int scale_nodes = 1;
  int scale_jobs = 1;
  std::string node_mtbf, spot_mtbp, repair;
  std::vector<std::string> changes;
  size_t max_offered = 0;
  double fill = 0;  // > 0: the fill experiment up to this multiple of GPU capacity
  std::string out;
  bool json = false;
  bool markdown = false;
  std::string relative_to;  // a compared policy the others are measured against
};
// `meridian sim`: replay a trace on a fleet under one or several policies.
Status RunSim(const SimOptions& options, std::ostream& out);

}  // namespace meridian::cli
