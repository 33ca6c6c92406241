// The deterministic simulation of the control plane (FoundationDB's simulation,
// TigerBeetle's VOPR): the real coordinator (src/coordinator, its loop turned by hand)
// and agents that speak the real report protocol (agent::Reports) run in one thread on
// a virtual clock, over a simulated network, all driven by one seed. The network
// delays, drops, duplicates and reorders messages (an assignment stream stays in order
// until it breaks, as a TCP connection does); agents and the coordinator crash and
// restart; a commit under way when the coordinator crashes is kept or lost whole, and
// nothing the coordinator did after it reaches anyone. Invariants are checked after
// every step; the first one broken ends the run and says which, with the seed that
// replays it (docs/vopr.md).
//
// Thread-safety: none; one simulation runs on the thread that calls Run.
#pragma once

#include <cstdint>
#include <string>

#include "coordinator/coordinator.h"

namespace meridian::vopr {

struct Options {
  uint64_t seed = 1;
  // Events run with faults on; then the faults stop, every crashed part comes back and
  // the run goes on (at most 10 virtual minutes) until every acknowledged job ends.
  int64_t steps = 20'000;
  int agents = 4;
  int jobs = 12;           // submitted by clients at random times while faults run
  int max_tasks_per_job = 8;
  // The first client's job has 1,001 tasks (the path of large jobs, stored before they
  // are placed); each restart reloads and each turn offers them, so a seed takes about
  // 15 times as long.
  bool large_job = false;
  // Per message: dropped, duplicated (a request delivered twice), held back long
  // enough to be overtaken. Per event: a crash of an agent or of the coordinator.
  double drop = 0.02;
  double duplicate = 0.02;
  double reorder = 0.05;
  double agent_crash = 0.0005;
  double coordinator_crash = 0.0003;
  // Per commit: the coordinator crashes while it is written (the write kept or lost).
  double crash_in_commit = 0.01;
  coordinator::CoordinatorOptions::PlantedBug planted_bug = coordinator::CoordinatorOptions::PlantedBug::kNone;
  // Each event on stderr as it runs.
  bool trace = false;
};

struct Result {
  bool ok = true;
  // Jobs by how they ended: succeeded, failed (a task failed all its attempts) or
  // cancelled (by their client).
  int64_t jobs_succeeded = 0;
  int64_t jobs_failed = 0;
  int64_t jobs_cancelled = 0;
  std::string failure;      // the invariant broken, and when; empty when ok
  int64_t steps = 0;        // events run, the settling ones included
  int64_t virtual_us = 0;   // virtual time at the end
  int64_t jobs_acknowledged = 0;
  int64_t jobs_stored = 0;  // more than acknowledged when a client, hearing nothing, submitted again
  int64_t tasks_committed = 0;  // tasks whose success was stored
  int64_t messages = 0;
  int64_t dropped = 0;
  int64_t duplicated = 0;
  int64_t agent_crashes = 0;
  int64_t coordinator_crashes = 0;
  int64_t commits_torn = 0;     // crashes during a commit (kept or lost)
  // A digest of every event in order, with its virtual time: equal for equal seeds.
  uint64_t trace_digest = 0;
};

Result Run(const Options& options);

// The output a simulated task of job `job`, index `task` must end with: any attempt,
// on any node, gives these bytes (NULs and non-UTF-8 among them).
std::string ExpectedOutput(uint64_t job, uint32_t task);
// Whether a simulated attempt fails (exit status 1): one in five, by the seed and its
// key alone, so that a replay fails the same attempts.
bool AttemptFails(uint64_t seed, const model::TaskKey& key);

}  // namespace meridian::vopr
