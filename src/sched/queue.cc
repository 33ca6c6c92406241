#include "sched/queue.h"

#include <algorithm>
#include <numeric>

namespace meridian::sched {

std::string_view QueueOrderName(QueueOrder order) {
  switch (order) {
    case QueueOrder::kFifo: return "fifo";
    case QueueOrder::kPriority: return "priority";
    case QueueOrder::kFairShare: return "fair";
  }
  return "fifo";
}

std::optional<QueueOrder> ParseQueueOrder(std::string_view name) {
  if (name == "fifo") return QueueOrder::kFifo;
  if (name == "priority") return QueueOrder::kPriority;
  if (name == "fair") return QueueOrder::kFairShare;
  return std::nullopt;
}

TaskOrder::TaskOrder(const Snapshot& snapshot, QueueOrder order)
    : snapshot_(snapshot), order_(order) {
  const std::vector<PendingTask>& q = snapshot.queue;
  sorted_.resize(q.size());
  std::iota(sorted_.begin(), sorted_.end(), size_t{0});
  auto fifo_less = [&](size_t a, size_t b) {
    const JobState& ja = snapshot.jobs[q[a].job];
    const JobState& jb = snapshot.jobs[q[b].job];
    if (ja.submit_us != jb.submit_us) return ja.submit_us < jb.submit_us;
    return q[a].seq < q[b].seq;
  };
  if (order == QueueOrder::kPriority) {
    std::stable_sort(sorted_.begin(), sorted_.end(), [&](size_t a, size_t b) {
      int32_t pa = snapshot.jobs[q[a].job].job->priority;
      int32_t pb = snapshot.jobs[q[b].job].job->priority;
      if (pa != pb) return pa > pb;
      return fifo_less(a, b);
    });
  } else {
    std::stable_sort(sorted_.begin(), sorted_.end(), fifo_less);
  }

  const model::Fleet& fleet = *snapshot.fleet;
  size_t n_tenants = fleet.tenants.size() + 1;  // + everyone the fleet does not list
  tenant_of_.assign(q.size(), fleet.tenants.size());
  for (size_t i = 0; i < q.size(); ++i) {
    if (auto t = fleet.FindTenant(snapshot.jobs[q[i].job].job->tenant)) tenant_of_[i] = t->value();
  }
  if (order != QueueOrder::kFairShare) return;
  per_tenant_.resize(n_tenants);
  for (size_t i : sorted_) per_tenant_[tenant_of_[i]].push_back(i);
  cursor_.assign(n_tenants, 0);
  usage_.assign(n_tenants, TenantUsage{});
  for (size_t t = 0; t < snapshot.tenant_usage.size() && t < n_tenants; ++t) usage_[t] = snapshot.tenant_usage[t];
  weight_.assign(n_tenants, 1);
  for (const model::Tenant& t : fleet.tenants) weight_[t.id.value()] = std::max<int64_t>(1, t.weight);
  for (const model::Node& n : fleet.nodes) {
    capacity_.gpu_milli += static_cast<int64_t>(n.devices.size()) * 1000;
    capacity_.cpu_milli += n.cpu_milli;
    capacity_.memory_bytes += n.memory_bytes;
  }
}

double TaskOrder::DominantShare(size_t tenant) const {
  const TenantUsage& u = usage_[tenant];
  double s = 0;
  if (capacity_.gpu_milli > 0) s = std::max(s, static_cast<double>(u.gpu_milli) / capacity_.gpu_milli);
  if (capacity_.cpu_milli > 0) s = std::max(s, static_cast<double>(u.cpu_milli) / capacity_.cpu_milli);
  if (capacity_.memory_bytes > 0) {
    s = std::max(s, static_cast<double>(u.memory_bytes) / static_cast<double>(capacity_.memory_bytes));
  }
  return s / static_cast<double>(weight_[tenant]);
}

std::optional<size_t> TaskOrder::Next() {
  if (order_ != QueueOrder::kFairShare) {
    if (next_ == sorted_.size()) return std::nullopt;
    return sorted_[next_++];
  }
  // The tenant with work left and the lowest weighted dominant share; ties go to
  // the lower tenant index, so the order is deterministic.
  std::optional<size_t> best;
  double best_share = 0;
  for (size_t t = 0; t < per_tenant_.size(); ++t) {
    if (cursor_[t] == per_tenant_[t].size()) continue;
    double s = DominantShare(t);
    if (!best || s < best_share) {
      best = t;
      best_share = s;
    }
  }
  if (!best) return std::nullopt;
  return per_tenant_[*best][cursor_[*best]++];
}

void TaskOrder::Placed(size_t queue_index, const TenantUsage& taken) {
  if (order_ != QueueOrder::kFairShare) return;
  TenantUsage& u = usage_[tenant_of_[queue_index]];
  u.gpu_milli += taken.gpu_milli;
  u.cpu_milli += taken.cpu_milli;
  u.memory_bytes += taken.memory_bytes;
}

}  // namespace meridian::sched
