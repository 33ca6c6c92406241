// Queue orders: which waiting task the scheduler tries next.
//   kFifo      by job submission, then task sequence;
//   kPriority  higher job priority first, then FIFO;
//   kFairShare dominant resource fairness (Ghodsi et al., NSDI 2011) across
//              tenants: the tenant whose dominant share, divided by its weight, is
//              lowest goes next; FIFO within a tenant.
//
// Thread-safety: a TaskOrder is used by one Schedule call.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "sched/snapshot.h"

namespace meridian::sched {

enum class QueueOrder { kFifo, kPriority, kFairShare };
std::string_view QueueOrderName(QueueOrder order);
std::optional<QueueOrder> ParseQueueOrder(std::string_view name);

// Hands out queue indices in order. For fair share, Placed() must be called with the
// resources each placement took, so that the tenant's share grows.
class TaskOrder {
 public:
  TaskOrder(const Snapshot& snapshot, QueueOrder order);

  // The next queue index, or nullopt when every task was handed out.
  std::optional<size_t> Next();
  void Placed(size_t queue_index, const TenantUsage& taken);

  // The tenant index a task is accounted to (index into the fleet's tenants; the
  // last index stands for tenants the fleet does not list).
  size_t TenantOf(size_t queue_index) const { return tenant_of_[queue_index]; }

 private:
  double DominantShare(size_t tenant) const;

  const Snapshot& snapshot_;
  QueueOrder order_;
  std::vector<size_t> sorted_;  // FIFO / priority
  size_t next_ = 0;
  // Fair share state.
  std::vector<size_t> tenant_of_;
  std::vector<std::vector<size_t>> per_tenant_;  // FIFO within a tenant
  std::vector<size_t> cursor_;
  std::vector<TenantUsage> usage_;
  std::vector<int64_t> weight_;
  TenantUsage capacity_;
};

}  // namespace meridian::sched
