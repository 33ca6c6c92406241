// Filter plugins: each checks one reason a task cannot run on a pool's nodes,
// says whether that reason is permanent (kInfeasible) or may pass (kWaiting), and
// explains itself in words when asked. Check is the hot path and allocates nothing;
// Explain runs only for tasks that end up unplaced.
//
// Static filters look at what nodes of a pool share (capacity, type, site, health);
// free resources are checked per node by FitsNow.
//
// Thread-safety: plugins are stateless and may be shared.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "model/fleet.h"
#include "model/throughput.h"
#include "model/work.h"
#include "sched/estimate.h"
#include "sched/plan.h"
#include "sched/pool.h"
#include "sched/snapshot.h"

namespace meridian::sched {

// Everything a filter may look at for one task.
struct TaskView {
  const model::Fleet& fleet;
  const model::ThroughputTable& throughput;
  const model::Job& job;
  const model::Task& task;
  const PendingTask& pending;
  const std::vector<SiteInputs>& inputs_per_site;  // by SiteId; empty without inputs
  const std::vector<std::optional<int64_t>>& compute_us_by_type;  // by Pool::type_index
};

class Filter {
 public:
  virtual ~Filter() = default;
  virtual std::string_view name() const = 0;
  virtual UnplacedKind kind() const = 0;
  // true: the pool's nodes may run the task as far as this filter knows.
  virtual bool Check(const TaskView& t, const Pool& pool) const = 0;
  // Why Check failed, as a phrase completing "N nodes ...": "have no A100 or T4".
  virtual std::string Explain(const TaskView& t, const Pool& pool) const = 0;
};

// The default pipeline, in the order they run (cheapest and most selective first).
const std::vector<std::unique_ptr<Filter>>& DefaultFilters();

// Looks up a filter of the default pipeline by name ("device_type", ...).
const Filter* FindFilter(std::string_view name);

// What the filters read of a task without inputs, as a key: tasks with equal keys
// get the same verdict from every pool (allowed regions, the resource request, the
// work kind and amount).
std::string FilterKey(const model::Job& job, const model::Task& task);

// Whether one node's free resources fit the request now; on success fills the
// devices chosen (best fit for fractional shares, to keep whole devices whole).
bool FitsNow(const model::ResourceRequest& req, const NodeFree& free, std::vector<int32_t>* devices);

// Device capacity (milli) free on a node with devices of `device_type` that a task
// of `shape` could not use: the fragmentation measure of Weng et al. ("Beware of
// Fragmentation", ATC 2023, FGD) per request shape. All of it when such a task
// cannot go there at all (too little free CPU or memory, or a device type it does
// not accept); none for a task that needs no device and fits; else, for
// whole-device shapes, what is free on partly used devices, and for fractional
// ones, what is free on devices with less room than the share.
int64_t UnusableDeviceMilli(const model::ResourceRequest& shape, const NodeFree& free, std::string_view device_type);

// Which free resource is short on a node that does not fit: "free CPU",
// "free memory", "free devices".
std::string_view ShortResource(const model::ResourceRequest& req, const NodeFree& free);

}  // namespace meridian::sched
