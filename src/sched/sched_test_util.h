// Builders for scheduler tests: small fleets, jobs and snapshots in a few lines.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/units.h"
#include "model/fleet.h"
#include "model/throughput.h"
#include "model/work.h"
#include "sched/snapshot.h"

namespace meridian::sched::testing {

class FleetBuilder {
 public:
  SiteId Site(const std::string& name, const std::string& region = "",
              int64_t egress_micro_usd_per_gb = 0);
  void Link(SiteId a, SiteId b, int64_t rtt_us, int64_t bps, int64_t egress_micro_usd_per_gb = 0);
  // `count` nodes with `devices` accelerators of `type` each ("" or 0 devices: CPU only).
  void Nodes(SiteId site, const std::string& type, int count, int devices,
             int64_t price_micro_usd_per_hour, int64_t cpu_milli = 32'000,
             int64_t memory_bytes = 256 * kGiB);
  model::Fleet Build() { return fleet_; }
  model::Fleet& fleet() { return fleet_; }

 private:
  model::Fleet fleet_;
};

model::Task GpuTask(const std::string& name, std::vector<std::string> any_of, int32_t count = 1,
                    int32_t share_milli = 1000);
model::Task CpuTask(const std::string& name, int64_t cpu_milli = 1000);
// Ids and names are made unique (task i gets TaskId(i)).
model::Job MakeJob(const std::string& name, std::vector<model::Task> tasks);

// A snapshot with every task of every job queued, all resources free.
Snapshot MakeSnapshot(const model::Fleet& fleet, const model::ThroughputTable& throughput,
                      const std::vector<const model::Job*>& jobs);

}  // namespace meridian::sched::testing
