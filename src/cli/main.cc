// meridian: one binary, many subcommands (docs/cli.md).
#include <iostream>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "common/logging.h"

int main(int argc, char** argv) {
  using namespace meridian;
  CLI::App app{"Meridian: one pool of accelerators over data centres, clouds and edge sites"};
  app.require_subcommand(1);
  std::string log_level = "warn";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off");

  cli::PlanOptions plan;
  CLI::App* plan_cmd = app.add_subcommand("plan", "Dry run: where each task of a job would run, when, and at what cost");
  plan_cmd->add_option("--fleet", plan.fleet, "Fleet file (YAML)")->required();
  plan_cmd->add_option("job", plan.job, "Job file (YAML)")->required();
  plan_cmd->add_option("--order", plan.order, "Queue order: fifo, priority or fair");
  plan_cmd->add_option("--seed", plan.seed, "Seed for tie-breaking between equally good placements");
  plan_cmd->add_flag("--json", plan.json, "Print JSON for scripts");

  cli::SimOptions sim;
  CLI::App* sim_cmd = app.add_subcommand("sim", "Replay a workload trace on a fleet with the real scheduler, on a virtual clock");
  sim_cmd->add_option("--fleet", sim.fleet, "Fleet file (YAML)")->required();
  sim_cmd->add_option("--trace", sim.trace, "Trace: Alibaba GPU 2023 pod list, Sia/Philly workload or Meridian CSV")->required();
  sim_cmd->add_option("--trace-format", sim.trace_format, "auto (from the header), alibaba, sia or csv");
  sim_cmd->add_option("--policy", sim.policy,
                      "meridian, frag-aware, first-fit, best-fit, random, agnostic or cheapest-region (default meridian)");
  sim_cmd->add_option("--compare", sim.compare, "Several policies on the same input, comma-separated")->delimiter(',');
  sim_cmd->add_option("--order", sim.order, "Queue order: fifo, priority or fair");
  sim_cmd->add_option("--seed", sim.seed, "Seed; the same seed gives the same metrics (default 1)");
  sim_cmd->add_option("--scale-nodes", sim.scale_nodes, "Every node N times (size experiments)");
  sim_cmd->add_option("--scale-jobs", sim.scale_jobs, "Every job N times, arriving together");
  sim_cmd->add_option("--node-mtbf", sim.node_mtbf, "Mean time between failures of each node, e.g. 30d");
  sim_cmd->add_option("--spot-mtbp", sim.spot_mtbp, "Mean time between preemptions of each spot node");
  sim_cmd->add_option("--repair", sim.repair, "Time a failed or preempted node stays away (default 10m)");
  sim_cmd->add_option("--change", sim.changes, "Fleet change TIME:+N or TIME:-N after the first arrival, e.g. 2h:+100");
  sim_cmd->add_option("--max-offered", sim.max_offered, "At most N waiting tasks per scheduler call, oldest first");
  sim_cmd->add_option("--fill", sim.fill,
                      "Fill experiment (Weng et al., ATC 2023): tasks never end and are turned away when there is no "
                      "room, until GPU demand reaches this multiple of capacity, e.g. 1.3");
  sim_cmd->add_option("--out", sim.out, "Directory for metrics.json, report.html and per-job CSVs");
  sim_cmd->add_flag("--json", sim.json, "Print JSON for scripts");
  sim_cmd->add_flag("--markdown", sim.markdown, "Print the table as Markdown (docs/results.md)");
  sim_cmd->add_option("--relative-to", sim.relative_to, "With --compare: one line per policy against this one");
  sim_cmd->get_option("--compare")->excludes(sim_cmd->get_option("--policy"));

  CLI::App* bench_cmd = app.add_subcommand("bench", "Benchmarks that print figures");
  bench_cmd->require_subcommand(1);
  cli::BenchSchedOptions bench;
  CLI::App* bench_sched = bench_cmd->add_subcommand("sched", "Scheduler placements/s and decision latency");
  bench_sched->add_option("--nodes", bench.nodes, "Fleet sizes (default 1000 10000 100000)")->delimiter(',');
  bench_sched->add_option("--tasks", bench.tasks, "Tasks per run (default: one per GPU, at most 100000)");
  bench_sched->add_option("--seed", bench.seed, "Seed");
  bench_sched->add_flag("--json", bench.json, "Print JSON for scripts");

  cli::BenchSimOptions bench_sim_opts;
  CLI::App* bench_sim = bench_cmd->add_subcommand("sim", "Simulator replay speed on a real trace, scaled");
  bench_sim->add_option("--fleet", bench_sim_opts.fleet, "Fleet file (default examples/fleets/alibaba-gpu-2023.yaml)");
  bench_sim->add_option("--trace", bench_sim_opts.trace, "Trace (default the Alibaba GPU 2023 default pod list)");
  bench_sim->add_option("--policy", bench_sim_opts.policy, "Policy (default meridian)");
  bench_sim->add_option("--scale", bench_sim_opts.scales, "Scales, comma-separated (default 1,100)")->delimiter(',');
  bench_sim->add_option("--seed", bench_sim_opts.seed, "Seed");
  bench_sim->add_flag("--json", bench_sim_opts.json, "Print JSON for scripts");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::cerr << "meridian: " << e.what() << " (see meridian --help)\n";
    return 2;
  }
  if (Status s = InitLogging(log_level); !s.ok()) {
    std::cerr << "meridian: " << s.message() << '\n';
    return 2;
  }
  Status status;
  if (plan_cmd->parsed()) {
    status = cli::RunPlan(plan, std::cout);
  } else if (sim_cmd->parsed()) {
    status = cli::RunSim(sim, std::cout);
  } else if (bench_sim->parsed()) {
    status = cli::RunBenchSim(bench_sim_opts, std::cout);
  } else if (bench_sched->parsed()) {
    status = cli::RunBenchSched(bench, std::cout);
  }
  if (!status.ok()) {
    std::cout.flush();
    std::cerr << "meridian: " << status.message() << '\n';
    return 1;
  }
  return 0;
}
