#include "sched/estimate.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "common/units.h"

namespace meridian::sched {
namespace {

constexpr int64_t kInf = std::numeric_limits<int64_t>::max();

struct Route {
  int64_t time_us = kInf;
  int64_t egress_micro_usd = 0;
  SiteId from;
};

int64_t EgressCost(int64_t bytes, int64_t micro_usd_per_gb) {
  __int128 c = static_cast<__int128>(bytes) * micro_usd_per_gb;
  return static_cast<int64_t>((c + kGB - 1) / kGB);
}

// The best replica of `obj` for a task at `to`.
Route BestRoute(const model::Fleet& fleet, const model::ObjectRef& obj, SiteId to) {
  Route best;
  for (SiteId from : obj.locations) {
    Route r;
    r.from = from;
    if (from == to) {
      r.time_us = 0;
    } else if (const model::Link* link = fleet.FindLink(from, to)) {
      r.time_us = link->rtt_us + TransferTimeUs(obj.size_bytes, link->bandwidth_bps);
      r.egress_micro_usd = EgressCost(obj.size_bytes, fleet.EgressMicroUsdPerGB(from, to));
    } else {
      continue;
    }
    if (r.time_us < best.time_us ||
        (r.time_us == best.time_us && r.egress_micro_usd < best.egress_micro_usd)) {
      best = r;
    }
  }
  return best;
}

}  // namespace

std::vector<SiteInputs> EstimateInputsPerSite(const model::Fleet& fleet,
                                              const std::vector<model::ObjectRef>& inputs) {
  std::vector<SiteInputs> out(fleet.sites.size());
  if (inputs.empty()) return out;
  for (const model::Site& site : fleet.sites) {
    SiteInputs& s = out[site.id.value()];
    std::map<uint32_t, std::pair<int64_t, int64_t>> per_source;  // bytes, rtt
    for (const model::ObjectRef& obj : inputs) {
      Route r = BestRoute(fleet, obj, site.id);
      if (r.time_us == kInf) {
        s.reachable = false;
        s.unreachable = obj.name;
        break;
      }
      if (r.from == site.id) continue;
      auto& [bytes, rtt] = per_source[r.from.value()];
      bytes += obj.size_bytes;
      rtt = fleet.FindLink(r.from, site.id)->rtt_us;
      s.egress_micro_usd += r.egress_micro_usd;
      s.bytes_moved += obj.size_bytes;
    }
    if (!s.reachable) continue;
    for (const auto& [from, br] : per_source) {
      const model::Link* link = fleet.FindLink(SiteId(from), site.id);
      s.transfer_us = std::max(s.transfer_us, br.second + TransferTimeUs(br.first, link->bandwidth_bps));
    }
  }
  return out;
}

std::vector<Transfer> PlanTransfers(const model::Fleet& fleet,
                                    const std::vector<model::ObjectRef>& inputs, SiteId to) {
  std::vector<Transfer> out;
  for (const model::ObjectRef& obj : inputs) {
    Route r = BestRoute(fleet, obj, to);
    if (r.time_us == kInf || r.from == to) continue;
    out.push_back(Transfer{obj.name, r.from, to, obj.size_bytes, r.time_us, r.egress_micro_usd});
  }
  return out;
}

std::optional<int64_t> EstimateComputeUs(const model::ThroughputTable& throughput,
                                         const model::Task& task, const Pool& pool) {
  if (!task.work) return task.duration_us;
  const model::ResourceRequest& req = task.resources;
  double rate = 0;
  if (req.device_count == 0) {
    std::optional<double> per_core = throughput.Lookup("CPU", task.work->kind, 1);
    if (!per_core) return std::nullopt;
    rate = *per_core * static_cast<double>(req.cpu_milli) / kMilliPerUnit;
  } else {
    std::optional<double> r = throughput.Lookup(pool.device_type, task.work->kind, req.device_count);
    if (!r) return std::nullopt;
    rate = *r * req.device_share_milli / kMilliPerUnit;
  }
  if (rate <= 0) return std::nullopt;
  const double us = task.work->amount / rate * kSecondUs;
  if (!(us <= static_cast<double>(kMaxComputeUs))) return kInf;  // too long (or not a number)
  return static_cast<int64_t>(us + 0.5);
}

void EstimateComputePerType(const model::ThroughputTable& throughput, const model::Task& task,
                            const std::vector<Pool>& pools, std::vector<std::optional<int64_t>>* out) {
  out->clear();
  for (const Pool& pool : pools) {
    if (pool.type_index < out->size()) continue;
    out->resize(pool.type_index + 1);
    (*out)[pool.type_index] = EstimateComputeUs(throughput, task, pool);
  }
}

int64_t NodeShareppm(const model::ResourceRequest& req, const Pool& pool) {
  constexpr int64_t kPpm = 1'000'000;
  int64_t share = 0;
  if (pool.device_count > 0 && req.device_count > 0) {
    share = static_cast<int64_t>(req.device_count) * req.device_share_milli * kPpm /
            (static_cast<int64_t>(pool.device_count) * kMilliPerUnit);
  }
  if (pool.cpu_milli > 0) share = std::max(share, req.cpu_milli * kPpm / pool.cpu_milli);
  if (pool.memory_bytes > 0) {
    share = std::max(share, static_cast<int64_t>(static_cast<double>(req.memory_bytes) * kPpm /
                                                 static_cast<double>(pool.memory_bytes)));
  }
  return std::min(share, kPpm);
}

int64_t RunCostMicroUsd(int64_t price_micro_usd_per_hour, int64_t share_ppm, int64_t duration_us) {
  if (duration_us == kInf) return kInf;
  // An estimate, not a ledger entry: double keeps the hot path free of 128-bit
  // division and is exact to well under a micro-dollar at these magnitudes.
  double c = static_cast<double>(price_micro_usd_per_hour) * static_cast<double>(share_ppm) *
             static_cast<double>(duration_us) / (static_cast<double>(kHourUs) * 1e6);
  if (c >= 9.2e18) return kInf;
  return static_cast<int64_t>(std::ceil(c - 1e-9));
}

}  // namespace meridian::sched
