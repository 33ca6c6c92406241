#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/sched_bench.h"
#include "bench/sim_bench.h"
#include "cli/commands.h"
#include "cli/table.h"

namespace meridian::cli {

Status RunBenchSched(const BenchSchedOptions& options, std::ostream& out) {
  bench::SchedBenchOptions o;
  if (!options.nodes.empty()) o.nodes = options.nodes;
  o.tasks = options.tasks;
  o.seed = options.seed;
  MERIDIAN_ASSIGN_OR_RETURN(std::vector<bench::SchedBenchResult> results,
                            bench::RunSchedBench(o, Env::Default()));
  if (options.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& r : results) {
      rows.push_back({{"nodes", r.nodes}, {"pools", r.pools}, {"tasks", r.tasks}, {"placed", r.placed},
                      {"seconds", r.seconds}, {"placements_per_second", r.placements_per_second},
                      {"p50_us", r.p50_us}, {"p99_us", r.p99_us},
                      {"baseline", {{"name", "full scan of every node per task"}, {"tasks", r.baseline_tasks},
                                    {"placements_per_second", r.baseline_placements_per_second},
                                    {"p50_us", r.baseline_p50_us}, {"p99_us", r.baseline_p99_us}}}});
    }
    out << nlohmann::json{{"benchmark", "sched"}, {"seed", options.seed}, {"results", rows}}.dump(2) << '\n';
    return OkStatus();
  }
  out << "sched::Schedule, single-device tasks (mixed types, objectives, 1 in 5 with a 1 GiB input),\n"
         "8-GPU nodes over 8 sites, one core. Baseline: the same decisions by scanning every node per task.\n\n";
  Table t({"NODES", "POOLS", "TASKS", "PLACED", "PLACEMENTS/S", "P50", "P99", "BASELINE/S", "BASE P50", "BASE P99", "SPEED-UP"});
  for (const auto& r : results) {
    t.Add({std::to_string(r.nodes), std::to_string(r.pools), std::to_string(r.tasks), std::to_string(r.placed),
           fmt::format("{:.0f}", r.placements_per_second), fmt::format("{:.1f} us", r.p50_us),
           fmt::format("{:.1f} us", r.p99_us), fmt::format("{:.0f}", r.baseline_placements_per_second),
           fmt::format("{:.1f} us", r.baseline_p50_us), fmt::format("{:.1f} us", r.baseline_p99_us),
           fmt::format("{:.0f}x", r.baseline_placements_per_second > 0
                                      ? r.placements_per_second / r.baseline_placements_per_second : 0)});
  }
  t.Print(out);
  out << "\nFor scale: Kubernetes' scheduler manages about 100-330 pods/s; Firmament needs up to 1 s per round at 12,500 machines.\n";
  return OkStatus();
}

Status RunBenchSim(const BenchSimOptions& options, std::ostream& out) {
  bench::SimBenchOptions o;
  if (!options.fleet.empty()) o.fleet = options.fleet;
  if (!options.trace.empty()) o.trace = options.trace;
  if (!options.scales.empty()) o.scales = options.scales;
  o.policy = options.policy;
  o.seed = options.seed;
  o.saturated_jobs = options.saturated_jobs;
  o.saturated_wall_limit_s = options.saturated_limit_s;
  MERIDIAN_ASSIGN_OR_RETURN(bench::SimBenchReport report, bench::RunSimBench(o, Env::Default()));
  const std::vector<bench::SimBenchResult>& results = report.scales;
  const std::optional<bench::SaturatedResult>& sat = report.saturated;
  auto run_json = [](const bench::SaturatedRun& r) {
    return nlohmann::json{{"placements", r.placements}, {"peak_waiting", r.peak_waiting}, {"finished", r.finished},
                          {"replay_s", r.replay_s}, {"sched_s", r.sched_s}, {"sched_calls", r.sched_calls},
                          {"sched_decisions", r.sched_decisions}, {"sched_call_p50_us", r.sched_call_p50_us}, {"sched_call_p99_us", r.sched_call_p99_us},
                          {"placements_per_second", r.placements_per_second}};
  };
  const char* kReference = "Alibaba's own Python simulator (Weng et al., ATC 2023) reports 52-110 s for 20,000 "
                           "jobs on 6,500 GPUs (reported, not measured here)";
  if (options.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& r : results) {
      nlohmann::json row = {{"scale", r.scale}, {"nodes", r.nodes}, {"tasks", r.tasks}, {"load_s", r.load_s},
                            {"replay_s", r.replay_s}, {"tasks_per_second", r.tasks_per_second},
                            {"sched_s", r.sched_s}, {"sched_calls", r.sched_calls},
                            {"sched_call_p50_us", r.sched_call_p50_us}, {"sched_call_p99_us", r.sched_call_p99_us}};
      if (r.baseline_replay_s >= 0) {
        row["baseline"] = {{"name", "pools built in every scheduler call"}, {"replay_s", r.baseline_replay_s}};
      }
      rows.push_back(row);
    }
    nlohmann::json doc = {{"benchmark", "sim"}, {"fleet", o.fleet}, {"trace", o.trace}, {"policy", o.policy},
                          {"seed", o.seed}, {"reference", kReference}, {"results", rows}};
    if (sat) {
      doc["saturated_placements_per_second"] = sat->run.placements_per_second;
      doc["saturated"] = {{"nodes", sat->nodes}, {"jobs", sat->jobs}, {"per_second", o.saturated_per_second},
                          {"mean_run_s", o.saturated_mean_run_s}, {"run", run_json(sat->run)},
                          {"baseline", run_json(sat->baseline)},
                          {"baseline_name", "every waiting task offered to every scheduler call"},
                          {"compared_jobs", sat->compared_jobs}, {"differing_jobs", sat->differing_jobs}};
    }
    out << doc.dump(2) << '\n';
    return OkStatus();
  }
  out << fmt::format("meridian sim replay of {} on {} (policy {}, seed {}), one core.\n"
                     "Scale N: every node and every job N times. Baseline: the same replay with the pools built in\n"
                     "every scheduler call (smallest scale only).\n\n",
                     o.trace, o.fleet, o.policy, o.seed);
  Table t({"SCALE", "NODES", "TASKS", "LOAD", "REPLAY", "TASKS/S", "IN SCHED", "CALLS", "CALL P50", "CALL P99",
           "BASELINE REPLAY"});
  for (const auto& r : results) {
    t.Add({fmt::format("x{}", r.scale), std::to_string(r.nodes), std::to_string(r.tasks),
           fmt::format("{:.2f} s", r.load_s), fmt::format("{:.2f} s", r.replay_s),
           fmt::format("{:.0f}", r.tasks_per_second), fmt::format("{:.2f} s", r.sched_s),
           std::to_string(r.sched_calls), fmt::format("{:.1f} us", r.sched_call_p50_us),
           fmt::format("{:.1f} us", r.sched_call_p99_us),
           r.baseline_replay_s >= 0 ? fmt::format("{:.2f} s", r.baseline_replay_s) : std::string("-")});
  }
  t.Print(out);
  out << "\nFor scale: " << kReference << ".\n";
  if (sat) {
    out << fmt::format("\nSaturated: {} jobs of the trace's shapes arriving {:.0f}/s, running {:.0f} min on average, "
                       "on {} nodes.\n\n",
                       sat->jobs, o.saturated_per_second, o.saturated_mean_run_s / 60, sat->nodes);
    Table s({"RUN", "PLACEMENTS", "PEAK WAITING", "FINISHED", "REPLAY", "IN SCHED", "CALLS", "OFFERED", "CALL P50",
             "CALL P99", "PLACEMENTS/S"});
    auto add = [&](const char* name, const bench::SaturatedRun& r) {
      s.Add({name, std::to_string(r.placements), std::to_string(r.peak_waiting), r.finished ? "yes" : "no (limit)",
             fmt::format("{:.2f} s", r.replay_s), fmt::format("{:.2f} s", r.sched_s), std::to_string(r.sched_calls),
             std::to_string(r.sched_decisions), fmt::format("{:.1f} us", r.sched_call_p50_us), fmt::format("{:.1f} us", r.sched_call_p99_us),
             fmt::format("{:.0f}", r.placements_per_second)});
    };
    add("parked", sat->run);
    add("baseline", sat->baseline);
    s.Print(out);
    out << fmt::format("\nParked: tasks with no room wait by request shape until a node has room (sched::Backlog). "
                       "Baseline: every\nwaiting task offered to every scheduler call. Of the {} jobs the baseline "
                       "started, {} started at another time.\n",
                       sat->compared_jobs, sat->differing_jobs);
  }
  return OkStatus();
}

}  // namespace meridian::cli
