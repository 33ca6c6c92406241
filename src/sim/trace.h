// Workload traces for the simulator: jobs with arrival times, read from the
// published traces we replay or from our own CSV format (docs/simulator.md).
//
//   Alibaba GPU 2023 (alibaba/clusterdata cluster-trace-gpu-v2023, Weng et al.,
//     ATC 2023): one single-task job per pod; fractional GPUs from gpu_milli, GPU
//     model constraints from gpu_spec; run time deletion - scheduled (or -
//     creation for pods that never ran).
//   Sia/Philly (Jayaram Subramanya et al., SOSP 2023): one gang per training job,
//     one replica per GPU; the work is a number of training steps whose speed per
//     GPU type comes from Gavel's measurements (Narayanan et al., OSDI 2020).
//   Gavel (Narayanan et al., OSDI 2020): Gavel's own trace files, ten
//     tab-separated fields per job, no header; a job of scale factor k is a gang of
//     k replicas, each running the job's total steps at its device's rate.
//   Generic: one row per task, docs/simulator.md.
//
// Thread-safety: value types; a Trace's jobs are immutable and shared by copies.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "model/fleet.h"
#include "model/throughput.h"
#include "model/work.h"

namespace meridian::sim {

struct TraceJob {
  int64_t arrival_us = 0;
  // Shared by the copies of a scaled trace.
  std::shared_ptr<const model::Job> job;
};

struct Trace {
  std::string name;    // the file's stem
  std::string format;  // "alibaba-gpu-2023", "sia-philly", "meridian-csv"
  std::vector<TraceJob> jobs;  // by arrival; ties keep file order
  // A pod list without times (openb_pod_list_multigpu20.csv): jobs arrive one a
  // second in file order and have no run time; only the fill experiment uses it.
  bool timeless = false;

  size_t TaskCount() const;
};

enum class TraceFormat { kAuto, kAlibaba, kSiaPhilly, kGavel, kGeneric };

// Reads a trace; kAuto tells the format from the header. `throughput` gives the
// Sia/Philly jobs their work kinds (Gavel's). `fleet` resolves site names used by
// the generic format's input_site column.
StatusOr<Trace> LoadTrace(const std::string& path, TraceFormat format, const model::Fleet& fleet,
                          const model::ThroughputTable& throughput);

StatusOr<Trace> ParseAlibabaPods(std::string text, const std::string& file);
StatusOr<Trace> ParseSiaPhilly(std::string text, const std::string& file, const model::ThroughputTable& throughput);
StatusOr<Trace> ParseGenericTrace(std::string text, const std::string& file, const model::Fleet& fleet);
StatusOr<Trace> ParseGavelTrace(std::string_view text, const std::string& file,
                                const model::ThroughputTable& throughput);

// `factor` copies of every job, arriving with the original (sharing its Job).
Trace ScaleJobs(const Trace& trace, int factor);

// For the fill experiment: the trace's jobs over and over in their order, one a
// second, until their GPU demand reaches `target` times `capacity_gpu_milli`.
Trace FillTrace(const Trace& trace, int64_t capacity_gpu_milli, double target);

// A backlog that outgrows the fleet: `jobs` jobs with the trace's request shapes
// (its jobs over and over in their order), arriving `per_second` a second, each
// task running an exponentially distributed time of mean `mean_run_us` (seeded),
// instead of the trace's own times.
Trace SaturatingTrace(const Trace& trace, size_t jobs, double per_second, int64_t mean_run_us, uint64_t seed);

}  // namespace meridian::sim
