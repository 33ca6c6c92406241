// The scheduler's output: where each task goes, what it is expected to cost and
// when it is expected to finish, or why it was not placed.
//
// Thread-safety: value types.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/ids.h"
#include "sched/snapshot.h"

namespace meridian::sched {

// One input pulled over a link.
struct Transfer {
  std::string object;
  SiteId from;
  SiteId to;
  int64_t bytes = 0;
  int64_t time_us = 0;
  int64_t cost_micro_usd = 0;
};

struct Placement {
  size_t queue_index = 0;       // into Snapshot::queue
  uint32_t job = 0;
  TaskId task;
  Allocation allocation;
  SiteId site;
  std::string device_type;      // "CPU" for CPU-only tasks
  int64_t start_us = 0;
  int64_t transfer_us = 0;      // staging the inputs
  int64_t compute_us = 0;
  int64_t finish_us = 0;
  int64_t compute_cost_micro_usd = 0;
  int64_t egress_cost_micro_usd = 0;
  std::vector<Transfer> transfers;

  int64_t cost_micro_usd() const { return compute_cost_micro_usd + egress_cost_micro_usd; }
};

// Why a task was not placed. kInfeasible: no node of the fleet could ever run it as
// asked (wrong types everywhere, too big, over budget, past the deadline).
// kWaiting: it could run, but not now (resources busy, quota in use, nodes unhealthy).
enum class UnplacedKind { kWaiting, kInfeasible };
std::string_view UnplacedKindName(UnplacedKind kind);

struct Unplaced {
  size_t queue_index = 0;
  uint32_t job = 0;
  TaskId task;
  UnplacedKind kind = UnplacedKind::kWaiting;
  // Empty for a task waiting for room when the policy does not explain waiting
  // (Policy::explain_waiting); a quota in use is always named.
  std::string reason;
  // kWaiting for room alone: no node of any pool that passes its filters had room
  // for it, and nothing that can change without room changing (a quota, a budget,
  // a deadline, a better pool freeing soon) stood in its way. It cannot be placed
  // before some node's free resources grow to fit its request (a task ending, a
  // node joining or recovering), so the caller may park it until then (Backlog).
  // Never set for gang members.
  bool needs_room = false;
};

struct Plan {
  std::vector<Placement> placements;
  std::vector<Unplaced> unplaced;
};

}  // namespace meridian::sched
