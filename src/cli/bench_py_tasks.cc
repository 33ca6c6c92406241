// meridian bench py-tasks: N no-op Python functions through the Python package's
// client.map on a local Meridian cluster of one agent (this machine's cores), beside
// Dask's client.map on a Dask LocalCluster of as many single-threaded worker
// processes, in the same run (python/meridian/bench.py does the timing). The ratio is
// Meridian's calls a second over Dask's.
#include <algorithm>
#include <atomic>
#include <thread>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/bench_cluster.h"
#include "cli/commands.h"
#include "common/subprocess.h"

namespace meridian::cli {

Status RunBenchPyTasks(const BenchPyTasksOptions& o, std::ostream& out) {
#ifndef MERIDIAN_PYTHON_DIR
  (void)o;
  (void)out;
  return FailedPreconditionError("bench py-tasks: this build has no Python package (configure with MERIDIAN_PYTHON=ON)");
#else
  if (o.tasks < 1 || o.tasks > 10'000'000) return InvalidArgumentError("--tasks: expected 1 to 10,000,000");
  if (o.repeat < 1 || o.repeat > 100) return InvalidArgumentError("--repeat: expected 1 to 100");
  if (o.ungrouped < 1 || o.ungrouped > 100'000) return InvalidArgumentError("--ungrouped: expected 1 to 100,000");
  if (o.single < 1 || o.single > 100'000) return InvalidArgumentError("--single: expected 1 to 100,000");
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<BenchCluster> cluster, BenchCluster::Start(OneSiteFleet(1), false));
  ProcessOptions p;
  p.argv = {MERIDIAN_PYTHON_EXECUTABLE, "-m", "meridian.bench", "--dir", cluster->target().dir};
  for (const auto& [flag, value] : {std::pair<const char*, int64_t>{"--tasks", o.tasks},
                                    {"--workers", cores},
                                    {"--repeat", o.repeat},
                                    {"--ungrouped", o.ungrouped},
                                    {"--single", o.single}}) {
    p.argv.push_back(flag);
    p.argv.push_back(std::to_string(value));
  }
  p.env = CurrentEnvironment();
  std::erase_if(p.env, [](const std::string& e) { return e.rfind("PYTHONPATH=", 0) == 0; });
  p.env.push_back(std::string("PYTHONPATH=") + MERIDIAN_PYTHON_DIR);
  p.timeout_us = 3'600'000'000;
  std::atomic<bool> stop{false};
  MERIDIAN_ASSIGN_OR_RETURN(ProcessResult r, RunProcess(p, stop));
  if (r.exit_code != 0 || r.signal != 0 || r.timed_out) {
    return UnavailableError(fmt::format("bench py-tasks: the Python side failed (exit code {}, signal {}): {}",
                                        r.exit_code, r.signal, r.stderr_tail));
  }
  nlohmann::json j = nlohmann::json::parse(r.stdout_head, nullptr, false);
  if (j.is_discarded() || !j.contains("ratio")) {
    return DataLossError(fmt::format("bench py-tasks: the Python side printed no figures: {}", r.stdout_head));
  }
  j["cores"] = cores;
  if (o.json) {
    out << j.dump(2) << '\n';
    return OkStatus();
  }
  const nlohmann::json& m = j["meridian"];
  const nlohmann::json& d = j["dask"];
  out << fmt::format("{} no-op Python functions through client.map, best of {} ({} cores)\n", o.tasks, o.repeat, cores);
  out << fmt::format("  Meridian  {:>10.0f} calls/s  {:.3f} s  ({} tasks of grouped calls, one agent)\n",
                     m["tasks_per_second"].get<double>(), m["best_seconds"].get<double>(), m["job_tasks"].get<int>());
  const nlohmann::json& one = m["one_call_per_task"];
  out << fmt::format("  Meridian  {:>10.0f} calls/s  {:.3f} s  ({} calls, one task each: an interpreter a call)\n",
                     one["tasks_per_second"].get<double>(), one["seconds"].get<double>(), one["calls"].get<int>());
  for (const auto& [key, what] : {std::pair<const char*, const char*>{"single_call_warm", "forked from a warm interpreter"},
                                  {"single_call_cold", "an interpreter each (the baseline)"}}) {
    const nlohmann::json& s = m[key];
    out << fmt::format("  Meridian  one call at a time: p50 {:.1f} ms, p99 {:.1f} ms  ({} calls, {})\n",
                       s["p50_ms"].get<double>(), s["p99_ms"].get<double>(), s["calls"].get<int>(), what);
  }
  out << fmt::format("  Dask      {:>10.0f} calls/s  {:.3f} s  ({} tasks, LocalCluster of {} worker processes)\n",
                     d["tasks_per_second"].get<double>(), d["best_seconds"].get<double>(), d["job_tasks"].get<int>(),
                     cores);
  out << fmt::format("  ratio     {:.2f}x (map against Dask); warm_ratio {:.2f}x (one call, cold p50 / warm p50)\n",
                     j["ratio"].get<double>(), j["warm_ratio"].get<double>());
  return OkStatus();
#endif
}

}  // namespace meridian::cli
