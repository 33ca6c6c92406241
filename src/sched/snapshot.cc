#include "sched/snapshot.h"

#include "common/status.h"

namespace meridian::sched {

ResourceLedger::ResourceLedger(const model::Fleet& fleet) {
  free_.reserve(fleet.nodes.size());
  for (const model::Node& n : fleet.nodes) Add(n);
}

JobState JobState::Submitted(const model::Job& job, int64_t submit_us) {
  JobState js;
  js.job = &job;
  js.submit_us = submit_us;
  if (job.deadline_us) js.deadline_at_us = submit_us + *job.deadline_us;
  js.budget_left_micro_usd = job.budget_micro_usd;
  return js;
}

void ResourceLedger::Take(const Allocation& a) { TakeFrom(free_.at(a.node.value()), a); }
void ResourceLedger::Give(const Allocation& a) { GiveTo(free_.at(a.node.value()), a); }

void ResourceLedger::Add(const model::Node& n) {
  MERIDIAN_CHECK(n.id.value() == free_.size());
  NodeFree& f = free_.emplace_back();
  f.cpu_milli = n.cpu_milli;
  f.memory_bytes = n.memory_bytes;
  f.device_free_milli.assign(n.devices.size(), 1000);
}

void ResourceLedger::TakeFrom(NodeFree& f, const Allocation& a) {
  MERIDIAN_CHECK(f.cpu_milli >= a.cpu_milli && f.memory_bytes >= a.memory_bytes);
  f.cpu_milli -= a.cpu_milli;
  f.memory_bytes -= a.memory_bytes;
  for (int32_t d : a.devices) {
    int32_t& free = f.device_free_milli.at(static_cast<size_t>(d));
    MERIDIAN_CHECK(free >= a.device_share_milli);
    free -= a.device_share_milli;
  }
}

void ResourceLedger::GiveTo(NodeFree& f, const Allocation& a) {
  f.cpu_milli += a.cpu_milli;
  f.memory_bytes += a.memory_bytes;
  for (int32_t d : a.devices) {
    int32_t& free = f.device_free_milli.at(static_cast<size_t>(d));
    free += a.device_share_milli;
    MERIDIAN_CHECK(free <= 1000);
  }
}

}  // namespace meridian::sched
