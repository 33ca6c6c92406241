// meridian-vopr: runs the deterministic simulation of the control plane (simulation.h)
// for one seed or a range of them, and says which invariant broke, when, and how to
// replay it. Exit 0: every seed held; 1: one broke; 2: a bad option.
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/logging.h"
#include "vopr/simulation.h"

namespace {

using meridian::vopr::Options;
using meridian::vopr::Result;

nlohmann::json ToJson(uint64_t seed, const Result& r) {
  return {{"seed", seed},
          {"ok", r.ok},
          {"failure", r.failure},
          {"steps", r.steps},
          {"virtual_seconds", static_cast<double>(r.virtual_us) / 1e6},
          {"jobs_acknowledged", r.jobs_acknowledged},
          {"jobs_stored", r.jobs_stored},
          {"jobs_succeeded", r.jobs_succeeded},
          {"jobs_failed", r.jobs_failed},
          {"jobs_cancelled", r.jobs_cancelled},
          {"tasks_committed", r.tasks_committed},
          {"messages", r.messages},
          {"dropped", r.dropped},
          {"duplicated", r.duplicated},
          {"agent_crashes", r.agent_crashes},
          {"coordinator_crashes", r.coordinator_crashes},
          {"commits_torn", r.commits_torn},
          {"trace_digest", fmt::format("{:016x}", r.trace_digest)}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"meridian-vopr: the control plane (coordinator and agents) on a virtual clock and a simulated, "
               "faulty network, driven by a seed; invariants checked after every step"};
  Options o;
  uint64_t seeds = 1;
  std::string plant = "none";
  bool json = false;
  app.add_option("--seed", o.seed, "the first seed (a failure names the seed that replays it)");
  app.add_option("--seeds", seeds, "how many seeds to run, from --seed on")->check(CLI::Range(uint64_t{1}, uint64_t{1'000'000}));
  app.add_option("--steps", o.steps, "events with faults on, per seed (then the run settles)")
      ->check(CLI::Range(int64_t{1}, int64_t{100'000'000}));
  app.add_option("--agents", o.agents, "simulated agents")->check(CLI::Range(1, 1'000));
  app.add_option("--jobs", o.jobs, "jobs the clients submit")->check(CLI::Range(0, 10'000));
  app.add_option("--drop", o.drop, "chance a message is lost")->check(CLI::Range(0.0, 0.5));
  app.add_option("--duplicate", o.duplicate, "chance a request is delivered twice")->check(CLI::Range(0.0, 0.5));
  app.add_option("--reorder", o.reorder, "chance a message is held back and overtaken")->check(CLI::Range(0.0, 1.0));
  app.add_option("--agent-crash", o.agent_crash, "chance, per event, that an agent crashes")->check(CLI::Range(0.0, 0.1));
  app.add_option("--coordinator-crash", o.coordinator_crash, "chance, per event, that the coordinator crashes")
      ->check(CLI::Range(0.0, 0.1));
  app.add_option("--crash-in-commit", o.crash_in_commit, "chance, per commit, that the coordinator crashes in it")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--plant", plant, "a bug to put in the coordinator, to see the simulation find it: none, ack-before-commit, accept-stale-reports")
      ->check(CLI::IsMember({"none", "ack-before-commit", "accept-stale-reports"}));
  app.add_flag("--large-job", o.large_job, "the first client's job has 1,001 tasks (stored before it is placed)");
  app.add_flag("--trace", o.trace, "print every event on stderr");
  app.add_flag("--json", json, "one JSON object per seed on stdout");
  CLI11_PARSE(app, argc, argv);
  using PlantedBug = meridian::coordinator::CoordinatorOptions::PlantedBug;
  if (plant == "ack-before-commit") o.planted_bug = PlantedBug::kAckBeforeCommit;
  if (plant == "accept-stale-reports") o.planted_bug = PlantedBug::kAcceptStaleReports;
  // The coordinator's own log would drown the result; --trace shows the events.
  if (meridian::Status s = meridian::InitLogging("error"); !s.ok()) {
    std::cerr << s.message() << "\n";
    return 2;
  }

  const uint64_t first = o.seed;
  int64_t failed = 0;
  for (uint64_t seed = first; seed < first + seeds; ++seed) {
    o.seed = seed;
    const Result r = meridian::vopr::Run(o);
    if (json) {
      std::cout << ToJson(seed, r).dump() << "\n";
    } else if (r.ok) {
      std::cout << fmt::format(
          "seed {}: ok: {} steps, {:.1f} s virtual, {} jobs acknowledged, {} stored ({} succeeded, {} failed, {} cancelled), {} tasks "
          "committed, {} messages ({} lost, {} twice), {} agent and {} coordinator crashes ({} in a commit), "
          "digest {:016x}\n",
          seed, r.steps, static_cast<double>(r.virtual_us) / 1e6, r.jobs_acknowledged, r.jobs_stored, r.jobs_succeeded,
          r.jobs_failed,
          r.jobs_cancelled, r.tasks_committed, r.messages,
          r.dropped, r.duplicated, r.agent_crashes, r.coordinator_crashes, r.commits_torn, r.trace_digest);
    }
    if (!r.ok) {
      ++failed;
      std::string replay = fmt::format("meridian-vopr --seed {} --steps {}", seed, o.steps);
      const Options d;
      if (o.agents != d.agents) replay += fmt::format(" --agents {}", o.agents);
      if (o.jobs != d.jobs) replay += fmt::format(" --jobs {}", o.jobs);
      if (o.large_job) replay += " --large-job";
      if (o.drop != d.drop) replay += fmt::format(" --drop {}", o.drop);
      if (o.duplicate != d.duplicate) replay += fmt::format(" --duplicate {}", o.duplicate);
      if (o.reorder != d.reorder) replay += fmt::format(" --reorder {}", o.reorder);
      if (o.agent_crash != d.agent_crash) replay += fmt::format(" --agent-crash {}", o.agent_crash);
      if (o.coordinator_crash != d.coordinator_crash) replay += fmt::format(" --coordinator-crash {}", o.coordinator_crash);
      if (o.crash_in_commit != d.crash_in_commit) replay += fmt::format(" --crash-in-commit {}", o.crash_in_commit);
      if (plant != "none") replay += " --plant " + plant;
      std::cerr << fmt::format("seed {}: FAILED at {}\n  replay: {} --trace\n", seed, r.failure, replay);
      break;
    }
  }
  if (failed == 0 && seeds > 1 && !json) std::cout << fmt::format("{} seeds: every invariant held\n", seeds);
  return failed == 0 ? 0 : 1;
}
