#include "sched/select.h"

#include <algorithm>
#include <limits>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "common/units.h"
#include "sched/estimate.h"

namespace meridian::sched {
namespace {

constexpr int64_t kInf = std::numeric_limits<int64_t>::max();

}  // namespace

int64_t ScoreFinishTimeUs(const TaskView& t, const Pool& pool, int64_t now_us, Candidate* c) {
  c->compute_us = t.compute_us_by_type[pool.type_index].value_or(kInf);
  c->transfer_us = t.inputs_per_site.empty() ? 0 : t.inputs_per_site[pool.site.value()].transfer_us;
  c->start_us = now_us;
  c->finish_us = SatAdd(SatAdd(now_us, c->transfer_us), c->compute_us);
  return c->finish_us;
}

int64_t ScoreCostMicroUsd(const TaskView& t, const Pool& pool, Candidate* c) {
  int64_t busy_us = SatAdd(c->transfer_us, c->compute_us);
  c->run_cost_micro_usd =
      RunCostMicroUsd(pool.price_micro_usd_per_hour, NodeShareppm(t.task.resources, pool), busy_us);
  c->egress_micro_usd = t.inputs_per_site.empty() ? 0 : t.inputs_per_site[pool.site.value()].egress_micro_usd;
  c->cost_micro_usd = SatAdd(c->run_cost_micro_usd, c->egress_micro_usd);
  return c->cost_micro_usd;
}

bool ScorePool(const TaskView& t, const Pool& pool, const CostContext& ctx, uint32_t tiebreak,
               Candidate* c, std::vector<Rejection>* rejections) {
  c->pool = pool.index;
  c->tiebreak = tiebreak;
  const model::SpotRule spot = t.task.resources.spot;
  c->dispreferred = (spot == model::SpotRule::kPrefer && !pool.spot) || (spot == model::SpotRule::kAvoid && pool.spot);
  ScoreFinishTimeUs(t, pool, ctx.now_us, c);
  ScoreCostMicroUsd(t, pool, c);
  if (ctx.deadline_at_us && c->finish_us > *ctx.deadline_at_us) {
    rejections->push_back(Rejection{RejectionKind::kDeadline, 0, pool.index, c->finish_us, *ctx.deadline_at_us});
    return false;
  }
  if (ctx.budget_left_micro_usd && c->cost_micro_usd > *ctx.budget_left_micro_usd) {
    rejections->push_back(Rejection{RejectionKind::kBudget, 0, pool.index, c->cost_micro_usd, *ctx.budget_left_micro_usd});
    return false;
  }
  return true;
}

CandidateOrder::CandidateOrder(model::Objective objective, const std::vector<Candidate>& cs)
    : objective_(objective) {
  if (objective != model::Objective::kBalanced || cs.empty()) return;
  auto [fmin, fmax] = std::minmax_element(cs.begin(), cs.end(), [](const Candidate& a, const Candidate& b) { return a.finish_us < b.finish_us; });
  auto [cmin, cmax] = std::minmax_element(cs.begin(), cs.end(), [](const Candidate& a, const Candidate& b) { return a.cost_micro_usd < b.cost_micro_usd; });
  f0_ = static_cast<double>(fmin->finish_us);
  fr_ = static_cast<double>(fmax->finish_us) - f0_;
  c0_ = static_cast<double>(cmin->cost_micro_usd);
  cr_ = static_cast<double>(cmax->cost_micro_usd) - c0_;
}

double CandidateOrder::Score(const Candidate& c) const {
  double s = 0;
  if (fr_ > 0) s += (static_cast<double>(c.finish_us) - f0_) / fr_;
  if (cr_ > 0) s += (static_cast<double>(c.cost_micro_usd) - c0_) / cr_;
  return s;
}

UnplacedKind UnplacedKindOf(const std::vector<Pool>& pools, const std::vector<Rejection>& rejections) {
  const auto& filters = DefaultFilters();
  for (const Rejection& r : rejections) {
    if (pools[r.pool].nodes.empty()) continue;
    switch (r.kind) {
      case RejectionKind::kFilter:
        if (filters[r.filter]->kind() == UnplacedKind::kWaiting) return UnplacedKind::kWaiting;
        break;
      case RejectionKind::kBusy:
      case RejectionKind::kHoldOut:
      case RejectionKind::kTenantBudget:  // the budget renews at midnight UTC
        return UnplacedKind::kWaiting;
      case RejectionKind::kTypeQuota:
        if (r.filter != 1) return UnplacedKind::kWaiting;
        break;
      case RejectionKind::kDeadline:
      case RejectionKind::kBudget:
        break;
    }
  }
  return UnplacedKind::kInfeasible;
}

void ExplainUnplaced(const TaskView& t, const std::vector<Pool>& pools, const LedgerOverlay& free,
                     const std::vector<Rejection>& rejections, size_t total_nodes,
                     int64_t now_us, UnplacedKind kind, std::string* reason) {
  const auto& filters = DefaultFilters();
  std::map<std::string, size_t> nodes_by_phrase;
  // A pool the task would hold out for was busy too: say the hold-out only, so that
  // each node is counted once.
  std::vector<uint32_t> held_out;
  for (const Rejection& r : rejections) {
    if (r.kind == RejectionKind::kHoldOut) held_out.push_back(r.pool);
  }
  for (const Rejection& r : rejections) {
    const Pool& pool = pools[r.pool];
    if (pool.nodes.empty()) continue;  // emptied by PoolIndex::Move
    if (r.kind == RejectionKind::kBusy && std::find(held_out.begin(), held_out.end(), r.pool) != held_out.end()) {
      continue;
    }
    std::string phrase;
    switch (r.kind) {
      case RejectionKind::kFilter:
        phrase = filters[r.filter]->Explain(t, pool);
        break;
      case RejectionKind::kDeadline:
        phrase = fmt::format("would finish it {} from now, after the deadline ({} from now)",
                             FormatDurationUs(r.value - now_us), FormatDurationUs(r.limit - now_us));
        break;
      case RejectionKind::kBudget:
        phrase = fmt::format("would charge {} for it, more than the {} left of the job's budget",
                             FormatMicroUsd(r.value), FormatMicroUsd(r.limit));
        break;
      case RejectionKind::kBusy:
        phrase = fmt::format("at {} are busy (not enough {} now)", t.fleet.site(pool.site).name,
                             ShortResource(t.task.resources, free.free(pool.nodes.front())));
        break;
      case RejectionKind::kTypeQuota:
        if (r.filter == 1) {
          phrase = fmt::format("with {}s: it needs more than tenant '{}''s {} quota of {}", pool.device_type,
                               t.job.tenant, pool.device_type, FormatMilli(r.limit));
        } else {
          phrase = fmt::format("with {}s: tenant '{}' uses {} of its {} {} quota", pool.device_type, t.job.tenant,
                               FormatMilli(r.value), FormatMilli(r.limit), pool.device_type);
        }
        break;
      case RejectionKind::kTenantBudget:
        phrase = fmt::format("would charge {} for it, more than the {} left today of tenant '{}''s daily budget",
                             FormatMicroUsd(r.value), FormatMicroUsd(r.limit), t.job.tenant);
        break;
      case RejectionKind::kHoldOut:
        phrase = fmt::format("at {} are busy, but one frees in {} and would still finish it first ({} from now)",
                             t.fleet.site(pool.site).name, FormatDurationUs(r.limit),
                             FormatDurationUs(r.value - now_us));
        break;
    }
    nodes_by_phrase[phrase] += pool.nodes.size();
  }
  const bool waiting = kind == UnplacedKind::kWaiting;
  std::vector<std::pair<size_t, std::string>> parts;
  for (auto& [phrase, n] : nodes_by_phrase) parts.emplace_back(n, phrase);
  std::stable_sort(parts.begin(), parts.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string out = fmt::format("0 of {} nodes can run it{}", total_nodes, waiting ? " now" : "");
  for (size_t i = 0; i < parts.size(); ++i) {
    out += i == 0 ? ": " : "; ";
    out += fmt::format("{} node{} {}", parts[i].first, parts[i].first == 1 ? "" : "s", parts[i].second);
  }
  *reason = std::move(out);
}

}  // namespace meridian::sched
