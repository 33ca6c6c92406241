#include "sched/schedule.h"

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <tuple>
#include <unordered_map>

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
  bool needs_room = false;  // Unplaced::needs_room
  // The same answer for any amount of work or run time in the task's class (no
  // room anywhere, and no wait for a release in the reason).
  bool amount_free = false;
};

// What a placement took, so a gang can be rolled back.
struct Taken {
  Allocation allocation;
  uint32_t job;
  size_t tenant;
  TenantUsage usage;
  int64_t cost;
  int64_t finish_us;
  std::string device_type;
};

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

// The agnostic baseline's belief: every type that can run the work runs it at the
// mean of their speeds.
void TreatTypesAlike(std::vector<std::optional<int64_t>>* compute_by_type) {
  double sum = 0;
  int n = 0;
  for (const std::optional<int64_t>& c : *compute_by_type) {
    if (c && *c < kNever) {
      sum += static_cast<double>(*c);
      ++n;
    }
  }
  if (n == 0) return;
  const int64_t mean = static_cast<int64_t>(sum / n + 0.5);
  for (std::optional<int64_t>& c : *compute_by_type) {
    if (c && *c < kNever) c = mean;
  }
}

// The expected GPU request shapes, heaviest first, at most kMaxShapes.
constexpr size_t kMaxShapes = 16;
std::vector<WorkloadShape> WorkloadOf(const Snapshot& s, const Policy& policy) {
  std::vector<WorkloadShape> out;
  if (!policy.workload.empty()) {
    for (const WorkloadShape& w : policy.workload) {
      if (w.weight > 0) out.push_back(w);
    }
  } else {
    std::vector<const model::ResourceRequest*> requests;
    for (const PendingTask& p : s.queue) requests.push_back(&s.task(p).resources);
    out = GpuDemandWorkload(requests);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const WorkloadShape& a, const WorkloadShape& b) { return a.weight > b.weight; });
  if (out.size() > kMaxShapes) out.resize(kMaxShapes);
  double total = 0;
  for (const WorkloadShape& w : out) total += w.weight;
  for (WorkloadShape& w : out) w.weight /= total;
  return out;
}

TenantUsage UsageOf(const model::ResourceRequest& r) {
  return TenantUsage{static_cast<int64_t>(r.device_count) * r.device_share_milli, r.cpu_milli,
                     r.memory_bytes};
}

class Scheduler {
 public:
  Scheduler(const Snapshot& s, const Policy& policy, Random& rng)
      : s_(s),
        policy_(policy),
        rng_(rng),
        order_(s, policy.order),
        index_(s.pools ? s.pools : std::make_shared<const PoolIndex>(PoolIndex::Build(*s.fleet))),
        pools_(index_->pools),
        free_(s.free) {
    MERIDIAN_CHECK_MSG(index_->pool_of_node.size() == s.fleet->nodes.size(),
                       "the snapshot's pool index was built for another fleet");
    pool_state_.resize(pools_.size());
    tiebreak_.resize(pools_.size());
    std::iota(tiebreak_.begin(), tiebreak_.end(), uint32_t{0});
    for (size_t i = tiebreak_.size(); i > 1; --i) std::swap(tiebreak_[i - 1], tiebreak_[rng.Uniform(i)]);
    budget_left_.resize(s.jobs.size());
    for (size_t j = 0; j < s.jobs.size(); ++j) budget_left_[j] = s.jobs[j].budget_left_micro_usd;
    pool_releases_.resize(pools_.size());
    releases_built_.assign(pools_.size(), false);
    own_releases_.resize(pools_.size());
    if (policy.nodes == NodeChoice::kLeastFragmentation) workload_ = WorkloadOf(s, policy);
    usage_.assign(s.fleet->tenants.size() + 1, TenantUsage{});
    for (size_t t = 0; t < s.tenant_usage.size() && t < usage_.size(); ++t) usage_[t] = s.tenant_usage[t];
  }

  Plan Run();

 private:
  // A gang's members try to share one site, and one device type (a synchronous
  // gang runs at the pace of its slowest member).
  struct Where {
    std::optional<SiteId> site;
    std::optional<uint32_t> type;  // Pool::type_index
    std::vector<SiteId> among = {};  // any of these sites; empty: any site
    bool operator==(const Where&) const = default;
    bool Admits(const Pool& p) const {
      return (!site || p.site == *site) && (!type || p.type_index == *type) &&
             (among.empty() || std::find(among.begin(), among.end(), p.site) != among.end());
    }
  };
  Attempt TryPlace(size_t qi, Where where);
  // Of the busy candidates walked so far (busy_), the one to hold out for: the
  // best once its wait for a release is added, within the deadline.
  std::optional<Candidate> BestHold(const JobState& js, const model::ResourceRequest& r, const CandidateOrder& rank);
  // Whether a shape covering r found the pool full earlier in this call; and
  // remembering that r did.
  bool KnownFull(uint32_t pool, const model::ResourceRequest& r) const;
  void MarkFull(uint32_t pool, const model::ResourceRequest& r);
  // kAnyPool and kCheapestPrice over candidates_, which passed every hard limit.
  std::optional<Placement> PlaceUnscored(size_t qi, const model::ResourceRequest& r);
  // kScored with a comparing node choice: the pools whose finish and cost are
  // within Policy::near_best of the best candidate's count as one, and the node
  // choice picks among all their nodes.
  std::optional<Placement> PlaceAmongNearBest(size_t qi, const model::ResourceRequest& r,
                                              const CandidateOrder& rank);
  // The placement on a node of candidate pool `pool` (one of candidates_).
  Placement PlaceOnPool(size_t qi, uint32_t pool, NodeId node, std::vector<int32_t> devices) const;
  bool CheckQuota(size_t qi, const model::ResourceRequest& r, Attempt* out) const;
  // Whether the tenant's quota for the pool's accelerator type (if it has one) has room
  // for the task; if not, the rejection says so.
  bool TypeQuotaAllows(size_t qi, const Pool& pool, const model::ResourceRequest& r);
  std::optional<NodeId> FindNode(const Pool& pool, const model::ResourceRequest& r,
                                 std::vector<int32_t>* devices);
  // Visits positions in the pool in scan order from `start`, wrapping: every
  // node, or for a task the caller knows has room only on grown nodes
  // (PendingTask::room_only_on_grown), just those, in the same order. Stops when
  // f(position) returns true.
  template <typename F>
  void Scan(const Pool& pool, size_t start, F&& f) {
    const size_t n = pool.nodes.size();
    if (!restricted_) {
      size_t idx = start;
      for (size_t k = 0; k < n; ++k, idx = (idx + 1 == n ? 0 : idx + 1)) {
        if (f(idx)) return;
      }
      return;
    }
    const std::vector<size_t>& g = GrownPositions(pool.index);
    auto mid = std::lower_bound(g.begin(), g.end(), start);
    for (auto it = mid; it != g.end(); ++it) {
      if (f(*it)) return;
    }
    for (auto it = g.begin(); it != mid; ++it) {
      if (f(*it)) return;
    }
  }
  // Whether nothing but room can change the task's answer as time passes: its job
  // has no deadline or budget, its tenant no daily budget.
  bool OnlyRoomMatters(size_t qi) const {
    const JobState& js = s_.jobs[s_.queue[qi].job];
    return !js.deadline_at_us && !js.budget_left_micro_usd && !usage_[order_.TenantOf(qi)].budget_left_micro_usd;
  }
  // For a task with room only on grown nodes: whether some pool passes its filters
  // and none of its grown nodes has room for r.
  bool NoRoomOnGrown(Where where, const std::vector<uint8_t>& verdicts, const model::ResourceRequest& r);
  // Positions in the pool of Snapshot::grown's nodes, sorted; bucketed on first use.
  const std::vector<size_t>& GrownPositions(uint32_t pool);
  // The node choices that compare nodes; over several pools for kAnyPool.
  std::optional<NodeId> ChooseNode(const std::vector<uint32_t>& pools, const model::ResourceRequest& r,
                                   std::vector<int32_t>* devices, uint32_t* pool_out);
  // Lower is better; compares nodes for kBestFit and kLeastFragmentation.
  double NodeCost(const model::ResourceRequest& r, const NodeFree& f, const std::vector<int32_t>& devices,
                  std::string_view device_type) const;
  void AddRelease(int64_t at_us, const Allocation& a);
  // The releases of one pool, built on first use: most calls never need them.
  const std::multimap<int64_t, CompactRelease>& PoolReleases(uint32_t pool);
  // How long until a node of the busy pool has room, from the known releases.
  std::optional<int64_t> EarliestWaitUs(const Pool& pool, const model::ResourceRequest& r);
  Placement MakePlacement(size_t qi, const Candidate& c, NodeId node, std::vector<int32_t> devices,
                          const std::vector<model::ObjectRef>& inputs) const;
  void Commit(size_t qi, const Placement& p, std::vector<Taken>* log);
  void Rollback(std::vector<Taken>* log);
  void PlaceGang(const std::vector<size_t>& members);
  // Per pool, the index of the first filter that rejects the task, or kPassed.
  // Tasks without inputs alike in what the filters read (regions, request, work
  // kind and amount) share them, across calls with Snapshot::verdict_cache.
  const std::vector<uint8_t>& Verdicts(const TaskView& view);
  static constexpr uint8_t kPassed = 0xFF;

  const Snapshot& s_;
  const Policy& policy_;
  Random& rng_;
  TaskOrder order_;
  std::shared_ptr<const PoolIndex> index_;
  const std::vector<Pool>& pools_;
  std::vector<PoolState> pool_state_;
  std::vector<uint32_t> tiebreak_;
  LedgerOverlay free_;
  std::vector<std::optional<int64_t>> budget_left_;
  std::vector<TenantUsage> usage_;
  std::vector<WorkloadShape> workload_;
  // Known releases by pool, ordered by time: the snapshot's, and this call's own
  // placements (they free at their estimated finish). Built per pool on first use;
  // until then this call's own releases wait in own_releases_.
  std::vector<std::multimap<int64_t, CompactRelease>> pool_releases_;
  std::vector<bool> releases_built_;
  std::vector<std::vector<std::pair<int64_t, CompactRelease>>> own_releases_;
  std::vector<std::vector<uint32_t>> snapshot_releases_by_pool_;  // indices, filled once
  bool snapshot_releases_bucketed_ = false;
  std::vector<uint32_t> any_pools_;  // reused by kAnyPool
  Plan plan_;
  // Reused per task to avoid allocation in the hot path.
  std::vector<Candidate> candidates_;
  std::vector<size_t> busy_;  // indices into candidates_ found full, best first
  std::vector<Rejection> rejections_;
  std::vector<std::optional<int64_t>> compute_by_type_;
  // Tasks that filters, scores and limits cannot tell apart: same request (with the
  // nodes it may take: spot rule and labels) and work kind, no inputs, and either the
  // same job or jobs alike in what the scheduler reads of them (tenant, objective,
  // regions; no deadline or budget).
  using TaskClass = std::tuple<uint32_t, std::string_view, int, std::vector<std::string>,
                               std::vector<std::string>, int32_t, int32_t, int64_t,
                               int64_t, int64_t, std::string, int, std::map<std::string, std::string>>;
  VerdictCache own_verdicts_;  // without the caller's
  // Classes that found no place in this call, with the answer: resources only
  // shrink during a call (a rollback clears this), so the next task of the class
  // would get the same one.
  // Keyed also by the amount of work, which the finish time (and so holding out)
  // depends on; unless no pool had room at all (Attempt::amount_free), which is
  // the common case under a backlog, where run times differ task by task.
  using AmountClass = std::tuple<TaskClass, int64_t, double>;
  std::map<AmountClass, Attempt> unplaced_by_class_;
  std::map<TaskClass, Attempt> no_room_by_class_;
  // By the caller's room class (PendingTask::room_class), the reason.
  std::unordered_map<uint32_t, std::string> no_room_by_room_class_;
  std::optional<TaskClass> ClassOf(size_t qi) const;
  std::vector<uint8_t> verdicts_;  // for tasks with inputs, not cached
  // The task being tried has room only on Snapshot::grown's nodes, if any.
  bool restricted_ = false;
  std::vector<std::vector<size_t>> grown_by_pool_;
  bool grown_bucketed_ = false;
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

bool Scheduler::TypeQuotaAllows(size_t qi, const Pool& pool, const model::ResourceRequest& r) {
  size_t t = order_.TenantOf(qi);
  if (r.device_count == 0 || t >= s_.fleet->tenants.size()) return true;
  const auto& quotas = s_.fleet->tenants[t].max_gpu_milli_by_type;
  auto quota = quotas.find(pool.device_type);
  if (quota == quotas.end()) return true;
  const int64_t need = UsageOf(r).gpu_milli;
  auto held = usage_[t].gpu_milli_by_type.find(pool.device_type);
  const int64_t used = held == usage_[t].gpu_milli_by_type.end() ? 0 : held->second;
  if (used + need <= quota->second) return true;
  rejections_.push_back(
      Rejection{RejectionKind::kTypeQuota, static_cast<uint16_t>(need > quota->second ? 1 : 0), pool.index, used,
                quota->second});
  return false;
}

bool Scheduler::KnownFull(uint32_t pool, const model::ResourceRequest& r) const {
  for (const Shape& f : pool_state_[pool].full_for) {
    if (f.Covers(r)) return true;
  }
  return false;
}

void Scheduler::MarkFull(uint32_t pool, const model::ResourceRequest& r) {
  std::vector<Shape>& full = pool_state_[pool].full_for;
  if (full.size() < 8) full.push_back(Shape{r.cpu_milli, r.memory_bytes, r.device_count, r.device_share_milli});
}

std::optional<NodeId> Scheduler::FindNode(const Pool& pool, const model::ResourceRequest& r,
                                          std::vector<int32_t>* devices) {
  if (KnownFull(pool.index, r)) return std::nullopt;
  if (policy_.nodes != NodeChoice::kNextFit) {
    std::vector<uint32_t> one{pool.index};
    uint32_t unused;
    return ChooseNode(one, r, devices, &unused);
  }
  PoolState& st = pool_state_[pool.index];
  std::optional<NodeId> found;
  Scan(pool, st.cursor, [&](size_t idx) {
    if (!FitsNow(r, free_.free(pool.nodes[idx]), devices)) return false;
    st.cursor = idx;  // next fit: fill this node before moving on
    found = pool.nodes[idx];
    return true;
  });
  if (!found) MarkFull(pool.index, r);
  return found;
}

bool Scheduler::NoRoomOnGrown(Where where, const std::vector<uint8_t>& verdicts, const model::ResourceRequest& r) {
  bool any_pool = false;
  std::vector<int32_t> devices;
  for (const Pool& pool : pools_) {
    if (!where.Admits(pool) || pool.nodes.empty() || verdicts[pool.index] != kPassed) continue;
    any_pool = true;
    if (KnownFull(pool.index, r)) continue;
    for (size_t pos : GrownPositions(pool.index)) {
      if (FitsNow(r, free_.free(pool.nodes[pos]), &devices)) return false;
    }
  }
  return any_pool;
}

const std::vector<size_t>& Scheduler::GrownPositions(uint32_t pool) {
  if (!grown_bucketed_) {
    grown_bucketed_ = true;
    grown_by_pool_.resize(pools_.size());
    for (NodeId node : s_.grown) {
      if (node.value() >= index_->pool_of_node.size()) continue;
      const std::vector<NodeId>& nodes = pools_[index_->pool_of_node[node.value()]].nodes;
      auto it = std::lower_bound(nodes.begin(), nodes.end(), node);
      if (it == nodes.end() || *it != node) continue;
      grown_by_pool_[index_->pool_of_node[node.value()]].push_back(static_cast<size_t>(it - nodes.begin()));
    }
    for (std::vector<size_t>& g : grown_by_pool_) {
      std::sort(g.begin(), g.end());
      g.erase(std::unique(g.begin(), g.end()), g.end());
    }
  }
  return grown_by_pool_[pool];
}

std::optional<int64_t> Scheduler::EarliestWaitUs(const Pool& pool, const model::ResourceRequest& r) {
  // This call's own releases (and, without an index, the snapshot's), merged in
  // time order with the caller's index.
  const std::multimap<int64_t, CompactRelease>& releases = PoolReleases(pool.index);
  static const std::multimap<int64_t, Allocation> kNone;
  const std::multimap<int64_t, Allocation>& indexed =
      s_.release_index && pool.index < s_.release_index->by_pool.size() ? s_.release_index->by_pool[pool.index]
                                                                        : kNone;
  if (releases.empty() && indexed.empty()) return std::nullopt;
  std::map<uint32_t, NodeFree> future;  // nodes touched so far, with what came back
  std::vector<int32_t> devices;
  auto own = releases.begin();
  auto shared = indexed.begin();
  while (own != releases.end() || shared != indexed.end()) {
    const bool take_own = shared == indexed.end() || (own != releases.end() && own->first <= shared->first);
    const int64_t at_us = take_own ? own->first : shared->first;
    const CompactRelease a = take_own ? own->second : CompactRelease::Of(shared->second);
    if (take_own) {
      ++own;
    } else {
      ++shared;
    }
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

double Scheduler::NodeCost(const model::ResourceRequest& r, const NodeFree& f, const std::vector<int32_t>& devices,
                           std::string_view device_type) const {
  NodeFree after = f;
  after.cpu_milli -= r.cpu_milli;
  after.memory_bytes -= r.memory_bytes;
  for (int32_t d : devices) after.device_free_milli[static_cast<size_t>(d)] -= r.device_share_milli;
  int64_t free_devices = 0;
  for (int32_t v : after.device_free_milli) free_devices += v;
  // Best fit: the least device capacity left, then the least CPU, as a tie-break
  // below one milli-device.
  const double best_fit = static_cast<double>(free_devices) + static_cast<double>(after.cpu_milli) * 1e-9;
  if (policy_.nodes != NodeChoice::kLeastFragmentation || workload_.empty()) return best_fit;
  // FGD judges tasks that need no device the same way: the CPU they take may leave
  // the node's free devices to no one.
  double growth = 0;
  for (const WorkloadShape& w : workload_) {
    growth += w.weight * static_cast<double>(UnusableDeviceMilli(w.request, after, device_type) -
                                             UnusableDeviceMilli(w.request, f, device_type));
  }
  // Fragmentation first; among equal growth, best fit (scaled well below one milli).
  return growth + best_fit * 1e-6;
}

std::optional<NodeId> Scheduler::ChooseNode(const std::vector<uint32_t>& pools, const model::ResourceRequest& r,
                                            std::vector<int32_t>* devices, uint32_t* pool_out) {
  std::optional<NodeId> best;
  double best_cost = 0;
  size_t seen = 0;  // nodes with room
  std::vector<int32_t> trial;
  const bool sample = policy_.node_sample > 0 &&
                      (policy_.nodes == NodeChoice::kBestFit || policy_.nodes == NodeChoice::kLeastFragmentation);
  for (uint32_t pi : pools) {
    if (KnownFull(pi, r)) continue;
    const Pool& pool = pools_[pi];
    // First fit starts at the pool's first node; the comparing choices start at
    // the cursor, so that a bounded sample moves on as nodes fill.
    size_t seen_here = 0;
    bool done = false;
    Scan(pool, policy_.nodes == NodeChoice::kFirstFit ? 0 : pool_state_[pi].cursor, [&](size_t idx) {
      const NodeFree& f = free_.free(pool.nodes[idx]);
      if (!FitsNow(r, f, &trial)) return false;
      ++seen;
      ++seen_here;
      bool take = false;
      switch (policy_.nodes) {
        case NodeChoice::kNextFit:
        case NodeChoice::kFirstFit:
          take = true;
          break;
        case NodeChoice::kRandom:  // reservoir sampling: each node with room alike
          take = rng_.Uniform(seen) == 0;
          break;
        case NodeChoice::kBestFit:
        case NodeChoice::kLeastFragmentation: {
          double cost = NodeCost(r, f, trial, pool.device_type);
          take = !best || cost < best_cost;
          if (take) best_cost = cost;
          break;
        }
      }
      if (take) {
        best = pool.nodes[idx];
        *devices = trial;
        *pool_out = pi;
        if (sample) pool_state_[pi].cursor = idx;
      }
      if (policy_.nodes == NodeChoice::kNextFit || policy_.nodes == NodeChoice::kFirstFit) {
        done = true;
        return true;
      }
      return sample && seen_here >= policy_.node_sample;  // on to the next pool
    });
    if (done) return best;
    if (seen_here == 0) MarkFull(pi, r);  // scanned to the end: no node has room for r
  }
  return best;
}

std::optional<Placement> Scheduler::PlaceUnscored(size_t qi, const model::ResourceRequest& r) {
  std::vector<int32_t> devices;
  uint32_t pool = 0;
  std::optional<NodeId> node;
  if (policy_.pools == PoolChoice::kCheapestPrice) {
    auto price = [&](const Candidate& c) {
      const Pool& p = pools_[c.pool];
      return std::make_tuple(p.price_micro_usd_per_hour / std::max<int32_t>(1, p.device_count), c.pool);
    };
    std::sort(candidates_.begin(), candidates_.end(),
              [&](const Candidate& a, const Candidate& b) { return price(a) < price(b); });
    for (const Candidate& c : candidates_) {
      node = FindNode(pools_[c.pool], r, &devices);
      if (node) {
        pool = c.pool;
        break;
      }
    }
  } else {
    any_pools_.clear();
    for (const Candidate& c : candidates_) any_pools_.push_back(c.pool);
    std::sort(any_pools_.begin(), any_pools_.end());  // fleet order
    node = ChooseNode(any_pools_, r, &devices, &pool);
  }
  if (!node) return std::nullopt;
  return PlaceOnPool(qi, pool, *node, std::move(devices));
}

std::optional<Placement> Scheduler::PlaceAmongNearBest(size_t qi, const model::ResourceRequest& r,
                                                       const CandidateOrder& rank) {
  if (policy_.near_best <= 0 || candidates_.size() < 2 ||
      (policy_.nodes != NodeChoice::kBestFit && policy_.nodes != NodeChoice::kLeastFragmentation)) {
    return std::nullopt;
  }
  const Candidate* best = &candidates_[0];
  for (const Candidate& c : candidates_) {
    if (rank.Better(c, *best)) best = &c;
  }
  // The objective's own measure within near_best, the other within
  // near_best_secondary.
  const model::Objective objective = s_.jobs[s_.queue[qi].job].job->objective;
  const double finish_tol = objective == model::Objective::kCheapest ? policy_.near_best_secondary : policy_.near_best;
  const double cost_tol = objective == model::Objective::kFastest ? policy_.near_best_secondary : policy_.near_best;
  const double finish_slack = finish_tol * static_cast<double>(std::max<int64_t>(best->finish_us - s_.now_us, 1));
  const double cost_slack = cost_tol * static_cast<double>(best->cost_micro_usd) + 1;
  any_pools_.clear();
  for (const Candidate& c : candidates_) {
    if (c.dispreferred == best->dispreferred && static_cast<double>(c.finish_us - best->finish_us) <= finish_slack &&
        static_cast<double>(c.cost_micro_usd - best->cost_micro_usd) <= cost_slack) {
      any_pools_.push_back(c.pool);
    }
  }
  if (any_pools_.size() < 2) return std::nullopt;
  std::sort(any_pools_.begin(), any_pools_.end());
  std::vector<int32_t> devices;
  uint32_t pool = 0;
  std::optional<NodeId> node = ChooseNode(any_pools_, r, &devices, &pool);
  if (!node) return std::nullopt;  // all near-best pools full: the walk decides
  return PlaceOnPool(qi, pool, *node, std::move(devices));
}

Placement Scheduler::PlaceOnPool(size_t qi, uint32_t pool, NodeId node, std::vector<int32_t> devices) const {
  auto c = std::find_if(candidates_.begin(), candidates_.end(), [&](const Candidate& x) { return x.pool == pool; });
  MERIDIAN_CHECK(c != candidates_.end());
  return MakePlacement(qi, *c, node, std::move(devices), s_.queue[qi].inputs);
}

void Scheduler::AddRelease(int64_t at_us, const Allocation& a) {
  uint32_t pool = index_->pool_of_node[a.node.value()];
  if (releases_built_[pool]) {
    pool_releases_[pool].emplace(at_us, CompactRelease::Of(a));
  } else {
    own_releases_[pool].emplace_back(at_us, CompactRelease::Of(a));
  }
}

const std::multimap<int64_t, CompactRelease>& Scheduler::PoolReleases(uint32_t pool) {
  if (releases_built_[pool]) return pool_releases_[pool];
  if (!snapshot_releases_bucketed_ && !s_.release_index) {  // with an index, the caller's are there
    snapshot_releases_bucketed_ = true;
    snapshot_releases_by_pool_.resize(pools_.size());
    for (size_t i = 0; i < s_.releases.size(); ++i) {
      snapshot_releases_by_pool_[index_->pool_of_node[s_.releases[i].allocation.node.value()]].push_back(
          static_cast<uint32_t>(i));
    }
  }
  auto& out = pool_releases_[pool];
  if (snapshot_releases_bucketed_) {
    for (uint32_t i : snapshot_releases_by_pool_[pool]) {
      out.emplace(s_.releases[i].at_us, CompactRelease::Of(s_.releases[i].allocation));
    }
  }
  for (const auto& [at_us, r] : own_releases_[pool]) out.emplace(at_us, r);
  own_releases_[pool].clear();
  releases_built_[pool] = true;
  return out;
}

const std::vector<uint8_t>& Scheduler::Verdicts(const TaskView& view) {
  // Verdicts for pools [from, pools_.size()).
  auto compute = [&](size_t from, std::vector<uint8_t>* out) {
    const auto& filters = DefaultFilters();
    out->resize(pools_.size(), kPassed);
    for (size_t i = from; i < pools_.size(); ++i) {
      const Pool& pool = pools_[i];
      (*out)[i] = kPassed;
      for (size_t f = 0; f < filters.size(); ++f) {
        if (!filters[f]->Check(view, pool)) {
          (*out)[i] = static_cast<uint8_t>(f);
          break;
        }
      }
    }
  };
  if (!view.pending.inputs.empty()) {  // residency and reachability depend on them
    compute(0, &verdicts_);
    return verdicts_;
  }
  // What the filters read of a task without inputs. A pool's verdict never
  // changes (health is part of what makes a pool), so the caller's cache keeps
  // them across calls; pools added since are judged now.
  std::string key = FilterKey(view.job, view.task);
  key += policy_.heterogeneity_aware ? 'h' : 'a';  // the agnostic baseline's speeds differ
  VerdictCache& cache = s_.verdict_cache ? *s_.verdict_cache : own_verdicts_;
  std::vector<uint8_t>& v = cache.by_key[std::move(key)];
  if (v.size() < pools_.size()) compute(v.size(), &v);
  return v;
}

std::optional<Scheduler::TaskClass> Scheduler::ClassOf(size_t qi) const {
  const PendingTask& p = s_.queue[qi];
  if (!p.inputs.empty()) return std::nullopt;
  const JobState& js = s_.jobs[p.job];
  const model::Job& job = *js.job;
  const model::Task& task = s_.task(p);
  const model::ResourceRequest& r = task.resources;
  const bool own = js.deadline_at_us || js.budget_left_micro_usd;
  return TaskClass{own ? p.job : UINT32_MAX, own ? std::string_view() : std::string_view(job.tenant),
                   own ? 0 : static_cast<int>(job.objective) + 1,
                   own ? std::vector<std::string>() : job.allowed_regions, r.accelerator_any_of,
                   r.device_count, r.device_share_milli, r.min_device_memory_bytes, r.cpu_milli,
                   r.memory_bytes, task.work ? task.work->kind : std::string(), static_cast<int>(r.spot),
                   r.node_labels};
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

Attempt Scheduler::TryPlace(size_t qi, Where where) {
  const PendingTask& p = s_.queue[qi];
  const JobState& js = s_.jobs[p.job];
  const model::Task& task = s_.task(p);
  const model::ResourceRequest& r = task.resources;
  Attempt out;
  if (!CheckQuota(qi, r, &out)) return out;
  restricted_ = p.room_only_on_grown;

  static const std::vector<SiteInputs> kNoInputs;
  std::vector<SiteInputs> per_site = p.inputs.empty() ? kNoInputs : EstimateInputsPerSite(*s_.fleet, p.inputs);
  EstimateComputePerType(*s_.throughput, task, pools_, &compute_by_type_);
  if (!policy_.heterogeneity_aware) TreatTypesAlike(&compute_by_type_);
  TaskView view{*s_.fleet, *s_.throughput, *js.job, task, p, per_site, compute_by_type_};
  CostContext cost_ctx{s_.now_us, js.deadline_at_us, budget_left_[p.job]};

  candidates_.clear();
  rejections_.clear();
  const std::vector<uint8_t>& verdicts = Verdicts(view);
  if (restricted_ && !policy_.explain_waiting && OnlyRoomMatters(qi) && NoRoomOnGrown(where, verdicts, r)) {
    // It waits for room whatever the scores say; the same answer as the full
    // walk below would give, without scoring every pool.
    out.needs_room = true;
    out.amount_free = true;
    return out;
  }
  for (const Pool& pool : pools_) {
    if (!where.Admits(pool) || pool.nodes.empty()) continue;
    if (verdicts[pool.index] != kPassed) continue;
    if (!TypeQuotaAllows(qi, pool, r)) continue;
    Candidate c;
    if (!ScorePool(view, pool, cost_ctx, tiebreak_[pool.index], &c, &rejections_)) continue;
    if (const std::optional<int64_t>& left = usage_[order_.TenantOf(qi)].budget_left_micro_usd;
        left && c.cost_micro_usd > *left) {
      rejections_.push_back(Rejection{RejectionKind::kTenantBudget, 0, pool.index, c.cost_micro_usd, *left});
      continue;
    }
    // The agnostic baseline knows no difference between devices, in speed or in
    // price: equal candidates, split by the seeded tie-break. (Budgets were
    // checked with the real cost.)
    if (!policy_.heterogeneity_aware) c.cost_micro_usd = 0;
    candidates_.push_back(c);
  }
  if (policy_.pools != PoolChoice::kScored && !candidates_.empty()) {
    if (std::optional<Placement> p = PlaceUnscored(qi, r)) {
      out.placed = true;
      out.placement = std::move(*p);
      return out;
    }
  }
  CandidateOrder rank(js.job->objective, candidates_);
  if (std::optional<Placement> p = PlaceAmongNearBest(qi, r, rank)) {
    out.placed = true;
    out.placement = std::move(*p);
    return out;
  }

  // Walk the candidates best first to the first with room. A busy pool ranked
  // above it whose node frees soon enough may still be the best choice once its
  // wait is added: then the task holds out for it rather than take a worse node
  // now. Waits are looked up only then (or to explain): when no pool has room,
  // holding out changes nothing.
  std::vector<int32_t> devices;
  busy_.clear();
  bool held = false;
  // Best first by selection, not a full sort: the first candidate usually has
  // room; past the first few, sort the rest.
  constexpr size_t kSelectFirst = 4;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    if (i < kSelectFirst) {
      size_t best = i;
      for (size_t k = i + 1; k < candidates_.size(); ++k) {
        if (rank.Better(candidates_[k], candidates_[best])) best = k;
      }
      std::swap(candidates_[i], candidates_[best]);
    } else if (i == kSelectFirst) {
      std::sort(candidates_.begin() + static_cast<std::ptrdiff_t>(i), candidates_.end(),
                [&](const Candidate& a, const Candidate& b) { return rank.Better(a, b); });
    }
    const Candidate& c = candidates_[i];
    if (policy_.pools != PoolChoice::kScored) {  // no room anywhere: explain only
      rejections_.push_back(Rejection{RejectionKind::kBusy, 0, c.pool, 0, 0});
      continue;
    }
    const Pool& pool = pools_[c.pool];
    std::optional<NodeId> node = FindNode(pool, r, &devices);
    if (!node) {
      rejections_.push_back(Rejection{RejectionKind::kBusy, 0, pool.index, 0, 0});
      busy_.push_back(i);
      continue;
    }
    std::optional<Candidate> hold = BestHold(js, r, rank);
    if (hold && !rank.Better(c, *hold)) {
      rejections_.push_back(Rejection{RejectionKind::kHoldOut, 0, hold->pool, hold->finish_us, hold->wait_us});
      held = true;
      break;
    }
    out.placed = true;
    out.placement = MakePlacement(qi, c, *node, std::move(devices), p.inputs);
    return out;
  }
  bool wait_explained = false;
  if (!held && policy_.explain_waiting) {  // say when a busy pool frees, if one does
    if (std::optional<Candidate> hold = BestHold(js, r, rank)) {
      rejections_.push_back(Rejection{RejectionKind::kHoldOut, 0, hold->pool, hold->finish_us, hold->wait_us});
      wait_explained = true;
    }
  }
  // Only now say which filter turned each pool away.
  for (const Pool& pool : pools_) {
    if (!where.Admits(pool)) continue;
    if (verdicts[pool.index] == kPassed) continue;
    rejections_.push_back(Rejection{RejectionKind::kFilter, verdicts[pool.index], pool.index, 0, 0});
  }
  out.kind = UnplacedKindOf(pools_, rejections_);
  if (out.kind == UnplacedKind::kWaiting && !held && OnlyRoomMatters(qi)) {
    out.needs_room = std::all_of(rejections_.begin(), rejections_.end(), [](const Rejection& x) {
      return x.kind == RejectionKind::kBusy || x.kind == RejectionKind::kFilter || x.kind == RejectionKind::kHoldOut;
    });
    out.amount_free = out.needs_room && !wait_explained;
  }
  if (out.kind == UnplacedKind::kInfeasible || policy_.explain_waiting) {
    ExplainUnplaced(view, pools_, free_, rejections_, s_.fleet->nodes.size(), s_.now_us, out.kind, &out.reason);
  }
  return out;
}

std::optional<Candidate> Scheduler::BestHold(const JobState& js, const model::ResourceRequest& r,
                                            const CandidateOrder& rank) {
  std::optional<Candidate> hold;
  for (size_t i : busy_) {
    const Candidate& c = candidates_[i];
    std::optional<int64_t> wait = EarliestWaitUs(pools_[c.pool], r);
    if (!wait) continue;
    Candidate later = c;
    later.wait_us = *wait;
    later.start_us = SatAdd(later.start_us, *wait);
    later.finish_us = SatAdd(later.finish_us, *wait);
    if (js.deadline_at_us && later.finish_us > *js.deadline_at_us) continue;
    if (!hold || rank.Better(later, *hold)) hold = later;
  }
  return hold;
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
  if (u.gpu_milli > 0) usage_[t].gpu_milli_by_type[p.device_type] += u.gpu_milli;
  if (usage_[t].budget_left_micro_usd) *usage_[t].budget_left_micro_usd -= p.cost_micro_usd();
  // A gang's members are released only once the whole gang is placed: a member
  // must not hold out for a node its own gang took (the gang would be rolled back
  // every round and never start).
  if (!log) AddRelease(p.finish_us, p.allocation);
  if (log) log->push_back(Taken{p.allocation, p.job, t, u, p.cost_micro_usd(), p.finish_us, p.device_type});
}

void Scheduler::Rollback(std::vector<Taken>* log) {
  for (const Taken& t : *log) {
    free_.Give(t.allocation);
    if (budget_left_[t.job]) *budget_left_[t.job] += t.cost;
    usage_[t.tenant].gpu_milli -= t.usage.gpu_milli;
    usage_[t.tenant].cpu_milli -= t.usage.cpu_milli;
    usage_[t.tenant].memory_bytes -= t.usage.memory_bytes;
    if (t.usage.gpu_milli > 0) usage_[t.tenant].gpu_milli_by_type[t.device_type] -= t.usage.gpu_milli;
    if (usage_[t.tenant].budget_left_micro_usd) *usage_[t.tenant].budget_left_micro_usd += t.cost;
  }
  log->clear();
  // Resources came back: what was full may have room again.
  for (PoolState& st : pool_state_) st.full_for.clear();
  unplaced_by_class_.clear();
  no_room_by_class_.clear();
  no_room_by_room_class_.clear();
}

// A gang's members exchange about this much per step across the links they span (the
// gradients of a mid-sized model): what a link costs it is its round trip plus the
// time to move this much over it, so both latency and bandwidth count.
constexpr int64_t kGangExchangeBytes = int64_t{64} << 20;

int64_t GangLinkCostUs(const model::Fleet& fleet, SiteId a, SiteId b) {
  if (a == b) return 0;
  const model::Link* link = fleet.FindLink(a, b);
  if (link == nullptr || link->bandwidth_bps <= 0) return std::numeric_limits<int64_t>::max() / 4;
  return link->rtt_us + kGangExchangeBytes * 8 * 1'000'000 / link->bandwidth_bps;
}

void Scheduler::PlaceGang(const std::vector<size_t>& members) {
  // Prefer one site and one device type for the whole gang (collectives over a WAN
  // are slow, and a synchronous gang runs at its slowest member's pace): try the
  // (site, type) pairs in the order the first member ranks them, then the sites,
  // then any mix.
  std::vector<Where> tries;
  {
    Attempt first = TryPlace(members[0], Where{});
    if (first.placed) {
      CandidateOrder rank(s_.jobs[s_.queue[members[0]].job].job->objective, candidates_);
      std::sort(candidates_.begin(), candidates_.end(),
                [&](const Candidate& a, const Candidate& b) { return rank.Better(a, b); });
      auto add = [&](Where w) {
        if (std::find(tries.begin(), tries.end(), w) == tries.end()) tries.push_back(w);
      };
      const Pool& chosen = pools_[index_->pool_of_node[first.placement.allocation.node.value()]];
      add(Where{chosen.site, chosen.type_index});
      for (const Candidate& c : candidates_) add(Where{pools_[c.pool].site, pools_[c.pool].type_index});
      add(Where{chosen.site, std::nullopt});
      for (const Candidate& c : candidates_) add(Where{pools_[c.pool].site, std::nullopt});
      // Too big for one site: its members talk over the links between the sites it
      // spans, at the pace of the slowest. Grow a set of sites from the first choice,
      // each time adding the site whose slowest link to the set is the fastest, and try
      // each set (the members still pick their best nodes within it).
      std::vector<SiteId> others;
      for (const Candidate& c : candidates_) {
        const SiteId s = pools_[c.pool].site;
        if (s != chosen.site && std::find(others.begin(), others.end(), s) == others.end()) others.push_back(s);
      }
      std::vector<SiteId> among = {chosen.site};
      while (!others.empty()) {
        auto slowest = [&](SiteId s) {
          int64_t worst = 0;
          for (SiteId in : among) worst = std::max(worst, GangLinkCostUs(*s_.fleet, in, s));
          return worst;
        };
        auto next = std::min_element(others.begin(), others.end(),
                                     [&](SiteId a, SiteId b) { return slowest(a) < slowest(b); });
        among.push_back(*next);
        others.erase(next);
        add(Where{std::nullopt, std::nullopt, among});
      }
    }
    tries.push_back(Where{});
  }
  Attempt failure;
  for (const Where& where : tries) {
    std::vector<Taken> log;
    std::vector<Placement> placed;
    failure = Attempt{};
    size_t failed_member = 0;
    for (size_t m = 0; m < members.size(); ++m) {
      Attempt a = TryPlace(members[m], where);
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
      for (Placement& p : placed) {
        AddRelease(p.finish_us, p.allocation);
        plan_.placements.push_back(std::move(p));
      }
      return;
    }
    Rollback(&log);
    if (!where.site && !where.type) {
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
    // Back from the caller's backlog, of a class already found no room for.
    const bool by_room_class = p.room_only_on_grown && p.room_class != PendingTask::kNoRoomClass;
    if (by_room_class) {
      if (auto it = no_room_by_room_class_.find(p.room_class); it != no_room_by_room_class_.end()) {
        plan_.unplaced.push_back(Unplaced{*qi, p.job, p.task, UnplacedKind::kWaiting, it->second, true});
        if (policy_.on_decision) policy_.on_decision(plan_.placements.size() + plan_.unplaced.size());
        continue;
      }
    }
    std::optional<AmountClass> amount_class;
    if (std::optional<TaskClass> c = ClassOf(*qi)) {
      amount_class.emplace(std::move(*c), task.duration_us, task.work ? task.work->amount : 0.0);
      const Attempt* seen = nullptr;
      if (auto it = no_room_by_class_.find(std::get<0>(*amount_class)); it != no_room_by_class_.end()) {
        seen = &it->second;
      } else if (auto at = unplaced_by_class_.find(*amount_class); at != unplaced_by_class_.end()) {
        seen = &at->second;
      }
      if (seen) {
        plan_.unplaced.push_back(Unplaced{*qi, p.job, p.task, seen->kind, seen->reason, seen->needs_room});
        if (policy_.on_decision) policy_.on_decision(plan_.placements.size() + plan_.unplaced.size());
        continue;
      }
    }
    Attempt a = TryPlace(*qi, Where{});
    if (by_room_class && a.needs_room) no_room_by_room_class_.emplace(p.room_class, a.reason);
    if (!a.placed && amount_class) {
      if (a.amount_free) {
        no_room_by_class_.emplace(std::get<0>(*amount_class), a);
      } else {
        unplaced_by_class_.emplace(*amount_class, a);
      }
    }
    if (a.placed) {
      Commit(*qi, a.placement, nullptr);
      order_.Placed(*qi, UsageOf(task.resources));
      plan_.placements.push_back(std::move(a.placement));
    } else {
      plan_.unplaced.push_back(Unplaced{*qi, p.job, p.task, a.kind, std::move(a.reason), a.needs_room});
    }
    if (policy_.on_decision) policy_.on_decision(plan_.placements.size() + plan_.unplaced.size());
  }
  return std::move(plan_);
}

}  // namespace

std::vector<WorkloadShape> FgdWorkload(const std::vector<const model::ResourceRequest*>& requests) {
  // FGD's typical tasks: CPU, device count, share and accepted types, each weighted
  // by how often it occurs. Tasks that need no device count too.
  using Key = std::tuple<int64_t, int32_t, int32_t, std::vector<std::string>>;
  std::map<Key, double> counts;
  for (const model::ResourceRequest* r : requests) {
    const bool gpu = r->device_count > 0;
    counts[Key{r->cpu_milli, r->device_count, gpu ? r->device_share_milli : 0,
               gpu ? r->accelerator_any_of : std::vector<std::string>()}] += 1;
  }
  std::vector<WorkloadShape> shapes;
  for (const auto& [key, count] : counts) {
    model::ResourceRequest shape;
    std::tie(shape.cpu_milli, shape.device_count, shape.device_share_milli, shape.accelerator_any_of) = key;
    shape.memory_bytes = 0;  // FGD's typical tasks leave memory out
    shapes.push_back(WorkloadShape{std::move(shape), count});
  }
  return shapes;
}

std::vector<WorkloadShape> GpuDemandWorkload(const std::vector<const model::ResourceRequest*>& requests) {
  using Host = std::pair<int64_t, int64_t>;  // cpu, memory
  std::map<std::pair<int32_t, int32_t>, std::map<Host, double>> groups;
  for (const model::ResourceRequest* r : requests) {
    if (r->device_count == 0) continue;
    groups[{r->device_count, r->device_share_milli}][{r->cpu_milli, r->memory_bytes}] +=
        r->device_count * r->device_share_milli / 1000.0;
  }
  std::vector<WorkloadShape> shapes;
  for (const auto& [gpu, hosts] : groups) {
    double total = 0, most = -1;
    Host common{0, 0};
    for (const auto& [host, demand] : hosts) {
      total += demand;
      if (demand > most) {
        most = demand;
        common = host;
      }
    }
    model::ResourceRequest shape;
    shape.device_count = gpu.first;
    shape.device_share_milli = gpu.second;
    shape.cpu_milli = common.first;
    shape.memory_bytes = common.second;
    shapes.push_back(WorkloadShape{shape, total});
  }
  return shapes;
}

std::string_view PoolChoiceName(PoolChoice c) {
  switch (c) {
    case PoolChoice::kScored: return "scored";
    case PoolChoice::kAnyPool: return "any-pool";
    case PoolChoice::kCheapestPrice: return "cheapest-price";
  }
  return "?";
}

std::string_view NodeChoiceName(NodeChoice c) {
  switch (c) {
    case NodeChoice::kNextFit: return "next-fit";
    case NodeChoice::kFirstFit: return "first-fit";
    case NodeChoice::kBestFit: return "best-fit";
    case NodeChoice::kRandom: return "random";
    case NodeChoice::kLeastFragmentation: return "least-fragmentation";
  }
  return "?";
}

std::string_view UnplacedKindName(UnplacedKind kind) {
  return kind == UnplacedKind::kInfeasible ? "infeasible" : "waiting";
}

Plan Schedule(const Snapshot& snapshot, const Policy& policy, Random& rng) {
  Scheduler s(snapshot, policy, rng);
  return s.Run();
}

}  // namespace meridian::sched
