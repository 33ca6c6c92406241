#include "sched/sched_test_util.h"

#include "model/accelerators.h"

namespace meridian::sched::testing {

SiteId FleetBuilder::Site(const std::string& name, const std::string& region,
                          int64_t egress_micro_usd_per_gb) {
  SiteId id(static_cast<uint32_t>(fleet_.sites.size()));
  fleet_.sites.push_back(model::Site{id, name, model::SiteKind::kCloud, "test",
                                     region.empty() ? name : region, egress_micro_usd_per_gb});
  return id;
}

void FleetBuilder::Link(SiteId a, SiteId b, int64_t rtt_us, int64_t bps, int64_t egress) {
  fleet_.links.push_back(model::Link{a, b, rtt_us, bps, egress, egress});
}

void FleetBuilder::Nodes(SiteId site, const std::string& type, int count, int devices,
                         int64_t price, int64_t cpu_milli, int64_t memory_bytes) {
  for (int i = 0; i < count; ++i) {
    model::Node n;
    n.id = NodeId(static_cast<uint32_t>(fleet_.nodes.size()));
    n.name = fleet_.sites[site.value()].name + "-" + (type.empty() ? "cpu" : type) + "-" +
             std::to_string(n.id.value());
    n.site = site;
    n.group = type;
    n.cpu_milli = cpu_milli;
    n.memory_bytes = memory_bytes;
    n.price_micro_usd_per_hour = price;
    for (int d = 0; d < devices && !type.empty(); ++d) {
      n.devices.push_back(model::Device{type, d, model::FindAcceleratorType(type)->default_memory_bytes,
                                        false, 1.0});
    }
    fleet_.nodes.push_back(std::move(n));
  }
}

model::Task GpuTask(const std::string& name, std::vector<std::string> any_of, int32_t count,
                    int32_t share_milli) {
  model::Task t;
  t.name = name;
  t.kernel = "noop";
  t.duration_us = kMinuteUs;
  t.resources.accelerator_any_of = std::move(any_of);
  t.resources.device_count = count;
  t.resources.device_share_milli = share_milli;
  t.resources.cpu_milli = 1000;
  t.resources.memory_bytes = kGiB;
  return t;
}

model::Task CpuTask(const std::string& name, int64_t cpu_milli) {
  model::Task t;
  t.name = name;
  t.kernel = "noop";
  t.duration_us = kMinuteUs;
  t.resources.cpu_milli = cpu_milli;
  t.resources.memory_bytes = kGiB;
  return t;
}

model::Job MakeJob(const std::string& name, std::vector<model::Task> tasks) {
  model::Job job;
  job.name = name;
  for (size_t i = 0; i < tasks.size(); ++i) {
    tasks[i].id = TaskId(static_cast<uint32_t>(i));
    if (tasks[i].name.empty()) tasks[i].name = "t" + std::to_string(i);
  }
  job.tasks = std::move(tasks);
  return job;
}

Snapshot MakeSnapshot(const model::Fleet& fleet, const model::ThroughputTable& throughput,
                      const std::vector<const model::Job*>& jobs) {
  Snapshot s;
  s.fleet = &fleet;
  s.throughput = &throughput;
  s.free = ResourceLedger(fleet);
  int64_t seq = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    // Submitted in order at time 0; the sequence numbers keep FIFO order.
    JobState js = JobState::Submitted(*jobs[j], 0);
    js.submit_us = static_cast<int64_t>(j);
    s.jobs.push_back(js);
    for (const model::Task& t : jobs[j]->tasks) {
      s.queue.push_back(PendingTask{static_cast<uint32_t>(j), t.id, t.inputs, seq++});
    }
  }
  return s;
}

}  // namespace meridian::sched::testing
