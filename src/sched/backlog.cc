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
  }
  Class& c = classes_[id];
  c.key = key;
  c.request = request;
  c.members = 0;
  c.full_through = UINT64_MAX;  // the in_*_list flags stay: the lists drop stale ids
  by_key_.emplace(std::move(key), id);
  return id;
}

void Backlog::Add(Handle h, int64_t submit_us, int64_t seq, const model::Job& job, const model::Task& task,
                  bool has_inputs) {
  if (h >= entries_.size()) entries_.resize(static_cast<size_t>(h) + 1);
  Entry& e = entries_[h];
  MERIDIAN_CHECK_MSG(!e.present, "a backlog handle added twice");
  const model::ResourceRequest& r = task.resources;
  // What the filters read of a task without inputs, and whose and how urgent it
  // is; a task with inputs is a class of its own.
  std::string key;
  if (has_inputs) {
    key = fmt::format("#{}", seq);
  } else {
    key = FilterKey(job, task);
    key += fmt::format("|{}|{}", job.priority, job.tenant);
  }
  e.cls = ClassFor(std::move(key), r);
  e.submit_us = submit_us;
  e.seq = seq;
  e.present = true;
  e.parked = false;
  e.parked_in_round = UINT64_MAX;
  ++classes_[e.cls].members;
  active_.emplace(submit_us, seq, h);
  ++size_;
}

void Backlog::Remove(Handle h) {
  if (!Contains(h)) return;
  Entry& e = entries_[h];
  Class& c = classes_[e.cls];
  if (e.parked) {
    c.parked.erase(Key{e.submit_us, e.seq, h});
  } else {
    active_.erase(Key{e.submit_us, e.seq, h});
  }
  e.present = false;
  --size_;
  if (--c.members == 0) {
    by_key_.erase(c.key);
    c.key.clear();
    c.back = 0;  // it may stay in back_classes_ until EndRound
    free_classes_.push_back(e.cls);
  }
}

void Backlog::Park(Handle h) {
  if (!Contains(h)) return;
  Entry& e = entries_[h];
  e.parked_in_round = round_;
  Class& c = classes_[e.cls];
  c.full_through = round_;
  if (!c.in_full_list) {
    c.in_full_list = true;
    full_classes_.push_back(e.cls);
  }
  if (e.parked) return;  // came back this round, parked again: it stays where it is
  active_.erase(Key{e.submit_us, e.seq, h});
  e.parked = true;
  c.parked.emplace(e.submit_us, e.seq, h);
  if (!c.in_parked_list) {
    c.in_parked_list = true;
    parked_classes_.push_back(e.cls);
  }
}

void Backlog::MakeActive(Handle h) {
  Entry& e = entries_[h];
  classes_[e.cls].parked.erase(Key{e.submit_us, e.seq, h});
  e.parked = false;
  active_.emplace(e.submit_us, e.seq, h);
}

void Backlog::Released(const NodeFree& free) {
  MERIDIAN_CHECK_MSG(!in_round_, "Backlog::Released during a round: what comes back would be lost at EndRound");
  std::vector<int32_t> devices;
  size_t out = 0;
  for (uint32_t id : parked_classes_) {
    Class& c = classes_[id];
    if (!c.parked.empty() && FitsNow(c.request, free, &devices)) {
      if (!c.in_back_list) {
        c.in_back_list = true;
        back_classes_.push_back(id);
      }
      const int64_t fit = std::max<int64_t>(1, FitCount(c.request, free));
      c.back = c.back > std::numeric_limits<int64_t>::max() - fit ? std::numeric_limits<int64_t>::max() : c.back + fit;
    }
    if (c.parked.empty()) {
      c.in_parked_list = false;
    } else {
      parked_classes_[out++] = id;
    }
  }
  parked_classes_.resize(out);
}

void Backlog::Gather() {
  offer_.clear();
  for (const auto& [submit_us, seq, h] : active_) {
    const uint32_t cls = entries_[h].cls;
    const bool full = round_ > 0 && classes_[cls].full_through == round_ - 1;
    offer_.push_back(Offered{submit_us, seq, h, full, false, cls});
  }
  const size_t active = offer_.size();
  for (uint32_t id : back_classes_) {
    const Class& c = classes_[id];
    int64_t n = c.back;
    for (auto it = c.parked.begin(); it != c.parked.end() && n-- > 0; ++it) {
      offer_.push_back(Offered{std::get<0>(*it), std::get<1>(*it), std::get<2>(*it), true, true, id});
    }
  }
  if (offer_.size() > active) {
    std::sort(offer_.begin(), offer_.end(), [](const Offered& a, const Offered& b) {
      return std::tie(a.submit_us, a.seq) < std::tie(b.submit_us, b.seq);
    });
  }
}

void Backlog::EndRound() {
  for (const Offered& o : offer_) {
    if (!o.came_back || !Contains(o.handle)) continue;
    const Entry& e = entries_[o.handle];
    if (e.parked && e.parked_in_round != round_) MakeActive(o.handle);
  }
  // Full classes carry over to the next round unless a node grew to fit them.
  size_t out = 0;
  for (uint32_t id : full_classes_) {
    Class& c = classes_[id];
    if (c.full_through == round_ || (round_ > 0 && c.full_through == round_ - 1 && !c.in_back_list)) {
      c.full_through = round_;
      full_classes_[out++] = id;
    } else {
      c.in_full_list = false;
    }
  }
  full_classes_.resize(out);
  for (uint32_t id : back_classes_) {
    classes_[id].back = 0;
    classes_[id].in_back_list = false;
  }
  back_classes_.clear();
  offer_.clear();
  ++round_;
  in_round_ = false;
}

void Backlog::UnparkAll() {
  for (uint32_t id : parked_classes_) {
    Class& c = classes_[id];
    while (!c.parked.empty()) MakeActive(std::get<2>(*c.parked.begin()));
    c.in_parked_list = false;
  }
  parked_classes_.clear();
}

}  // namespace meridian::sched
