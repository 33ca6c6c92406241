#include "sched/filters.h"

#include <algorithm>
#include <bit>

#include <fmt/format.h>

#include "common/strings.h"
#include "common/units.h"

namespace meridian::sched {
namespace {

std::string TypeList(const std::vector<std::string>& types) {
  return types.empty() ? std::string("accelerator") : JoinWithOr(types);
}

class HealthFilter final : public Filter {
 public:
  std::string_view name() const override { return "node_health"; }
  UnplacedKind kind() const override { return UnplacedKind::kWaiting; }
  bool Check(const TaskView&, const Pool& p) const override {
    return p.health == model::NodeHealth::kHealthy;
  }
  std::string Explain(const TaskView&, const Pool& p) const override {
    return fmt::format("are {}", model::NodeHealthName(p.health));
  }
};

class DeviceTypeFilter final : public Filter {
 public:
  std::string_view name() const override { return "device_type"; }
  UnplacedKind kind() const override { return UnplacedKind::kInfeasible; }
  bool Check(const TaskView& t, const Pool& p) const override {
    const model::ResourceRequest& r = t.task.resources;
    if (r.device_count == 0) return true;
    if (p.device_count == 0) return false;
    if (r.accelerator_any_of.empty()) return true;
    for (const std::string& type : r.accelerator_any_of) {
      if (type == p.device_type) return true;
    }
    return false;
  }
  std::string Explain(const TaskView& t, const Pool&) const override {
    return fmt::format("have no {}", TypeList(t.task.resources.accelerator_any_of));
  }
};

class DeviceMemoryFilter final : public Filter {
 public:
  std::string_view name() const override { return "device_memory"; }
  UnplacedKind kind() const override { return UnplacedKind::kInfeasible; }
  bool Check(const TaskView& t, const Pool& p) const override {
    const model::ResourceRequest& r = t.task.resources;
    return r.device_count == 0 || p.device_memory_bytes >= r.min_device_memory_bytes;
  }
  std::string Explain(const TaskView& t, const Pool& p) const override {
    return fmt::format("have {} devices with {} each, under the {} asked for", p.device_type,
                       FormatBytes(p.device_memory_bytes),
                       FormatBytes(t.task.resources.min_device_memory_bytes));
  }
};

class DeviceCountFilter final : public Filter {
 public:
  std::string_view name() const override { return "device_count"; }
  UnplacedKind kind() const override { return UnplacedKind::kInfeasible; }
  bool Check(const TaskView& t, const Pool& p) const override {
    return t.task.resources.device_count <= p.device_count;
  }
  std::string Explain(const TaskView& t, const Pool& p) const override {
    return fmt::format("have {} {} devices, fewer than the {} asked for on one node", p.device_count,
                       p.device_type, t.task.resources.device_count);
  }
};

class CpuFilter final : public Filter {
 public:
  std::string_view name() const override { return "cpu"; }
  UnplacedKind kind() const override { return UnplacedKind::kInfeasible; }
  bool Check(const TaskView& t, const Pool& p) const override {
    return t.task.resources.cpu_milli <= p.cpu_milli;
  }
  std::string Explain(const TaskView& t, const Pool& p) const override {
    return fmt::format("have {} CPU cores, fewer than the {} asked for", FormatMilli(p.cpu_milli),
                       FormatMilli(t.task.resources.cpu_milli));
  }
};

class MemoryFilter final : public Filter {
 public:
  std::string_view name() const override { return "memory"; }
  UnplacedKind kind() const override { return UnplacedKind::kInfeasible; }
  bool Check(const TaskView& t, const Pool& p) const override {
    return t.task.resources.memory_bytes <= p.memory_bytes;
  }
  std::string Explain(const TaskView& t, const Pool& p) const override {
    return fmt::format("have {} of memory, less than the {} asked for", FormatBytes(p.memory_bytes),
                       FormatBytes(t.task.resources.memory_bytes));
  }
};

class RegionFilter final : public Filter {
 public:
  std::string_view name() const override { return "allowed_regions"; }
  UnplacedKind kind() const override { return UnplacedKind::kInfeasible; }
  bool Check(const TaskView& t, const Pool& p) const override {
    return t.job.allowed_regions.empty() || model::SiteMatchesAnyRegionRule(t.fleet.site(p.site), t.job.allowed_regions);
  }
  std::string Explain(const TaskView& t, const Pool& p) const override {
    return fmt::format("are at {}, outside the job's allowed regions", t.fleet.site(p.site).name);
  }
};

class LabelFilter final : public Filter {
 public:
  std::string_view name() const override { return "node_labels"; }
  UnplacedKind kind() const override { return UnplacedKind::kInfeasible; }
  bool Check(const TaskView& t, const Pool& p) const override {
    for (const auto& [k, v] : t.task.resources.node_labels) {
      auto it = p.labels.find(k);
      if (it == p.labels.end() || it->second != v) return false;
    }
    return true;
  }
  std::string Explain(const TaskView& t, const Pool& p) const override {
    for (const auto& [k, v] : t.task.resources.node_labels) {
      auto it = p.labels.find(k);
      if (it == p.labels.end()) return fmt::format("have no label {}", k);
      if (it->second != v) return fmt::format("have {}={}, not {}", k, it->second, v);
    }
    return "have the labels asked for";
  }
};

class SpotFilter final : public Filter {
 public:
  std::string_view name() const override { return "spot"; }
  UnplacedKind kind() const override { return UnplacedKind::kInfeasible; }
  bool Check(const TaskView& t, const Pool& p) const override {
    switch (t.task.resources.spot) {
      case model::SpotRule::kNever: return !p.spot;
      case model::SpotRule::kOnly: return p.spot;
      default: return true;
    }
  }
  std::string Explain(const TaskView&, const Pool& p) const override {
    return p.spot ? "are spot nodes, which the task never takes" : "are not spot nodes, and the task takes only those";
  }
};

class ResidencyFilter final : public Filter {
 public:
  std::string_view name() const override { return "data_residency"; }
  UnplacedKind kind() const override { return UnplacedKind::kInfeasible; }
  bool Check(const TaskView& t, const Pool& p) const override { return Violated(t, p) == nullptr; }
  std::string Explain(const TaskView& t, const Pool& p) const override {
    return fmt::format("are at {}, where input '{}' may not be processed (residency)",
                       t.fleet.site(p.site).name, Violated(t, p)->name);
  }

 private:
  static const model::ObjectRef* Violated(const TaskView& t, const Pool& p) {
    const model::Site& site = t.fleet.site(p.site);
    for (const model::ObjectRef& obj : t.pending.inputs) {
      if (!obj.residency.empty() && !model::SiteMatchesAnyRegionRule(site, obj.residency)) return &obj;
    }
    return nullptr;
  }
};

class ThroughputKnownFilter final : public Filter {
 public:
  std::string_view name() const override { return "throughput_known"; }
  UnplacedKind kind() const override { return UnplacedKind::kInfeasible; }
  bool Check(const TaskView& t, const Pool& p) const override {
    return t.compute_us_by_type[p.type_index].has_value();
  }
  std::string Explain(const TaskView& t, const Pool& p) const override {
    std::string_view type = t.task.resources.device_count == 0 ? "CPU" : p.device_type;
    return fmt::format("have {}, for which the throughput table has no '{}' figure", type,
                       t.task.work->kind);
  }
};

class ComputeBoundedFilter final : public Filter {
 public:
  std::string_view name() const override { return "compute_bounded"; }
  UnplacedKind kind() const override { return UnplacedKind::kInfeasible; }
  bool Check(const TaskView& t, const Pool& p) const override {
    const std::optional<int64_t>& us = t.compute_us_by_type[p.type_index];
    return !us || *us <= kMaxComputeUs;
  }
  std::string Explain(const TaskView& t, const Pool& p) const override {
    std::string_view type = t.task.resources.device_count == 0 ? "CPU" : p.device_type;
    return fmt::format("have {}, on which its work ({:g} {}) would take more than 100 years", type,
                       t.task.work ? t.task.work->amount : 0.0, t.task.work ? t.task.work->kind : "");
  }
};

class DataReachableFilter final : public Filter {
 public:
  std::string_view name() const override { return "data_reachable"; }
  UnplacedKind kind() const override { return UnplacedKind::kInfeasible; }
  bool Check(const TaskView& t, const Pool& p) const override {
    return t.inputs_per_site.empty() || t.inputs_per_site[p.site.value()].reachable;
  }
  std::string Explain(const TaskView& t, const Pool& p) const override {
    return fmt::format("are at {}, which no link joins to a replica of input '{}'",
                       t.fleet.site(p.site).name, t.inputs_per_site[p.site.value()].unreachable);
  }
};

std::vector<std::unique_ptr<Filter>> MakeDefaultFilters() {
  std::vector<std::unique_ptr<Filter>> f;
  f.push_back(std::make_unique<DeviceTypeFilter>());
  f.push_back(std::make_unique<DeviceCountFilter>());
  f.push_back(std::make_unique<DeviceMemoryFilter>());
  f.push_back(std::make_unique<CpuFilter>());
  f.push_back(std::make_unique<MemoryFilter>());
  f.push_back(std::make_unique<RegionFilter>());
  f.push_back(std::make_unique<LabelFilter>());
  f.push_back(std::make_unique<SpotFilter>());
  f.push_back(std::make_unique<ResidencyFilter>());
  f.push_back(std::make_unique<ThroughputKnownFilter>());
  f.push_back(std::make_unique<ComputeBoundedFilter>());
  f.push_back(std::make_unique<DataReachableFilter>());
  f.push_back(std::make_unique<HealthFilter>());
  return f;
}

}  // namespace

const std::vector<std::unique_ptr<Filter>>& DefaultFilters() {
  static const auto* filters = new std::vector<std::unique_ptr<Filter>>(MakeDefaultFilters());
  return *filters;
}

const Filter* FindFilter(std::string_view name) {
  for (const auto& f : DefaultFilters()) {
    if (f->name() == name) return f.get();
  }
  return nullptr;
}

int64_t UnusableDeviceMilli(const model::ResourceRequest& shape, const NodeFree& free, std::string_view device_type) {
  int64_t total = 0;
  for (int32_t f : free.device_free_milli) total += f;
  if (total == 0) return 0;
  // A task of the shape cannot go there at all: every free device is lost to it.
  if (free.cpu_milli < shape.cpu_milli || free.memory_bytes < shape.memory_bytes) return total;
  const auto& any = shape.accelerator_any_of;
  if (shape.device_count > 0 && !any.empty() && std::find(any.begin(), any.end(), device_type) == any.end()) {
    return total;
  }
  if (shape.device_count == 0) return 0;  // it fits and needs no device
  const int32_t need = std::min<int32_t>(shape.device_share_milli, kMilliPerUnit);
  int32_t usable = 0;
  int64_t unusable = 0;
  for (int32_t f : free.device_free_milli) {
    if (f >= need) {
      ++usable;
    } else {
      unusable += f;
    }
  }
  return usable < shape.device_count ? total : unusable;
}

std::string FilterKey(const model::Job& job, const model::Task& task) {
  const model::ResourceRequest& r = task.resources;
  std::string key;
  key.reserve(64);
  auto add_int = [&](int64_t v) { key.append(reinterpret_cast<const char*>(&v), sizeof v); };
  auto add_str = [&](std::string_view text) {  // length first: no separator can be forged
    add_int(static_cast<int64_t>(text.size()));
    key.append(text);
  };
  add_int(static_cast<int64_t>(job.allowed_regions.size()));
  for (const std::string& region : job.allowed_regions) add_str(region);
  add_int(static_cast<int64_t>(r.accelerator_any_of.size()));
  for (const std::string& type : r.accelerator_any_of) add_str(type);
  add_int(r.device_count);
  add_int(r.device_share_milli);
  add_int(r.min_device_memory_bytes);
  add_int(r.cpu_milli);
  add_int(r.memory_bytes);
  add_int(static_cast<int64_t>(r.node_labels.size()));
  for (const auto& [k, v] : r.node_labels) {
    add_str(k);
    add_str(v);
  }
  add_int(static_cast<int64_t>(r.spot));
  add_str(task.work ? std::string_view(task.work->kind) : std::string_view());
  add_int(std::bit_cast<int64_t>(task.work ? task.work->amount : 0.0));
  return key;
}

bool FitsNow(const model::ResourceRequest& req, const NodeFree& free, std::vector<int32_t>* devices) {
  if (free.cpu_milli < req.cpu_milli || free.memory_bytes < req.memory_bytes) return false;
  devices->clear();
  if (req.device_count == 0) return true;
  const int32_t share = req.device_share_milli;
  if (share >= kMilliPerUnit) {
    for (size_t d = 0; d < free.device_free_milli.size(); ++d) {
      if (free.device_free_milli[d] >= kMilliPerUnit) {
        devices->push_back(static_cast<int32_t>(d));
        if (static_cast<int32_t>(devices->size()) == req.device_count) return true;
      }
    }
    return false;
  }
  // Fractional: best fit, the fullest devices that still have room, so that whole
  // devices stay whole for tasks that need them.
  for (int32_t k = 0; k < req.device_count; ++k) {
    int32_t best = -1;
    for (size_t d = 0; d < free.device_free_milli.size(); ++d) {
      int32_t f = free.device_free_milli[d];
      if (f < share) continue;
      bool taken = false;
      for (int32_t c : *devices) taken |= (c == static_cast<int32_t>(d));
      if (taken) continue;
      if (best < 0 || f < free.device_free_milli[static_cast<size_t>(best)]) best = static_cast<int32_t>(d);
    }
    if (best < 0) return false;
    devices->push_back(best);
  }
  return true;
}

std::string_view ShortResource(const model::ResourceRequest& req, const NodeFree& free) {
  if (free.cpu_milli < req.cpu_milli) return "free CPU";
  if (free.memory_bytes < req.memory_bytes) return "free memory";
  return "free devices";
}

}  // namespace meridian::sched
