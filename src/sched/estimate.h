// The cost model behind the Score plugins: how long a task takes on a pool's
// nodes and what it costs there.
//
//   finish = start + wait + transfer + compute
//   transfer = for each source site, RTT + bytes pulled from it / link bandwidth;
//              sources are pulled in parallel, so the slowest one counts. Each
//              input comes from its best replica (least time, then least egress).
//   compute  = amount / throughput(device type, work kind, device count)
//              x (1000 / device share); CPU-only tasks: per-core rate x cores.
//              Tasks without a work kind use their device-independent duration.
//   cost     = node price x the node's share the task takes (its dominant share of
//              devices, CPU and memory) x (transfer + compute) + egress of inputs.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "model/fleet.h"
#include "model/throughput.h"
#include "model/work.h"
#include "sched/plan.h"
#include "sched/pool.h"

namespace meridian::sched {

// What moving a task's inputs to one site takes.
struct SiteInputs {
  bool reachable = true;       // every input has a replica with a path here
  std::string unreachable;     // the first input that has none
  int64_t transfer_us = 0;
  int64_t egress_micro_usd = 0;
  int64_t bytes_moved = 0;
};

// For every site of the fleet, indexed by SiteId.
std::vector<SiteInputs> EstimateInputsPerSite(const model::Fleet& fleet,
                                              const std::vector<model::ObjectRef>& inputs);
// The transfers behind EstimateInputsPerSite for one destination.
std::vector<Transfer> PlanTransfers(const model::Fleet& fleet,
                                    const std::vector<model::ObjectRef>& inputs, SiteId to);

// a + b for non-negative times and costs, stopping at INT64_MAX (unreachable,
// unaffordable) rather than wrapping to a negative number.
inline int64_t SatAdd(int64_t a, int64_t b) {
  return a > std::numeric_limits<int64_t>::max() - b ? std::numeric_limits<int64_t>::max() : a + b;
}

// The longest compute time a task may be estimated at (100 years): beyond it, time
// and cost arithmetic would overflow, and the task cannot run on that device type.
inline constexpr int64_t kMaxComputeUs = int64_t{100} * 365 * 24 * 3600 * 1'000'000;

// Compute time on `pool`'s devices (more than kMaxComputeUs when the work would take
// longer than that), or nullopt when the throughput table has no entry for the pool's
// device type and the task's work kind.
std::optional<int64_t> EstimateComputeUs(const model::ThroughputTable& throughput,
                                         const model::Task& task, const Pool& pool);

// EstimateComputeUs once per device type, indexed by Pool::type_index: pools of one
// type give the same answer, so the filters and scores read it from here.
void EstimateComputePerType(const model::ThroughputTable& throughput, const model::Task& task,
                            const std::vector<Pool>& pools, std::vector<std::optional<int64_t>>* out);

// The node's share the task takes, in parts per million (dominant resource).
int64_t NodeShareppm(const model::ResourceRequest& req, const Pool& pool);

// price x share x duration, in micro-USD, rounded up.
int64_t RunCostMicroUsd(int64_t price_micro_usd_per_hour, int64_t share_ppm, int64_t duration_us);

}  // namespace meridian::sched
