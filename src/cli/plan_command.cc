#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/table.h"
#include "common/units.h"
#include "sched/forecast.h"
#include "spec/fleet_spec.h"
#include "spec/job_spec.h"

namespace meridian::cli {
namespace {

std::string Devices(const model::Fleet& fleet, const sched::Placement& p) {
  if (p.allocation.devices.empty()) return fmt::format("{} cores", FormatMilli(p.allocation.cpu_milli));
  std::string out = fmt::format("{} x{}", p.device_type, p.allocation.devices.size());
  if (p.allocation.device_share_milli < 1000) out += fmt::format(" ({})", FormatMilli(p.allocation.device_share_milli));
  if (fleet.node(p.allocation.node).devices.front().emulated) out += " emulated";
  return out;
}

nlohmann::json PlacementJson(const model::Fleet& fleet, const sched::Placement& p) {
  nlohmann::json transfers = nlohmann::json::array();
  for (const sched::Transfer& t : p.transfers) {
    transfers.push_back({{"object", t.object}, {"from", fleet.site(t.from).name}, {"to", fleet.site(t.to).name},
                         {"bytes", t.bytes}, {"time_us", t.time_us}, {"cost_micro_usd", t.cost_micro_usd}});
  }
  const model::Node& node = fleet.node(p.allocation.node);
  return {{"site", fleet.site(p.site).name}, {"node", node.name}, {"device_type", p.device_type},
          {"devices", p.allocation.devices}, {"device_share_milli", p.allocation.device_share_milli},
          {"emulated", !node.devices.empty() && node.devices.front().emulated},
          {"cpu_milli", p.allocation.cpu_milli}, {"memory_bytes", p.allocation.memory_bytes},
          {"start_us", p.start_us}, {"transfer_us", p.transfer_us}, {"compute_us", p.compute_us},
          {"finish_us", p.finish_us}, {"compute_cost_micro_usd", p.compute_cost_micro_usd},
          {"egress_cost_micro_usd", p.egress_cost_micro_usd}, {"transfers", transfers}};
}

void PrintJson(const model::Fleet& fleet, const model::Job& job, const sched::Forecast& f, std::ostream& out) {
  nlohmann::json tasks = nlohmann::json::array();
  for (const sched::TaskForecast& t : f.tasks) {
    nlohmann::json j = {{"task", job.tasks[t.task.value()].name}, {"outcome", sched::OutcomeName(t.outcome)}};
    if (t.placement) {
      j["placement"] = PlacementJson(fleet, *t.placement);
    } else {
      j["reason"] = t.reason;
    }
    tasks.push_back(std::move(j));
  }
  nlohmann::json links = nlohmann::json::array();
  for (const auto& [key, use] : f.links) {
    links.push_back({{"from", fleet.site(key.first).name}, {"to", fleet.site(key.second).name},
                     {"bytes", use.bytes}, {"cost_micro_usd", use.cost_micro_usd}, {"transfers", use.transfers}});
  }
  nlohmann::json doc = {
      {"job", job.name}, {"objective", model::ObjectiveName(job.objective)}, {"tasks", tasks}, {"links", links},
      {"totals", {{"tasks", f.tasks.size()}, {"placed", f.placed}, {"makespan_us", f.makespan_us},
                  {"cost_micro_usd", f.cost_micro_usd()}, {"compute_cost_micro_usd", f.compute_cost_micro_usd},
                  {"egress_cost_micro_usd", f.egress_cost_micro_usd}}}};
  if (job.budget_micro_usd) doc["budget_micro_usd"] = *job.budget_micro_usd;
  if (job.deadline_us) doc["deadline_us"] = *job.deadline_us;
  out << doc.dump(2) << '\n';
}

void PrintHuman(const model::Fleet& fleet, const model::Job& job, const sched::Forecast& f, std::ostream& out) {
  out << fmt::format("Plan for job '{}': objective {}", job.name, model::ObjectiveName(job.objective));
  if (job.deadline_us) out << ", deadline " << FormatDurationUs(*job.deadline_us);
  if (job.budget_micro_usd) out << ", budget " << FormatMicroUsd(*job.budget_micro_usd);
  out << fmt::format("; fleet of {} nodes at {} sites\n\n", fleet.nodes.size(), fleet.sites.size());
  Table t({"TASK", "SITE", "NODE", "DEVICES", "START", "FINISH", "COST", "INPUTS MOVED"});
  for (const sched::TaskForecast& tf : f.tasks) {
    if (!tf.placement) continue;
    const sched::Placement& p = *tf.placement;
    std::string moved = "-";
    if (!p.transfers.empty()) {
      int64_t bytes = 0;
      std::string from;
      for (const sched::Transfer& x : p.transfers) {
        bytes += x.bytes;
        if (from.find(fleet.site(x.from).name) == std::string::npos) from += (from.empty() ? "" : ",") + fleet.site(x.from).name;
      }
      moved = fmt::format("{} from {} ({})", FormatBytes(bytes), from, FormatDurationUs(p.transfer_us));
    }
    t.Add({job.tasks[tf.task.value()].name, fleet.site(p.site).name, fleet.node(p.allocation.node).name,
           Devices(fleet, p), FormatDurationUs(p.start_us), FormatDurationUs(p.finish_us),
           FormatMicroUsd(p.cost_micro_usd()), moved});
  }
  t.Print(out);
  if (!f.links.empty()) {
    out << "\nData over links:\n";
    Table l({"FROM", "TO", "BYTES", "TRANSFERS", "EGRESS"});
    for (const auto& [key, use] : f.links) {
      l.Add({fleet.site(key.first).name, fleet.site(key.second).name, FormatBytes(use.bytes),
             std::to_string(use.transfers), FormatMicroUsd(use.cost_micro_usd)});
    }
    l.Print(out, "  ");
  }
  if (f.placed < f.tasks.size()) {
    out << "\nNot placed:\n";
    for (const sched::TaskForecast& tf : f.tasks) {
      if (tf.placement) continue;
      out << fmt::format("  {} [{}]: {}\n", job.tasks[tf.task.value()].name, sched::OutcomeName(tf.outcome), tf.reason);
    }
  }
  out << fmt::format("\nTotal: {} of {} tasks placed; finishes after {}; cost {} (compute {}, egress {})\n",
                     f.placed, f.tasks.size(), FormatDurationUs(f.makespan_us), FormatMicroUsd(f.cost_micro_usd()),
                     FormatMicroUsd(f.compute_cost_micro_usd), FormatMicroUsd(f.egress_cost_micro_usd));
}

}  // namespace

Status RunPlan(const PlanOptions& options, std::ostream& out) {
  std::optional<sched::QueueOrder> order = sched::ParseQueueOrder(options.order);
  if (!order) {
    return InvalidArgumentError(fmt::format("--order: expected fifo, priority or fair, got '{}'", options.order));
  }
  MERIDIAN_ASSIGN_OR_RETURN(spec::FleetSpec fleet, spec::LoadFleet(options.fleet));
  MERIDIAN_ASSIGN_OR_RETURN(model::Job job, spec::LoadJob(options.job, fleet.fleet, fleet.throughput));
  for (const std::string& w : job.warnings) std::cerr << "warning: " << w << '\n';
  sched::Policy policy = sched::Policy::Meridian(*order);  // what the coordinator runs
  sched::Forecast f = sched::ForecastJob(fleet.fleet, fleet.throughput, job, policy, options.seed);
  if (options.json) {
    PrintJson(fleet.fleet, job, f, out);
  } else {
    PrintHuman(fleet.fleet, job, f, out);
  }
  if (!f.complete()) {
    // The job would fail: the exit code of a failed job (docs/runtime.md, "Exit codes").
    return AbortedError(fmt::format("{} of {} tasks of job '{}' cannot be placed (see above)",
                                               f.tasks.size() - f.placed, f.tasks.size(), job.name));
  }
  return OkStatus();
}

}  // namespace meridian::cli
