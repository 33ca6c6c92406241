#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/table.h"
#include "common/units.h"
#include "sim/engine.h"
#include "sim/fleet_builder.h"
#include "sim/report.h"
#include "spec/csv.h"
#include "spec/fleet_spec.h"

namespace meridian::cli {
namespace {

StatusOr<sim::TraceFormat> ParseTraceFormat(std::string_view name) {
  if (name == "auto") return sim::TraceFormat::kAuto;
  if (name == "alibaba") return sim::TraceFormat::kAlibaba;
  if (name == "sia") return sim::TraceFormat::kSiaPhilly;
  if (name == "gavel") return sim::TraceFormat::kGavel;
  if (name == "csv") return sim::TraceFormat::kGeneric;
  return InvalidArgumentError(
      fmt::format("--trace-format: unknown format '{}' (known: auto, alibaba, sia, gavel, csv)", name));
}

// "2h:+100" adds 100 nodes two hours after the first arrival; "5h:-50" removes 50.
StatusOr<sim::FleetChange> ParseChange(std::string_view text, int64_t origin_us) {
  size_t colon = text.find(':');
  auto bad = [&] {
    return InvalidArgumentError(
        fmt::format("--change '{}': expected TIME:+COUNT or TIME:-COUNT, such as 2h:+100", text));
  };
  if (colon == std::string_view::npos || colon + 2 > text.size()) return bad();
  StatusOr<int64_t> at = ParseDurationUs(text.substr(0, colon));
  if (!at.ok()) return bad();
  char sign = text[colon + 1];
  int64_t count = 0;
  std::string_view digits = text.substr(colon + 2);
  if ((sign != '+' && sign != '-') || digits.empty() || digits.size() > 7 ||
      digits.find_first_not_of("0123456789") != std::string_view::npos) {
    return bad();
  }
  for (char c : digits) count = count * 10 + (c - '0');
  sim::FleetChange c;
  c.at_us = origin_us + *at;
  (sign == '+' ? c.add : c.remove) = static_cast<int32_t>(count);
  return c;
}

std::string Duration(double seconds) { return FormatDurationUs(static_cast<int64_t>(seconds * kSecondUs)); }

// "2.9x lower" / "12% higher": how `value` compares with `base`, lower being better.
std::string Versus(double value, double base) {
  if (base <= 0 && value <= 0) return "equal";
  if (value <= 0) return "none against " + fmt::format("{:.4g}", base);
  if (std::abs(value - base) <= 0.005 * std::max(value, base)) return "about equal";
  if (base >= value) {
    double r = base / value;
    return r >= 1.5 ? fmt::format("{:.1f}x lower", r) : fmt::format("{:.0f}% lower", 100 * (1 - value / base));
  }
  const double r = value / base;
  return r >= 1.5 ? fmt::format("{:.1f}x higher", r) : fmt::format("{:.0f}% higher", 100 * (r - 1));
}

// One line per policy against the reference one.
void PrintRelative(const std::vector<sim::SimResult>& results, const std::string& reference, bool fill,
                   std::ostream& out) {
  auto ref = std::find_if(results.begin(), results.end(), [&](const sim::SimResult& r) { return r.policy == reference; });
  if (ref == results.end()) return;
  out << '\n';
  for (const sim::SimResult& r : results) {
    if (&r == &*ref) continue;
    if (fill) {
      out << fmt::format("- {} against {}: unallocated GPUs at 100% arrived {} ({:.1f} vs {:.1f}); at the end {} "
                         "({:.1f} vs {:.1f})\n",
                         r.policy, reference, Versus(r.unallocated_gpus_at_full, ref->unallocated_gpus_at_full),
                         r.unallocated_gpus_at_full, ref->unallocated_gpus_at_full,
                         Versus(r.unallocated_gpus_end, ref->unallocated_gpus_end), r.unallocated_gpus_end,
                         ref->unallocated_gpus_end);
      continue;
    }
    const int64_t cost = r.compute_cost_micro_usd + r.egress_cost_micro_usd;
    const int64_t ref_cost = ref->compute_cost_micro_usd + ref->egress_cost_micro_usd;
    out << fmt::format("- {} against {}: mean JCT {} ({} vs {}), p99 JCT {}, mean queueing {}, cost {} ({} vs {})\n",
                       r.policy, reference, Versus(r.jct.mean, ref->jct.mean), Duration(r.jct.mean), Duration(ref->jct.mean),
                       Versus(r.jct.p99, ref->jct.p99), Versus(r.queueing.mean, ref->queueing.mean),
                       Versus(static_cast<double>(cost), static_cast<double>(ref_cost)), FormatMicroUsd(cost),
                       FormatMicroUsd(ref_cost));
  }
}

void PrintTable(const Table& t, bool markdown, std::ostream& out) {
  if (markdown) {
    t.PrintMarkdown(out);
  } else {
    t.Print(out);
  }
}

void PrintFill(const std::vector<sim::SimResult>& results, bool markdown, std::ostream& out) {
  Table t({"POLICY", "PLACED", "TURNED AWAY", "UNALLOCATED GPUS AT 100% ARRIVED", "UNALLOCATED GPUS AT END",
           "SCHED TIME", "WALL"});
  for (const sim::SimResult& r : results) {
    t.Add({r.policy, std::to_string(r.jobs - r.rejected_jobs - r.infeasible_jobs), std::to_string(r.rejected_jobs),
           fmt::format("{:.1f}", r.unallocated_gpus_at_full), fmt::format("{:.1f}", r.unallocated_gpus_end),
           fmt::format("{:.3f} s", r.sched_total_s), fmt::format("{:.3f} s", r.wall_s)});
  }
  PrintTable(t, markdown, out);
  if (markdown) return;
  out << "\nFill experiment: tasks arrive in trace order and never end; one that finds no room is turned away.\n"
         "UNALLOCATED GPUS: GPU capacity left unallocated, in GPUs, when the demand that arrived first reaches\n"
         "the fleet's capacity, and at the end.\n";
}

void PrintHuman(const std::vector<sim::SimResult>& results, const sim::Trace& trace, bool fill, bool markdown,
                std::ostream& out) {
  const sim::SimResult& first = results.front();
  if (fill && markdown) return PrintFill(results, true, out);
  out << fmt::format("trace {} ({}): {} jobs, {} tasks; fleet: {} nodes, {} GPUs; seed {}\n\n", trace.name,
                     trace.format, first.jobs, first.tasks, first.nodes, first.gpus, first.seed);
  if (fill) return PrintFill(results, false, out);
  Table t({"POLICY", "FINISHED", "INFEASIBLE", "MEAN JCT", "P50 JCT", "P99 JCT", "MEAN QUEUEING", "MAKESPAN",
           "GPU UTIL", "UNUSABLE GPUS", "COST", "WAN", "SCHED TIME", "WALL"});
  for (const sim::SimResult& r : results) {
    int64_t wan = 0;
    for (const auto& [link, bytes] : r.wan_bytes) wan += bytes;
    t.Add({r.policy, fmt::format("{}/{}", r.finished_jobs, r.jobs), std::to_string(r.infeasible_jobs), Duration(r.jct.mean),
           Duration(r.jct.p50), Duration(r.jct.p99), Duration(r.queueing.mean), Duration(r.makespan_s),
           fmt::format("{:.1f}%", 100 * r.gpu_utilisation), fmt::format("{:.1f}", r.unusable_gpus_while_waiting),
           FormatMicroUsd(r.compute_cost_micro_usd + r.egress_cost_micro_usd), FormatBytes(wan),
           fmt::format("{:.3f} s", r.sched_total_s), fmt::format("{:.3f} s", r.wall_s)});
  }
  PrintTable(t, markdown, out);
  if (markdown) return;
  for (const sim::SimResult& r : results) {
    if (r.node_failures || r.preemptions) {
      out << fmt::format("\n{}: {} node failures, {} preemptions, {} task runs restarted, {} jobs failed", r.policy,
                         r.node_failures, r.preemptions, r.task_restarts, r.failed_jobs);
    }
    if (r.unfinished_jobs) {
      out << fmt::format("\n{}: {} jobs still waiting when no event was left (no node can ever free for them)",
                         r.policy, r.unfinished_jobs);
    }
    for (size_t i = 0; i < r.infeasible_reasons.size() && i < 3; ++i) {
      out << fmt::format("\n{}: {}", r.policy, r.infeasible_reasons[i]);
    }
  }
  out << "\n\nUNUSABLE GPUS: free GPU capacity no waiting GPU task could use, averaged over the time GPU tasks "
         "waited.\nSCHED TIME and WALL are wall-clock; everything else depends only on the inputs and the seed.\n";
}

StatusOr<sim::Trace> LoadSimInputs(const SimOptions& options, model::Fleet* fleet, model::ThroughputTable* throughput) {
  if (options.scale_nodes < 1 || options.scale_nodes > 1000) {
    return InvalidArgumentError(fmt::format("--scale-nodes: expected 1 to 1000, got {}", options.scale_nodes));
  }
  if (options.scale_jobs < 1 || options.scale_jobs > 1000) {
    return InvalidArgumentError(fmt::format("--scale-jobs: expected 1 to 1000, got {}", options.scale_jobs));
  }
  MERIDIAN_ASSIGN_OR_RETURN(spec::FleetSpec fs, spec::LoadFleet(options.fleet));
  *fleet = options.scale_nodes > 1 ? sim::ScaleFleet(fs.fleet, options.scale_nodes) : std::move(fs.fleet);
  *throughput = std::move(fs.throughput);
  MERIDIAN_ASSIGN_OR_RETURN(sim::TraceFormat format, ParseTraceFormat(options.trace_format));
  MERIDIAN_ASSIGN_OR_RETURN(sim::Trace trace, sim::LoadTrace(options.trace, format, *fleet, *throughput));
  if (options.scale_jobs > 1) trace = sim::ScaleJobs(trace, options.scale_jobs);
  if (options.fill != 0) {
    if (options.fill < 0.1 || options.fill > 10) {
      return InvalidArgumentError(fmt::format("--fill: expected a multiple of capacity from 0.1 to 10, got {}", options.fill));
    }
    int64_t capacity = 0;
    for (const model::Node& n : fleet->nodes) capacity += static_cast<int64_t>(n.devices.size()) * 1000;
    trace = sim::FillTrace(trace, capacity, options.fill);
    if (trace.jobs.empty()) return InvalidArgumentError("--fill: the fleet has no GPUs or the trace no GPU tasks");
  }
  return trace;
}

}  // namespace

Status RunSim(const SimOptions& options, std::ostream& out) {
  std::vector<std::string> policies = options.compare;
  if (policies.empty()) policies.push_back(options.policy);
  model::Fleet fleet;
  model::ThroughputTable throughput;
  MERIDIAN_ASSIGN_OR_RETURN(sim::Trace trace, LoadSimInputs(options, &fleet, &throughput));
  std::optional<sched::QueueOrder> order = sched::ParseQueueOrder(options.order);
  if (!order) return InvalidArgumentError(fmt::format("--order: unknown order '{}' (known: fifo, priority, fair)", options.order));
  sim::SimOptions so;
  so.seed = options.seed;
  so.max_offered = options.max_offered;
  so.fill = options.fill != 0;
  for (const auto& [flag, text, dest] : {std::tuple{"--node-mtbf", options.node_mtbf, &so.node_mtbf_us},
                                         std::tuple{"--spot-mtbp", options.spot_mtbp, &so.spot_mtbp_us},
                                         std::tuple{"--repair", options.repair, &so.repair_us}}) {
    if (text.empty()) continue;
    StatusOr<int64_t> v = ParseDurationUs(text);
    if (!v.ok() || *v <= 0) return InvalidArgumentError(fmt::format("{}: expected a positive duration such as 12h, got '{}'", flag, text));
    *dest = *v;
  }
  const int64_t origin = trace.jobs.empty() ? 0 : trace.jobs.front().arrival_us;
  for (const std::string& c : options.changes) {
    MERIDIAN_ASSIGN_OR_RETURN(sim::FleetChange change, ParseChange(c, origin));
    so.changes.push_back(change);
  }
  if (!options.relative_to.empty() &&
      std::find(policies.begin(), policies.end(), options.relative_to) == policies.end()) {
    return InvalidArgumentError(
        fmt::format("--relative-to: '{}' is not one of the policies compared", options.relative_to));
  }
  // Every policy is checked before the first run starts.
  std::vector<sched::Policy> named;
  for (const std::string& p : policies) {
    MERIDIAN_ASSIGN_OR_RETURN(sched::Policy policy, sim::NamedPolicy(p, trace));
    policy.order = *order;
    named.push_back(std::move(policy));
  }
  // A long replay says how far it is on stderr: in place every second on a terminal,
  // a line every ten seconds in a log.
  const bool tty = isatty(STDERR_FILENO) != 0;
  bool drew = false;
  if (!options.no_progress) {
    so.progress_every_s = tty ? 1 : 10;
    so.on_progress = [&](const sim::SimProgress& p) {
      std::cerr << (tty ? "\r\033[K" : "")
                << fmt::format("sim: {}: {} of {} jobs arrived, {} of {} simulated, {:.0f} s", so.policy_name,
                               p.arrived, p.jobs, FormatDurationUs(static_cast<int64_t>(p.simulated_s * 1e6)),
                               FormatDurationUs(static_cast<int64_t>(p.span_s * 1e6)), p.wall_s)
                << (tty ? "" : "\n") << std::flush;
      drew = true;
    };
  }
  std::vector<sim::SimResult> results;
  for (size_t i = 0; i < policies.size(); ++i) {
    so.policy_name = policies[i];
    so.policy = named[i];
    MERIDIAN_ASSIGN_OR_RETURN(sim::SimResult r, sim::Simulate(fleet, throughput, trace, so, Env::Default()));
    results.push_back(std::move(r));
  }
  if (drew && tty) std::cerr << "\r\033[K" << std::flush;
  const std::string title = fmt::format("Meridian simulation: {} on {}", trace.name, options.fleet);
  if (!options.out.empty()) MERIDIAN_RETURN_IF_ERROR(sim::WriteReport(results, title, options.out));
  if (options.json) {
    nlohmann::json all = nlohmann::json::array();
    for (const sim::SimResult& r : results) all.push_back(sim::ResultToJson(r));
    out << nlohmann::json{{"trace", trace.name}, {"format", trace.format}, {"seed", options.seed}, {"results", all}}.dump(2)
        << '\n';
  } else {
    PrintHuman(results, trace, so.fill, options.markdown, out);
    if (!options.relative_to.empty()) PrintRelative(results, options.relative_to, so.fill, out);
    if (!options.out.empty() && !options.markdown) out << fmt::format("Wrote {0}/report.html, {0}/metrics.json and per-job CSVs.\n", options.out);
  }
  return OkStatus();
}

}  // namespace meridian::cli
