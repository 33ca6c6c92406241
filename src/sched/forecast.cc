#include "sched/forecast.h"

#include <algorithm>
#include <limits>
#include <queue>

#include <fmt/format.h>

#include "sched/estimate.h"

namespace meridian::sched {

std::string_view OutcomeName(Outcome outcome) {
  switch (outcome) {
    case Outcome::kPlaced: return "placed";
    case Outcome::kInfeasible: return "infeasible";
    case Outcome::kWaiting: return "waiting";
    case Outcome::kBlocked: return "blocked";
  }
  return "waiting";
}

namespace {

class DryRun {
 public:
  DryRun(const model::Fleet& fleet, const model::ThroughputTable& throughput, const model::Job& job,
         const Policy& policy, uint64_t seed)
      : job_(job), policy_(policy), rng_(seed) {
    snapshot_.fleet = &fleet;
    snapshot_.throughput = &throughput;
    snapshot_.free = ResourceLedger(fleet);
    snapshot_.jobs.push_back(JobState::Submitted(job, 0));
    out_.tasks.resize(job.tasks.size());
    deps_left_.resize(job.tasks.size());
    dependants_.resize(job.tasks.size());
    for (const model::Task& t : job.tasks) {
      out_.tasks[t.id.value()].task = t.id;
      deps_left_[t.id.value()] = t.after.size();
      for (TaskId d : t.after) dependants_[d.value()].push_back(t.id);
      if (t.after.empty()) ready_.push_back(t.id);
    }
  }

  Forecast Run();

 private:
  PendingTask Pending(TaskId id, int64_t seq) const;
  void Block(TaskId id, const std::string& because);
  void Apply(const Plan& plan);
  void Finish(TaskId id);

  const model::Job& job_;
  const Policy& policy_;
  Random rng_;
  Snapshot snapshot_;
  Forecast out_;
  std::vector<size_t> deps_left_;
  std::vector<std::vector<TaskId>> dependants_;
  std::vector<TaskId> ready_;
  using Event = std::pair<int64_t, uint32_t>;  // finish, task
  std::priority_queue<Event, std::vector<Event>, std::greater<>> running_;
  std::map<uint32_t, Release> releases_;  // running tasks, by task
};

PendingTask DryRun::Pending(TaskId id, int64_t seq) const {
  const model::Task& t = job_.tasks[id.value()];
  PendingTask p;
  p.job = 0;
  p.task = id;
  p.seq = seq;
  p.inputs = t.inputs;
  for (TaskId d : t.after) {
    const model::Task& dep = job_.tasks[d.value()];
    if (dep.output_bytes == 0 && dep.output_residency.empty()) continue;
    const Placement& where = *out_.tasks[d.value()].placement;
    p.inputs.push_back(model::ObjectRef{dep.name + ".out", dep.output_bytes, {where.site}, dep.output_residency});
  }
  return p;
}

void DryRun::Block(TaskId id, const std::string& because) {
  for (TaskId u : dependants_[id.value()]) {
    TaskForecast& f = out_.tasks[u.value()];
    if (f.outcome == Outcome::kBlocked) continue;
    f.outcome = Outcome::kBlocked;
    f.reason = because;
    Block(u, because);
  }
}

void DryRun::Apply(const Plan& plan) {
  std::vector<TaskId> still_ready;
  for (const Placement& p : plan.placements) {
    snapshot_.free.Take(p.allocation);
    const int64_t cost = SatAdd(p.compute_cost_micro_usd, p.egress_cost_micro_usd);
    if (snapshot_.jobs[0].budget_left_micro_usd) {
      // Overspent stays overspent: it stops at INT64_MIN rather than wrap.
      int64_t& left = *snapshot_.jobs[0].budget_left_micro_usd;
      left = static_cast<int64_t>(std::max<__int128>(std::numeric_limits<int64_t>::min(), __int128{left} - cost));
    }
    TaskForecast& f = out_.tasks[p.task.value()];
    f.outcome = Outcome::kPlaced;
    f.placement = p;
    ++out_.placed;
    out_.compute_cost_micro_usd = SatAdd(out_.compute_cost_micro_usd, p.compute_cost_micro_usd);
    out_.egress_cost_micro_usd = SatAdd(out_.egress_cost_micro_usd, p.egress_cost_micro_usd);
    for (const Transfer& t : p.transfers) {
      LinkUse& use = out_.links[{t.from, t.to}];
      use.bytes = SatAdd(use.bytes, t.bytes);
      use.cost_micro_usd = SatAdd(use.cost_micro_usd, t.cost_micro_usd);
      ++use.transfers;
    }
    running_.push({p.finish_us, p.task.value()});
    releases_[p.task.value()] = Release{p.finish_us, p.allocation};
  }
  for (const Unplaced& u : plan.unplaced) {
    TaskForecast& f = out_.tasks[u.task.value()];
    f.reason = u.reason;
    if (u.kind == UnplacedKind::kInfeasible) {
      f.outcome = Outcome::kInfeasible;
      Block(u.task, fmt::format("depends on '{}', which cannot run", job_.tasks[u.task.value()].name));
    } else {
      f.outcome = Outcome::kWaiting;
      still_ready.push_back(u.task);
    }
  }
  ready_ = std::move(still_ready);
}

void DryRun::Finish(TaskId id) {
  const Placement& p = *out_.tasks[id.value()].placement;
  snapshot_.free.Give(p.allocation);
  releases_.erase(id.value());
  out_.makespan_us = std::max(out_.makespan_us, p.finish_us);
  for (TaskId u : dependants_[id.value()]) {
    if (--deps_left_[u.value()] == 0 && out_.tasks[u.value()].outcome != Outcome::kBlocked) {
      ready_.push_back(u);
    }
  }
}

Forecast DryRun::Run() {
  int64_t seq = 0;
  // Each round places at least one task or finishes one: at most 2N rounds.
  for (size_t round = 0; round <= 2 * job_.tasks.size() + 1; ++round) {
    if (!ready_.empty()) {
      std::sort(ready_.begin(), ready_.end());
      snapshot_.queue.clear();
      for (TaskId id : ready_) snapshot_.queue.push_back(Pending(id, seq++));
      snapshot_.releases.clear();
      for (const auto& [task, release] : releases_) snapshot_.releases.push_back(release);
      Apply(Schedule(snapshot_, policy_, rng_));
    }
    if (running_.empty()) break;
    int64_t t = running_.top().first;
    snapshot_.now_us = t;
    while (!running_.empty() && running_.top().first == t) {
      Finish(TaskId(running_.top().second));
      running_.pop();
    }
  }
  for (TaskId id : ready_) {
    TaskForecast& f = out_.tasks[id.value()];
    f.reason = "never fits while the rest of the job runs: " + f.reason;
  }
  return std::move(out_);
}

}  // namespace

Forecast ForecastJob(const model::Fleet& fleet, const model::ThroughputTable& throughput,
                     const model::Job& job, const Policy& policy, uint64_t seed) {
  DryRun run(fleet, throughput, job, policy, seed);
  return run.Run();
}

model::PlanReport Describe(const model::Fleet& fleet, const model::Job& job, const Forecast& f) {
  model::PlanReport r;
  r.job = job.name;
  r.objective = std::string(model::ObjectiveName(job.objective));
  r.deadline_us = job.deadline_us;
  r.budget_micro_usd = job.budget_micro_usd;
  r.fleet_nodes = static_cast<int32_t>(fleet.nodes.size());
  r.fleet_sites = static_cast<int32_t>(fleet.sites.size());
  r.warnings = job.warnings;
  for (const TaskForecast& t : f.tasks) {
    model::PlannedTask& p = r.tasks.emplace_back();
    p.name = job.tasks[t.task.value()].name;
    p.outcome = std::string(OutcomeName(t.outcome));
    if (!t.placement) {
      p.reason = t.reason;
      continue;
    }
    const Placement& where = *t.placement;
    const model::Node& node = fleet.node(where.allocation.node);
    p.site = fleet.site(where.site).name;
    p.node = node.name;
    p.device_type = where.device_type;
    p.devices = where.allocation.devices;
    p.device_share_milli = where.allocation.device_share_milli;
    p.emulated = !node.devices.empty() && node.devices.front().emulated;
    p.cpu_milli = where.allocation.cpu_milli;
    p.memory_bytes = where.allocation.memory_bytes;
    p.start_us = where.start_us;
    p.transfer_us = where.transfer_us;
    p.compute_us = where.compute_us;
    p.finish_us = where.finish_us;
    p.compute_cost_micro_usd = where.compute_cost_micro_usd;
    p.egress_cost_micro_usd = where.egress_cost_micro_usd;
    for (const Transfer& x : where.transfers) {
      p.transfers.push_back({x.object, fleet.site(x.from).name, fleet.site(x.to).name, x.bytes, x.time_us,
                             x.cost_micro_usd});
    }
  }
  for (const auto& [key, use] : f.links) {
    r.links.push_back({fleet.site(key.first).name, fleet.site(key.second).name, use.bytes, use.cost_micro_usd,
                       use.transfers});
  }
  r.placed = static_cast<int64_t>(f.placed);
  r.makespan_us = f.makespan_us;
  r.compute_cost_micro_usd = f.compute_cost_micro_usd;
  r.egress_cost_micro_usd = f.egress_cost_micro_usd;
  return r;
}

}  // namespace meridian::sched
