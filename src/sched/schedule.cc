#include "sched/schedule.h"

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <tuple>

#include <fmt/format.h>

#include "common/units.h"
#include "model/accelerators.h"
#include "sched/estimate.h"
#include "sched/filters.h"
#include "sched/pool.h"
#include "sched/select.h"

namespace meridian::sched {
namespace {

// A request shape that found no room in a pool during this call.
struct Shape {
  int64_t cpu_milli;
  int64_t memory_bytes;
  int32_t device_count;
  int32_t share_milli;
  bool Covers(const model::ResourceRequest& r) const {
    return r.cpu_milli >= cpu_milli && r.memory_bytes >= memory_bytes &&
           r.device_count >= device_count && r.device_share_milli >= share_milli;
  }
};

// A future release, compact: devices as a bit mask (a node has at most 64), so
// recording one per placement allocates nothing but the map node.
struct CompactRelease {
  NodeId node;
  int64_t cpu_milli;
  int64_t memory_bytes;
  uint64_t devices;
  int32_t share_milli;

  static CompactRelease Of(const Allocation& a) {
    uint64_t mask = 0;
    for (int32_t d : a.devices) mask |= uint64_t{1} << d;
    return CompactRelease{a.node, a.cpu_milli, a.memory_bytes, mask, a.device_share_milli};
  }
};

struct PoolState {
  size_t cursor = 0;
  std::vector<Shape> full_for;  // shapes that did not fit anywhere in the pool
};

struct Attempt {
  bool placed = false;
  Placement placement;
  UnplacedKind kind = UnplacedKind::kWaiting;
  std::string reason;
};

// What a placement took, so a gang can be rolled back.
struct Taken {
  Allocation allocation;
  uint32_t job;
  size_t tenant;
  TenantUsage usage;
  int64_t cost;
  int64_t finish_us;
};

TenantUsage UsageOf(const model::ResourceRequest& r) {
  return TenantUsage{static_cast<int64_t>(r.device_count) * r.device_share_milli, r.cpu_milli,
                     r.memory_bytes};
}

class Scheduler {
 public:
  Scheduler(const Snapshot& s, const Policy& policy, Random& rng)
      : s_(s), policy_(policy), order_(s, policy.order), pools_(BuildPools(*s.fleet)), free_(s.free) {
    pool_state_.resize(pools_.size());
    tiebreak_.resize(pools_.size());
    std::iota(tiebreak_.begin(), tiebreak_.end(), uint32_t{0});
    for (size_t i = tiebreak_.size(); i > 1; --i) std::swap(tiebreak_[i - 1], tiebreak_[rng.Uniform(i)]);
    budget_left_.resize(s.jobs.size());
    for (size_t j = 0; j < s.jobs.size(); ++j) budget_left_[j] = s.jobs[j].budget_left_micro_usd;
    pool_of_node_.resize(s.fleet->nodes.size());
    for (const Pool& p : pools_) {
      for (NodeId n : p.nodes) pool_of_node_[n.value()] = p.index;
    }
    pool_releases_.resize(pools_.size());
    for (const Release& r : s.releases) AddRelease(r.at_us, r.allocation);
    usage_.assign(s.fleet->tenants.size() + 1, TenantUsage{});
    for (size_t t = 0; t < s.tenant_usage.size() && t < usage_.size(); ++t) usage_[t] = s.tenant_usage[t];
  }

  Plan Run();

 private:
  Attempt TryPlace(size_t qi, std::optional<SiteId> only_site);
  bool CheckQuota(size_t qi, const model::ResourceRequest& r, Attempt* out) const;
  std::optional<NodeId> FindNode(const Pool& pool, const model::ResourceRequest& r,
                                 std::vector<int32_t>* devices);
  void AddRelease(int64_t at_us, const Allocation& a);
  void RemoveRelease(const Allocation& a, int64_t at_us);
  // How long until a node of the busy pool has room, from the known releases.
  std::optional<int64_t> EarliestWaitUs(const Pool& pool, const model::ResourceRequest& r) const;
  Placement MakePlacement(size_t qi, const Candidate& c, NodeId node, std::vector<int32_t> devices,
                          const std::vector<model::ObjectRef>& inputs) const;
  void Commit(size_t qi, const Placement& p, std::vector<Taken>* log);
  void Rollback(std::vector<Taken>* log);
  void PlaceGang(const std::vector<size_t>& members);
  // Per pool, the index of the first filter that rejects the task, or kPassed.
  // Tasks of one class (same job, request and work kind, no inputs) share them.
  const std::vector<uint8_t>& Verdicts(size_t qi, const TaskView& view);
  static constexpr uint8_t kPassed = 0xFF;

  const Snapshot& s_;
  const Policy& policy_;
  TaskOrder order_;
  std::vector<Pool> pools_;
  std::vector<PoolState> pool_state_;
  std::vector<uint32_t> tiebreak_;
  ResourceLedger free_;
  std::vector<std::optional<int64_t>> budget_left_;
  std::vector<TenantUsage> usage_;
  std::vector<uint32_t> pool_of_node_;
  // Known releases by pool, ordered by time: the snapshot's, and this call's own
  // placements (they free at their estimated finish).
  std::vector<std::multimap<int64_t, CompactRelease>> pool_releases_;
  Plan plan_;
  // Reused per task to avoid allocation in the hot path.
  std::vector<Candidate> candidates_;
  std::vector<Rejection> rejections_;
  std::vector<std::optional<int64_t>> compute_by_type_;
  using TaskClass = std::tuple<uint32_t, std::vector<std::string>, int32_t, int32_t, int64_t,
                               int64_t, int64_t, std::string>;
  std::map<TaskClass, std::vector<uint8_t>> verdicts_by_class_;
  std::vector<uint8_t> verdicts_;  // for tasks with inputs, not cached
};

bool Scheduler::CheckQuota(size_t qi, const model::ResourceRequest& r, Attempt* out) const {
  size_t t = order_.TenantOf(qi);
  if (t >= s_.fleet->tenants.size()) return true;
  const model::Tenant& tenant = s_.fleet->tenants[t];
  TenantUsage need = UsageOf(r);
  const TenantUsage& used = usage_[t];
  struct Limit {
    const char* what;
    int64_t limit, need, used;
    bool bytes;
  };
  const Limit limits[] = {
      {"GPUs", tenant.max_gpu_milli, need.gpu_milli, used.gpu_milli, false},
      {"CPU cores", tenant.max_cpu_milli, need.cpu_milli, used.cpu_milli, false},
      {"memory", tenant.max_memory_bytes, need.memory_bytes, used.memory_bytes, true},
  };
  for (const Limit& l : limits) {
    if (l.limit == 0 || l.need == 0) continue;
    auto fmt_amount = [&](int64_t v) { return l.bytes ? FormatBytes(v) : FormatMilli(v); };
    if (l.need > l.limit) {
      out->kind = UnplacedKind::kInfeasible;
      out->reason = fmt::format("asks for {} {}, more than tenant '{}''s quota of {}", fmt_amount(l.need),
                                l.what, tenant.name, fmt_amount(l.limit));
      return false;
    }
    if (l.used + l.need > l.limit) {
      out->kind = UnplacedKind::kWaiting;
      out->reason = fmt::format("tenant '{}' uses {} of its {} {} quota; this task needs {} more",
                                tenant.name, fmt_amount(l.used), fmt_amount(l.limit), l.what,
                                fmt_amount(l.need));
      return false;
    }
  }
  return true;
}

std::optional<NodeId> Scheduler::FindNode(const Pool& pool, const model::ResourceRequest& r,
                                          std::vector<int32_t>* devices) {
  PoolState& st = pool_state_[pool.index];
  for (const Shape& f : st.full_for) {
    if (f.Covers(r)) return std::nullopt;
  }
  const size_t n = pool.nodes.size();
  size_t idx = st.cursor;
  for (size_t k = 0; k < n; ++k, idx = (idx + 1 == n ? 0 : idx + 1)) {
    if (FitsNow(r, free_.free(pool.nodes[idx]), devices)) {
      st.cursor = idx;  // next fit: fill this node before moving on
      return pool.nodes[idx];
    }
  }
  if (st.full_for.size() < 8) {
    st.full_for.push_back(Shape{r.cpu_milli, r.memory_bytes, r.device_count, r.device_share_milli});
  }
  return std::nullopt;
}

std::optional<int64_t> Scheduler::EarliestWaitUs(const Pool& pool, const model::ResourceRequest& r) const {
  const std::multimap<int64_t, CompactRelease>& releases = pool_releases_[pool.index];
  if (releases.empty()) return std::nullopt;
  std::map<uint32_t, NodeFree> future;  // nodes touched so far, with what came back
  std::vector<int32_t> devices;
  for (const auto& [at_us, a] : releases) {
    auto [it, inserted] = future.try_emplace(a.node.value(), free_.free(a.node));
    NodeFree& f = it->second;
    f.cpu_milli += a.cpu_milli;
    f.memory_bytes += a.memory_bytes;
    for (size_t d = 0; d < f.device_free_milli.size(); ++d) {
      if (a.devices >> d & 1) f.device_free_milli[d] += a.share_milli;
    }
    if (FitsNow(r, f, &devices)) return std::max<int64_t>(0, at_us - s_.now_us);
  }
  return std::nullopt;
}

void Scheduler::AddRelease(int64_t at_us, const Allocation& a) {
  pool_releases_[pool_of_node_[a.node.value()]].emplace(at_us, CompactRelease::Of(a));
}

void Scheduler::RemoveRelease(const Allocation& a, int64_t at_us) {
  auto& releases = pool_releases_[pool_of_node_[a.node.value()]];
  const uint64_t devices = CompactRelease::Of(a).devices;
  auto [first, last] = releases.equal_range(at_us);
  for (auto it = first; it != last; ++it) {
    if (it->second.node == a.node && it->second.devices == devices) {
      releases.erase(it);
      return;
    }
  }
}

const std::vector<uint8_t>& Scheduler::Verdicts(size_t qi, const TaskView& view) {
  auto compute = [&](std::vector<uint8_t>* out) {
    const auto& filters = DefaultFilters();
    out->assign(pools_.size(), kPassed);
    for (const Pool& pool : pools_) {
      for (size_t f = 0; f < filters.size(); ++f) {
        if (!filters[f]->Check(view, pool)) {
          (*out)[pool.index] = static_cast<uint8_t>(f);
          break;
        }
      }
    }
  };
  if (!view.pending.inputs.empty()) {  // residency and reachability depend on them
    compute(&verdicts_);
    return verdicts_;
  }
  const model::ResourceRequest& r = view.task.resources;
  TaskClass key{s_.queue[qi].job, r.accelerator_any_of, r.device_count, r.device_share_milli,
                r.min_device_memory_bytes, r.cpu_milli, r.memory_bytes,
                view.task.work ? view.task.work->kind : std::string()};
  auto [it, inserted] = verdicts_by_class_.try_emplace(std::move(key));
  if (inserted) compute(&it->second);
  return it->second;
}

Placement Scheduler::MakePlacement(size_t qi, const Candidate& c, NodeId node,
                                   std::vector<int32_t> devices,
                                   const std::vector<model::ObjectRef>& inputs) const {
  const PendingTask& p = s_.queue[qi];
  const model::ResourceRequest& r = s_.task(p).resources;
  const Pool& pool = pools_[c.pool];
  Placement out;
  out.queue_index = qi;
  out.job = p.job;
  out.task = p.task;
  out.allocation = Allocation{node, r.cpu_milli, r.memory_bytes, std::move(devices),
                              r.device_count > 0 ? r.device_share_milli : 0};
  out.site = pool.site;
  out.device_type = r.device_count > 0 ? std::string(pool.device_type) : std::string(model::kCpuType);
  out.start_us = c.start_us;
  out.transfer_us = c.transfer_us;
  out.compute_us = c.compute_us;
  out.finish_us = c.finish_us;
  out.compute_cost_micro_usd = c.run_cost_micro_usd;
  out.egress_cost_micro_usd = c.egress_micro_usd;
  if (!inputs.empty()) out.transfers = PlanTransfers(*s_.fleet, inputs, pool.site);
  return out;
}

Attempt Scheduler::TryPlace(size_t qi, std::optional<SiteId> only_site) {
  const PendingTask& p = s_.queue[qi];
  const JobState& js = s_.jobs[p.job];
  const model::Task& task = s_.task(p);
  const model::ResourceRequest& r = task.resources;
  Attempt out;
  if (!CheckQuota(qi, r, &out)) return out;

  static const std::vector<SiteInputs> kNoInputs;
  std::vector<SiteInputs> per_site = p.inputs.empty() ? kNoInputs : EstimateInputsPerSite(*s_.fleet, p.inputs);
  EstimateComputePerType(*s_.throughput, task, pools_, &compute_by_type_);
  TaskView view{*s_.fleet, *s_.throughput, *js.job, task, p, per_site, compute_by_type_};
  CostContext cost_ctx{s_.now_us, js.deadline_at_us, budget_left_[p.job]};

  candidates_.clear();
  rejections_.clear();
  const std::vector<uint8_t>& verdicts = Verdicts(qi, view);
  for (const Pool& pool : pools_) {
    if (only_site && pool.site != *only_site) continue;
    if (verdicts[pool.index] != kPassed) continue;
    Candidate c;
    if (ScorePool(view, pool, cost_ctx, tiebreak_[pool.index], &c, &rejections_)) candidates_.push_back(c);
  }
  CandidateOrder rank(js.job->objective, candidates_);

  // Walk the candidates best first. A busy pool whose node frees soon enough may
  // still be the best choice once its wait is added: then the task holds out for it
  // rather than take a worse node now.
  std::vector<int32_t> devices;
  std::optional<Candidate> hold;
  // Best first by selection, not a full sort: the first candidate usually has room.
  for (size_t i = 0; i < candidates_.size(); ++i) {
    size_t best = i;
    for (size_t k = i + 1; k < candidates_.size(); ++k) {
      if (rank.Better(candidates_[k], candidates_[best])) best = k;
    }
    std::swap(candidates_[i], candidates_[best]);
    const Candidate& c = candidates_[i];
    if (hold && !rank.Better(c, *hold)) break;
    const Pool& pool = pools_[c.pool];
    if (std::optional<NodeId> node = FindNode(pool, r, &devices)) {
      out.placed = true;
      out.placement = MakePlacement(qi, c, *node, std::move(devices), p.inputs);
      return out;
    }
    rejections_.push_back(Rejection{RejectionKind::kBusy, 0, pool.index, 0, 0});
    std::optional<int64_t> wait = EarliestWaitUs(pool, r);
    if (!wait) continue;
    Candidate later = c;
    later.wait_us = *wait;
    later.start_us += *wait;
    later.finish_us += *wait;
    if (js.deadline_at_us && later.finish_us > *js.deadline_at_us) continue;
    if (!hold || rank.Better(later, *hold)) hold = later;
  }
  if (hold) {
    rejections_.push_back(Rejection{RejectionKind::kHoldOut, 0, hold->pool, hold->finish_us, hold->wait_us});
  }
  // The slow path: only now say which filter turned each pool away.
  for (const Pool& pool : pools_) {
    if (only_site && pool.site != *only_site) continue;
    if (verdicts[pool.index] == kPassed) continue;
    rejections_.push_back(Rejection{RejectionKind::kFilter, verdicts[pool.index], pool.index, 0, 0});
  }
  ExplainUnplaced(view, pools_, free_, rejections_, s_.fleet->nodes.size(), s_.now_us, &out.kind,
                  &out.reason);
  return out;
}

void Scheduler::Commit(size_t qi, const Placement& p, std::vector<Taken>* log) {
  const model::ResourceRequest& r = s_.task(s_.queue[qi]).resources;
  free_.Take(p.allocation);
  if (budget_left_[p.job]) *budget_left_[p.job] -= p.cost_micro_usd();
  size_t t = order_.TenantOf(qi);
  TenantUsage u = UsageOf(r);
  usage_[t].gpu_milli += u.gpu_milli;
  usage_[t].cpu_milli += u.cpu_milli;
  usage_[t].memory_bytes += u.memory_bytes;
  AddRelease(p.finish_us, p.allocation);
  if (log) log->push_back(Taken{p.allocation, p.job, t, u, p.cost_micro_usd(), p.finish_us});
}

void Scheduler::Rollback(std::vector<Taken>* log) {
  for (const Taken& t : *log) {
    free_.Give(t.allocation);
    RemoveRelease(t.allocation, t.finish_us);
    if (budget_left_[t.job]) *budget_left_[t.job] += t.cost;
    usage_[t.tenant].gpu_milli -= t.usage.gpu_milli;
    usage_[t.tenant].cpu_milli -= t.usage.cpu_milli;
    usage_[t.tenant].memory_bytes -= t.usage.memory_bytes;
  }
  log->clear();
  // Resources came back: what was full may have room again.
  for (PoolState& st : pool_state_) st.full_for.clear();
}

void Scheduler::PlaceGang(const std::vector<size_t>& members) {
  // Prefer one site for the whole gang (collectives over a WAN are slow): try the
  // sites in the order the first member ranks them, then any mix of sites.
  std::vector<std::optional<SiteId>> tries;
  {
    Attempt first = TryPlace(members[0], std::nullopt);
    if (first.placed) {
      CandidateOrder rank(s_.jobs[s_.queue[members[0]].job].job->objective, candidates_);
      std::sort(candidates_.begin(), candidates_.end(),
                [&](const Candidate& a, const Candidate& b) { return rank.Better(a, b); });
      tries.push_back(first.placement.site);
      for (const Candidate& c : candidates_) {
        SiteId site = pools_[c.pool].site;
        if (std::find(tries.begin(), tries.end(), std::optional<SiteId>(site)) == tries.end()) tries.push_back(site);
      }
    }
    tries.push_back(std::nullopt);
  }
  Attempt failure;
  for (const std::optional<SiteId>& site : tries) {
    std::vector<Taken> log;
    std::vector<Placement> placed;
    failure = Attempt{};
    size_t failed_member = 0;
    for (size_t m = 0; m < members.size(); ++m) {
      Attempt a = TryPlace(members[m], site);
      if (!a.placed) {
        failure = std::move(a);
        failed_member = m;
        break;
      }
      Commit(members[m], a.placement, &log);
      placed.push_back(std::move(a.placement));
    }
    if (placed.size() == members.size()) {
      for (size_t m = 0; m < members.size(); ++m) order_.Placed(members[m], UsageOf(s_.task(s_.queue[members[m]]).resources));
      for (Placement& p : placed) plan_.placements.push_back(std::move(p));
      return;
    }
    Rollback(&log);
    if (!site) {
      const PendingTask& bad = s_.queue[members[failed_member]];
      failure.reason = fmt::format("gang '{}' is placed all-or-nothing and task '{}' cannot be placed: {}",
                                   s_.task(bad).gang, s_.task(bad).name, failure.reason);
    }
  }
  for (size_t qi : members) {
    const PendingTask& p = s_.queue[qi];
    plan_.unplaced.push_back(Unplaced{qi, p.job, p.task, failure.kind, failure.reason});
  }
}

Plan Scheduler::Run() {
  // Gang members by (job, gang name), in queue order.
  std::map<std::pair<uint32_t, std::string_view>, std::vector<size_t>> gangs;
  for (size_t i = 0; i < s_.queue.size(); ++i) {
    const model::Task& t = s_.task(s_.queue[i]);
    if (!t.gang.empty()) gangs[{s_.queue[i].job, t.gang}].push_back(i);
  }
  std::vector<bool> done(s_.queue.size(), false);
  while (std::optional<size_t> qi = order_.Next()) {
    if (done[*qi]) continue;
    const PendingTask& p = s_.queue[*qi];
    const model::Task& task = s_.task(p);
    if (!task.gang.empty()) {
      const std::vector<size_t>& members = gangs[{p.job, task.gang}];
      for (size_t m : members) done[m] = true;
      PlaceGang(members);
      if (policy_.on_decision) policy_.on_decision(plan_.placements.size() + plan_.unplaced.size());
      continue;
    }
    done[*qi] = true;
    Attempt a = TryPlace(*qi, std::nullopt);
    if (a.placed) {
      Commit(*qi, a.placement, nullptr);
      order_.Placed(*qi, UsageOf(task.resources));
      plan_.placements.push_back(std::move(a.placement));
    } else {
      plan_.unplaced.push_back(Unplaced{*qi, p.job, p.task, a.kind, std::move(a.reason)});
    }
    if (policy_.on_decision) policy_.on_decision(plan_.placements.size() + plan_.unplaced.size());
  }
  return std::move(plan_);
}

}  // namespace

std::string_view UnplacedKindName(UnplacedKind kind) {
  return kind == UnplacedKind::kInfeasible ? "infeasible" : "waiting";
}

Plan Schedule(const Snapshot& snapshot, const Policy& policy, Random& rng) {
  Scheduler s(snapshot, policy, rng);
  return s.Run();
}

}  // namespace meridian::sched
