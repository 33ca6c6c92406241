#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/table.h"
#include "client/client.h"
#include "common/units.h"
#include "sched/forecast.h"
#include "spec/fleet_spec.h"
#include "spec/job_spec.h"
#include "spec/yaml_reader.h"

namespace meridian::cli {
namespace {

std::string Devices(const model::PlannedTask& p) {
  if (p.devices.empty()) return fmt::format("{} cores", FormatMilli(p.cpu_milli));
  std::string out = fmt::format("{} x{}", p.device_type, p.devices.size());
  if (p.device_share_milli < 1000) out += fmt::format(" ({})", FormatMilli(p.device_share_milli));
  if (p.emulated) out += " emulated";
  return out;
}

nlohmann::json PlacementJson(const model::PlannedTask& p) {
  nlohmann::json transfers = nlohmann::json::array();
  for (const model::PlannedTransfer& t : p.transfers) {
    transfers.push_back({{"object", t.object}, {"from", t.from_site}, {"to", t.to_site}, {"bytes", t.bytes},
                         {"time_us", t.time_us}, {"cost_micro_usd", t.cost_micro_usd}});
  }
  return {{"site", p.site}, {"node", p.node}, {"device_type", p.device_type},
          {"devices", p.devices}, {"device_share_milli", p.device_share_milli},
          {"emulated", p.emulated},
          {"cpu_milli", p.cpu_milli}, {"memory_bytes", p.memory_bytes},
          {"start_us", p.start_us}, {"transfer_us", p.transfer_us}, {"compute_us", p.compute_us},
          {"finish_us", p.finish_us}, {"compute_cost_micro_usd", p.compute_cost_micro_usd},
          {"egress_cost_micro_usd", p.egress_cost_micro_usd}, {"transfers", transfers}};
}

void PrintJson(const model::PlanReport& r, std::ostream& out) {
  nlohmann::json tasks = nlohmann::json::array();
  for (const model::PlannedTask& t : r.tasks) {
    nlohmann::json j = {{"task", t.name}, {"outcome", t.outcome}};
    if (t.placed()) {
      j["placement"] = PlacementJson(t);
    } else {
      j["reason"] = t.reason;
    }
    tasks.push_back(std::move(j));
  }
  nlohmann::json links = nlohmann::json::array();
  for (const model::PlannedLink& l : r.links) {
    links.push_back({{"from", l.from_site}, {"to", l.to_site}, {"bytes", l.bytes},
                     {"cost_micro_usd", l.cost_micro_usd}, {"transfers", l.transfers}});
  }
  nlohmann::json doc = {
      {"job", r.job}, {"objective", r.objective}, {"tasks", tasks}, {"links", links},
      {"totals", {{"tasks", r.tasks.size()}, {"placed", r.placed}, {"makespan_us", r.makespan_us},
                  {"cost_micro_usd", r.cost_micro_usd()}, {"compute_cost_micro_usd", r.compute_cost_micro_usd},
                  {"egress_cost_micro_usd", r.egress_cost_micro_usd}}}};
  if (r.budget_micro_usd) doc["budget_micro_usd"] = *r.budget_micro_usd;
  if (r.deadline_us) doc["deadline_us"] = *r.deadline_us;
  out << JsonText(doc) << '\n';
}

void PrintHuman(const model::PlanReport& r, const std::string& against, std::ostream& out) {
  out << fmt::format("Plan for job '{}': objective {}", r.job, r.objective);
  if (r.deadline_us) out << ", deadline " << FormatDurationUs(*r.deadline_us);
  if (r.budget_micro_usd) out << ", budget " << FormatMicroUsd(*r.budget_micro_usd);
  out << fmt::format("; {}: {} nodes at {} sites\n\n", against, r.fleet_nodes, r.fleet_sites);
  Table t({"TASK", "SITE", "NODE", "DEVICES", "START", "FINISH", "COST", "INPUTS MOVED"});
  for (const model::PlannedTask& p : r.tasks) {
    if (!p.placed()) continue;
    std::string moved = "-";
    if (!p.transfers.empty()) {
      int64_t bytes = 0;
      std::string from;
      for (const model::PlannedTransfer& x : p.transfers) {
        bytes += x.bytes;
        if (from.find(x.from_site) == std::string::npos) from += (from.empty() ? "" : ",") + x.from_site;
      }
      moved = fmt::format("{} from {} ({})", FormatBytes(bytes), from, FormatDurationUs(p.transfer_us));
    }
    t.Add({p.name, p.site, p.node, Devices(p), FormatDurationUs(p.start_us), FormatDurationUs(p.finish_us),
           FormatMicroUsd(p.compute_cost_micro_usd + p.egress_cost_micro_usd), moved});
  }
  t.Print(out);
  if (!r.links.empty()) {
    out << "\nData over links:\n";
    Table l({"FROM", "TO", "BYTES", "TRANSFERS", "EGRESS"});
    for (const model::PlannedLink& use : r.links) {
      l.Add({use.from_site, use.to_site, FormatBytes(use.bytes), std::to_string(use.transfers),
             FormatMicroUsd(use.cost_micro_usd)});
    }
    l.Print(out, "  ");
  }
  if (!r.complete()) {
    out << "\nNot placed:\n";
    for (const model::PlannedTask& p : r.tasks) {
      if (!p.placed()) out << fmt::format("  {} [{}]: {}\n", p.name, p.outcome, p.reason);
    }
  }
  out << fmt::format("\nTotal: {} of {} tasks placed; finishes after {}; cost {} (compute {}, egress {})\n",
                     r.placed, r.tasks.size(), FormatDurationUs(r.makespan_us), FormatMicroUsd(r.cost_micro_usd()),
                     FormatMicroUsd(r.compute_cost_micro_usd), FormatMicroUsd(r.egress_cost_micro_usd));
}

}  // namespace

Status RunPlan(const PlanOptions& options, std::ostream& out) {
  std::optional<sched::QueueOrder> order = sched::ParseQueueOrder(options.order);
  if (!order) {
    return InvalidArgumentError(fmt::format("--order: expected fifo, priority or fair, got '{}'", options.order));
  }
  model::PlanReport report;
  std::string against;
  if (!options.fleet.empty()) {
    MERIDIAN_ASSIGN_OR_RETURN(spec::FleetSpec fleet, spec::LoadFleet(options.fleet));
    MERIDIAN_ASSIGN_OR_RETURN(model::Job job, spec::LoadJob(options.job, fleet.fleet, fleet.throughput));
    sched::Policy policy = sched::Policy::Meridian(*order);  // what the coordinator runs
    sched::Forecast f = sched::ForecastJob(fleet.fleet, fleet.throughput, job, policy, options.seed);
    report = sched::Describe(fleet.fleet, job, f);
    against = "fleet " + options.fleet;
  } else {
    // The live cluster's nodes and datasets: the coordinator plans it.
    MERIDIAN_ASSIGN_OR_RETURN(std::string spec, spec::ReadFileToString(options.job));
    StatusOr<std::unique_ptr<client::Client>> c = ConnectClient(options.target);
    StatusOr<model::PlanReport> planned =
        c.ok() ? (*c)->Plan(spec, options.job, options.order, options.seed) : StatusOr<model::PlanReport>(c.status());
    if (planned.status().code() == StatusCode::kUnavailable) {
      return UnavailableError(planned.status().message() + "; or plan offline with --fleet FLEET.yaml");
    }
    MERIDIAN_ASSIGN_OR_RETURN(report, std::move(planned));
    against = "the live cluster (its nodes as if idle)";
  }
  for (const std::string& w : report.warnings) std::cerr << "warning: " << w << '\n';
  if (options.json) {
    PrintJson(report, out);
  } else {
    PrintHuman(report, against, out);
  }
  if (!report.complete()) {
    // The job would fail: the exit code of a failed job (docs/runtime.md, "Exit codes").
    return AbortedError(fmt::format("{} of {} tasks of job '{}' cannot be placed (see above)",
                                    report.tasks.size() - report.placed, report.tasks.size(), report.job));
  }
  return OkStatus();
}

}  // namespace meridian::cli
