#include "bench/sim_bench.h"

#include <fmt/format.h>

#include "common/units.h"
#include "sim/engine.h"
#include "sim/fleet_builder.h"
#include "spec/fleet_spec.h"

namespace meridian::bench {

namespace {

StatusOr<std::vector<SimBenchResult>> RunScales(const SimBenchOptions& options, const spec::FleetSpec& fs,
                                                const sim::Trace& base, Env& env) {
  std::vector<SimBenchResult> out;
  for (size_t i = 0; i < options.scales.size(); ++i) {
    const int scale = options.scales[i];
    if (scale < 1 || scale > 1000) return InvalidArgumentError(fmt::format("--scale: expected 1 to 1000, got {}", scale));
    MonotonicTime t0 = env.clock().Now();
    model::Fleet fleet = scale > 1 ? sim::ScaleFleet(fs.fleet, scale) : fs.fleet;
    sim::Trace trace = scale > 1 ? sim::ScaleJobs(base, scale) : base;
    MERIDIAN_ASSIGN_OR_RETURN(sched::Policy policy, sim::NamedPolicy(options.policy, trace));
    sim::SimOptions so;
    so.policy_name = options.policy;
    so.policy = policy;
    so.seed = options.seed;
    MonotonicTime t1 = env.clock().Now();
    MERIDIAN_ASSIGN_OR_RETURN(sim::SimResult r, sim::Simulate(fleet, fs.throughput, trace, so, env));
    SimBenchResult b;
    b.scale = scale;
    b.nodes = r.nodes;
    b.tasks = r.tasks;
    b.load_s = static_cast<double>(t1.us - t0.us) / kSecondUs;
    b.replay_s = r.wall_s;
    b.tasks_per_second = r.wall_s > 0 ? static_cast<double>(r.tasks) / r.wall_s : 0;
    b.sched_s = r.sched_total_s;
    b.sched_calls = r.sched_calls;
    b.sched_call_p50_us = r.sched_call_p50_us;
    b.sched_call_p99_us = r.sched_call_p99_us;
    if (i == 0) {
      so.share_pool_index = false;
      MERIDIAN_ASSIGN_OR_RETURN(sim::SimResult base_r, sim::Simulate(fleet, fs.throughput, trace, so, env));
      b.baseline_replay_s = base_r.wall_s;
    }
    out.push_back(b);
  }
  return out;
}

SaturatedRun RunOf(const sim::SimResult& r) {
  SaturatedRun out;
  out.placements = r.placements;
  out.peak_waiting = r.peak_waiting;
  out.finished = !r.stopped_early;
  out.replay_s = r.wall_s;
  out.sched_s = r.sched_total_s;
  out.sched_calls = r.sched_calls;
  out.sched_decisions = r.sched_decisions;
  out.sched_call_p50_us = r.sched_call_p50_us;
  out.sched_call_p99_us = r.sched_call_p99_us;
  out.placements_per_second = r.wall_s > 0 ? static_cast<double>(r.placements) / r.wall_s : 0;
  return out;
}

StatusOr<SaturatedResult> RunSaturated(const SimBenchOptions& options, const spec::FleetSpec& fs,
                                       const sim::Trace& base, Env& env) {
  sim::Trace trace = sim::SaturatingTrace(base, options.saturated_jobs, options.saturated_per_second,
                                          static_cast<int64_t>(options.saturated_mean_run_s * kSecondUs),
                                          options.seed);
  MERIDIAN_ASSIGN_OR_RETURN(sched::Policy policy, sim::NamedPolicy(options.policy, trace));
  sim::SimOptions so;
  so.policy_name = options.policy;
  so.policy = policy;
  so.seed = options.seed;
  so.wall_limit_s = options.saturated_wall_limit_s;
  MERIDIAN_ASSIGN_OR_RETURN(sim::SimResult r, sim::Simulate(fs.fleet, fs.throughput, trace, so, env));
  SaturatedResult out;
  out.nodes = r.nodes;
  out.jobs = r.jobs;
  out.run = RunOf(r);
  so.park = false;
  MERIDIAN_ASSIGN_OR_RETURN(sim::SimResult unparked, sim::Simulate(fs.fleet, fs.throughput, trace, so, env));
  out.baseline = RunOf(unparked);
  // The same decisions either way: compare where the baseline got to.
  for (size_t j = 0; j < unparked.outcomes.size(); ++j) {
    if (unparked.outcomes[j].start_us < 0) continue;
    ++out.compared_jobs;
    if (unparked.outcomes[j].start_us != r.outcomes[j].start_us) ++out.differing_jobs;
  }
  return out;
}

}  // namespace

StatusOr<SimBenchReport> RunSimBench(const SimBenchOptions& options, Env& env) {
  MERIDIAN_ASSIGN_OR_RETURN(spec::FleetSpec fs, spec::LoadFleet(options.fleet));
  MERIDIAN_ASSIGN_OR_RETURN(sim::Trace base,
                            sim::LoadTrace(options.trace, sim::TraceFormat::kAuto, fs.fleet, fs.throughput));
  if (base.timeless) return InvalidArgumentError(fmt::format("{}: the trace has no times to replay", options.trace));
  SimBenchReport report;
  MERIDIAN_ASSIGN_OR_RETURN(report.scales, RunScales(options, fs, base, env));
  if (options.saturated_jobs > 0) {
    MERIDIAN_ASSIGN_OR_RETURN(report.saturated, RunSaturated(options, fs, base, env));
  }
  return report;
}

}  // namespace meridian::bench
