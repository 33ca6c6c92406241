// Score and Select: the two Score plugins (finish time, cost) turn a pool that
// passed the filters into a Candidate; the job's deadline and budget are hard
// constraints on it; Select orders candidates by the job's objective:
//   fastest   earliest finish, then lower cost;
//   cheapest  lowest cost (the deadline already holds), then earlier finish;
//   balanced  least sum of finish and cost, each scaled to [0, 1] over the
//             candidates (equal weight).
// Exact ties go to a per-call random rank of the pools (seeded), so equal sites
// share load in a reproducible way.
//
// Also here: turning the rejections collected for a task into one reason.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "model/work.h"
#include "sched/filters.h"
#include "sched/plan.h"
#include "sched/pool.h"
#include "sched/snapshot.h"

namespace meridian::sched {

struct CostContext {
  int64_t now_us = 0;
  std::optional<int64_t> deadline_at_us;
  std::optional<int64_t> budget_left_micro_usd;
};

struct Candidate {
  uint32_t pool = 0;
  uint32_t tiebreak = 0;
  int64_t start_us = 0;
  int64_t transfer_us = 0;
  int64_t compute_us = 0;
  int64_t finish_us = 0;
  int64_t run_cost_micro_usd = 0;
  int64_t egress_micro_usd = 0;
  int64_t cost_micro_usd = 0;
  int64_t wait_us = 0;  // until a node of the pool has room (0: now)
  // 1 when the task would rather not run here (spot: prefer on an on-demand pool,
  // spot: avoid on a spot one): among pools with room now, the others come first.
  uint8_t dispreferred = 0;
};

// kTypeQuota: the tenant's quota for the pool's accelerator type is in use;
// kTenantBudget: the task would cost more than is left of the tenant's daily budget.
enum class RejectionKind : uint8_t { kFilter, kDeadline, kBudget, kBusy, kHoldOut, kTypeQuota, kTenantBudget };

struct Rejection {
  RejectionKind kind;
  uint16_t filter;  // index into DefaultFilters() for kFilter; for kTypeQuota, 1 when
                    // the task alone needs more than the quota (it can never run there)
  uint32_t pool;
  int64_t value;    // finish time (kDeadline, kHoldOut), cost (kBudget, kTenantBudget), in use (kTypeQuota)
  int64_t limit;    // the deadline, the budget left, the wait (kHoldOut), the quota (kTypeQuota)
};

// Score plugins.
int64_t ScoreFinishTimeUs(const TaskView& t, const Pool& pool, int64_t now_us, Candidate* c);
int64_t ScoreCostMicroUsd(const TaskView& t, const Pool& pool, Candidate* c);

// Fills *c, or records why the pool breaks the deadline or the budget.
bool ScorePool(const TaskView& t, const Pool& pool, const CostContext& ctx, uint32_t tiebreak,
               Candidate* c, std::vector<Rejection>* rejections);

// Orders candidates best first; returns the comparison it used, so that a
// candidate whose finish moved later by waiting can be compared with the rest.
class CandidateOrder {
 public:
  CandidateOrder(model::Objective objective, const std::vector<Candidate>& candidates);
  // Called for every pair the selection compares: kept inline.
  bool Better(const Candidate& a, const Candidate& b) const {
    // A preference orders pools with room now; it never makes a task wait.
    if (a.dispreferred != b.dispreferred && a.wait_us == 0 && b.wait_us == 0) return a.dispreferred < b.dispreferred;
    if (objective_ == model::Objective::kCheapest) {
      return std::tie(a.cost_micro_usd, a.finish_us, a.tiebreak) <
             std::tie(b.cost_micro_usd, b.finish_us, b.tiebreak);
    }
    if (objective_ == model::Objective::kBalanced) {
      double sa = Score(a), sb = Score(b);
      if (sa != sb) return sa < sb;
    }
    return std::tie(a.finish_us, a.cost_micro_usd, a.tiebreak) <
           std::tie(b.finish_us, b.cost_micro_usd, b.tiebreak);
  }

 private:
  double Score(const Candidate& c) const;
  model::Objective objective_;
  double f0_ = 0, fr_ = 0, c0_ = 0, cr_ = 0;  // balanced: scales
};

// Whether anything in the rejections could change (kWaiting) or nothing can
// (kInfeasible); pools emptied by PoolIndex::Move do not count.
UnplacedKind UnplacedKindOf(const std::vector<Pool>& pools, const std::vector<Rejection>& rejections);

// One reason from all rejections, of the kind UnplacedKindOf gave them.
void ExplainUnplaced(const TaskView& t, const std::vector<Pool>& pools, const LedgerOverlay& free,
                     const std::vector<Rejection>& rejections, size_t total_nodes,
                     int64_t now_us, UnplacedKind kind, std::string* reason);

}  // namespace meridian::sched
