#include "sched/backlog.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "common/status.h"
#include "sched/filters.h"

namespace meridian::sched {

int64_t Backlog::FitCount(const model::ResourceRequest& r, const NodeFree& free) {
  int64_t n = std::numeric_limits<int64_t>::max();
  if (r.cpu_milli > 0) n = std::min(n, free.cpu_milli / r.cpu_milli);
  if (r.memory_bytes > 0) n = std::min(n, free.memory_bytes / r.memory_bytes);
  if (r.device_count > 0 && r.device_share_milli > 0) {
    int64_t units = 0;
    for (int32_t f : free.device_free_milli) units += f / r.device_share_milli;
    n = std::min(n, units / r.device_count);
  }
  return std::max<int64_t>(n, 0);
}

uint32_t Backlog::ClassFor(std::string key, const model::ResourceRequest& request) {
  auto it = by_key_.find(key);
  if (it != by_key_.end()) return it->second;
  uint32_t id;
  if (!free_classes_.empty()) {
    id = free_classes_.back();
    free_classes_.pop_back();
  } else {
    id = static_cast<uint32_t>(classes_.size());
    classes_.emplace_back();
    listed_.push_back(false);
  }
  Class& c = classes_[id];
  c.key = key;
  c.request = request;
  c.members = 0;
  by_key_.emplace(std::move(key), id);
  return id;
}

void Backlog::Add(Handle h, int64_t seq, const model::Job& job, const model::Task& task, bool has_inputs) {
  if (h >= entries_.size()) entries_.resize(static_cast<size_t>(h) + 1);
  Entry& e = entries_[h];
  MERIDIAN_CHECK_MSG(!e.present, "a backlog handle added twice");
  const model::ResourceRequest& r = task.resources;
  // What the filters read of a task without inputs (the scheduler's task class,
  // less what only orders candidates); a task with inputs is a class of its own.
  std::string key =
      has_inputs
          ? fmt::format("#{}", seq)
          : fmt::format("{}|{}|{}|{}|{}|{}|{}|{}|{}|{}", job.tenant, fmt::join(job.allowed_regions, ","),
                        fmt::join(r.accelerator_any_of, ","), r.device_count, r.device_share_milli,
                        r.min_device_memory_bytes, r.cpu_milli, r.memory_bytes,
                        task.work ? task.work->kind : std::string(), task.work ? task.work->amount : 0.0);
  e.cls = ClassFor(std::move(key), r);
  e.seq = seq;
  e.present = true;
  e.parked = false;
  e.back_in_round = UINT64_MAX;
  ++classes_[e.cls].members;
  active_.emplace(seq, h);
  ++size_;
}

void Backlog::Remove(Handle h) {
  if (!Contains(h)) return;
  Entry& e = entries_[h];
  Class& c = classes_[e.cls];
  if (e.parked) {
    c.parked.erase({e.seq, h});
  } else {
    active_.erase({e.seq, h});
  }
  e.present = false;
  --size_;
  if (--c.members == 0) {
    by_key_.erase(c.key);
    c.key.clear();
    free_classes_.push_back(e.cls);
  }
}

void Backlog::Park(Handle h) {
  if (!Contains(h) || entries_[h].parked) return;
  Entry& e = entries_[h];
  active_.erase({e.seq, h});
  e.parked = true;
  classes_[e.cls].parked.emplace(e.seq, h);
  if (!listed_[e.cls]) {
    listed_[e.cls] = true;
    parked_classes_.push_back(e.cls);
  }
}

void Backlog::Unpark(Class& c, int64_t count) {
  while (count-- > 0 && !c.parked.empty()) {
    auto [seq, h] = *c.parked.begin();
    c.parked.erase(c.parked.begin());
    entries_[h].parked = false;
    entries_[h].back_in_round = round_;
    active_.emplace(seq, h);
  }
}

void Backlog::Released(const NodeFree& free) {
  std::vector<int32_t> devices;
  size_t out = 0;
  for (uint32_t id : parked_classes_) {
    Class& c = classes_[id];
    if (!c.parked.empty() && FitsNow(c.request, free, &devices)) Unpark(c, std::max<int64_t>(1, FitCount(c.request, free)));
    if (c.parked.empty()) {
      listed_[id] = false;
    } else {
      parked_classes_[out++] = id;
    }
  }
  parked_classes_.resize(out);
}

void Backlog::UnparkAll() {
  for (uint32_t id : parked_classes_) {
    Unpark(classes_[id], std::numeric_limits<int64_t>::max());
    listed_[id] = false;
  }
  parked_classes_.clear();
}

}  // namespace meridian::sched
