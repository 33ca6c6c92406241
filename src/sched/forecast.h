// A dry run of one job on an otherwise idle fleet: what `meridian plan` prints.
// It drives sched::Schedule on a virtual clock: place what is ready, advance to the
// next estimated finish, free its resources, release its dependants (whose inputs
// now include its output, at the site it ran), and repeat. Deterministic from the
// seed; bounded by two steps per task.
//
// Thread-safety: pure function.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/fleet.h"
#include "model/plan_report.h"
#include "model/throughput.h"
#include "model/work.h"
#include "sched/plan.h"
#include "sched/schedule.h"

namespace meridian::sched {

enum class Outcome { kPlaced, kInfeasible, kWaiting, kBlocked };
std::string_view OutcomeName(Outcome outcome);

struct TaskForecast {
  TaskId task;
  Outcome outcome = Outcome::kWaiting;
  std::optional<Placement> placement;
  std::string reason;  // for every outcome but kPlaced
};

struct LinkUse {
  int64_t bytes = 0;
  int64_t cost_micro_usd = 0;
  int64_t transfers = 0;
};

struct Forecast {
  std::vector<TaskForecast> tasks;  // by TaskId
  int64_t makespan_us = 0;
  int64_t compute_cost_micro_usd = 0;
  int64_t egress_cost_micro_usd = 0;
  std::map<std::pair<SiteId, SiteId>, LinkUse> links;  // (from, to)
  size_t placed = 0;

  int64_t cost_micro_usd() const { return compute_cost_micro_usd + egress_cost_micro_usd; }
  bool complete() const { return placed == tasks.size(); }
};

Forecast ForecastJob(const model::Fleet& fleet, const model::ThroughputTable& throughput,
                     const model::Job& job, const Policy& policy, uint64_t seed);

// The forecast by name (sites, nodes, tasks), with the job's warnings.
model::PlanReport Describe(const model::Fleet& fleet, const model::Job& job, const Forecast& forecast);

}  // namespace meridian::sched
