// A dry run of one job, by name: what `meridian plan` prints, whether it planned
// against a fleet file or a live coordinator planned it (JobService.Plan).
// sched::Describe makes one from a forecast.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace meridian::model {

struct PlannedTransfer {
  std::string object;
  std::string from_site;
  std::string to_site;
  int64_t bytes = 0;
  int64_t time_us = 0;
  int64_t cost_micro_usd = 0;
};

struct PlannedTask {
  std::string name;
  std::string outcome;  // placed, infeasible, waiting, blocked
  std::string reason;   // for every outcome but placed
  // Where and when, if placed.
  std::string site;
  std::string node;
  std::string device_type;
  std::vector<int32_t> devices;
  int32_t device_share_milli = 1000;
  bool emulated = false;
  int64_t cpu_milli = 0;
  int64_t memory_bytes = 0;
  int64_t start_us = 0;
  int64_t transfer_us = 0;
  int64_t compute_us = 0;
  int64_t finish_us = 0;
  int64_t compute_cost_micro_usd = 0;
  int64_t egress_cost_micro_usd = 0;
  std::vector<PlannedTransfer> transfers;

  bool placed() const { return outcome == "placed"; }
};

struct PlannedLink {
  std::string from_site;
  std::string to_site;
  int64_t bytes = 0;
  int64_t cost_micro_usd = 0;
  int64_t transfers = 0;
};

struct PlanReport {
  std::string job;
  std::string objective;
  std::optional<int64_t> deadline_us;
  std::optional<int64_t> budget_micro_usd;
  int32_t fleet_nodes = 0;
  int32_t fleet_sites = 0;
  std::vector<PlannedTask> tasks;
  std::vector<PlannedLink> links;
  int64_t placed = 0;
  int64_t makespan_us = 0;
  int64_t compute_cost_micro_usd = 0;
  int64_t egress_cost_micro_usd = 0;
  std::vector<std::string> warnings;  // about the spec

  int64_t cost_micro_usd() const { return compute_cost_micro_usd + egress_cost_micro_usd; }
  bool complete() const { return placed == static_cast<int64_t>(tasks.size()); }
};

}  // namespace meridian::model
