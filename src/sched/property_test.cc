// Properties over random fleets and workloads. Each run prints its seed on
// failure; reproduce with MERIDIAN_SEED=N.
#include <cstdlib>
#include <map>
#include <set>

#include <gtest/gtest.h>

#include "model/accelerators.h"
#include "sched/schedule.h"
#include "sched/sched_test_util.h"

namespace meridian::sched {
namespace {

const char* kTypes[] = {"A100", "T4", "H100", "L4"};

struct World {
  model::Fleet fleet;
  model::ThroughputTable tt;
  model::Job job;
};

World RandomWorld(Random& rng) {
  World w;
  testing::FleetBuilder b;
  int n_sites = static_cast<int>(rng.UniformRange(1, 4));
  for (int s = 0; s < n_sites; ++s) b.Site("s" + std::to_string(s), "r" + std::to_string(s));
  for (int s = 1; s < n_sites; ++s) {
    if (rng.Bernoulli(0.8)) b.Link(SiteId(0), SiteId(s), rng.UniformRange(1, 100) * 1000, kGbps, 10'000);
  }
  int groups = static_cast<int>(rng.UniformRange(1, 6));
  for (int g = 0; g < groups; ++g) {
    bool cpu_only = rng.Bernoulli(0.2);
    b.Nodes(SiteId(static_cast<uint32_t>(rng.Uniform(n_sites))), cpu_only ? "" : kTypes[rng.Uniform(4)],
            static_cast<int>(rng.UniformRange(1, 6)), static_cast<int>(rng.UniformRange(1, 8)),
            rng.UniformRange(0, 40) * 1'000'000, rng.UniformRange(4, 64) * 1000,
            rng.UniformRange(16, 512) * kGiB);
  }
  w.fleet = b.Build();
  for (model::Node& n : w.fleet.nodes) {
    if (rng.Bernoulli(0.05)) n.health = model::NodeHealth::kUnhealthy;
  }
  for (const char* t : kTypes) w.tt.Set(t, "work", static_cast<double>(rng.UniformRange(10, 1000)));
  w.tt.Set("CPU", "work", 1);
  std::vector<model::Task> tasks;
  int n_tasks = static_cast<int>(rng.UniformRange(1, 80));
  for (int i = 0; i < n_tasks; ++i) {
    model::Task t;
    if (rng.Bernoulli(0.2)) {
      t = testing::CpuTask("", rng.UniformRange(1, 80) * 1000);
    } else {
      std::vector<std::string> types;
      for (const char* ty : kTypes) if (rng.Bernoulli(0.4)) types.push_back(ty);
      int32_t count = static_cast<int32_t>(rng.Bernoulli(0.7) ? 1 : rng.UniformRange(1, 10));
      int32_t share = rng.Bernoulli(0.3) && count == 1 ? static_cast<int32_t>(rng.UniformRange(1, 9) * 100) : 1000;
      t = testing::GpuTask("", types, count, share);
      t.resources.cpu_milli = rng.UniformRange(1, 16) * 1000;
    }
    t.resources.memory_bytes = rng.UniformRange(1, 64) * kGiB;
    if (rng.Bernoulli(0.3)) t.work = model::WorkAmount{"work", static_cast<double>(rng.UniformRange(1, 10000))};
    if (rng.Bernoulli(0.3)) {
      t.inputs.push_back(model::ObjectRef{"in" + std::to_string(i), rng.UniformRange(1, 20) * kGiB,
                                          {SiteId(static_cast<uint32_t>(rng.Uniform(n_sites)))}, {}});
    }
    if (rng.Bernoulli(0.15)) t.gang = "g" + std::to_string(rng.Uniform(3));
    tasks.push_back(std::move(t));
  }
  w.job = testing::MakeJob("j", tasks);
  w.job.objective = static_cast<model::Objective>(rng.Uniform(3));
  return w;
}

uint64_t BaseSeed() {
  const char* s = std::getenv("MERIDIAN_SEED");
  return s ? std::strtoull(s, nullptr, 10) : 20261130;
}

// Whether `task` alone could run on the whole, idle fleet.
bool PlaceableAlone(const World& w, const model::Task& task) {
  model::Task alone = task;
  alone.gang.clear();
  alone.id = TaskId(0);
  model::Job job = w.job;
  job.tasks = {alone};
  Snapshot s = testing::MakeSnapshot(w.fleet, w.tt, {&job});
  Random rng(1);
  return !Schedule(s, Policy{}, rng).placements.empty();
}

TEST(SchedulePropertyTest, NeverOvercommitsGangsAreWholeInfeasibleIsNeverWaiting) {
  const uint64_t base = BaseSeed();
  for (uint64_t i = 0; i < 300; ++i) {
    const uint64_t seed = base + i;
    SCOPED_TRACE("reproduce with MERIDIAN_SEED=" + std::to_string(seed));
    Random rng(seed);
    World w = RandomWorld(rng);
    Snapshot s = testing::MakeSnapshot(w.fleet, w.tt, {&w.job});
    QueueOrder order = static_cast<QueueOrder>(rng.Uniform(3));
    Random sched_rng(seed);
    Plan plan = Schedule(s, Policy::WithOrder(order), sched_rng);

    // Every task is answered exactly once.
    std::set<uint32_t> seen;
    for (const Placement& p : plan.placements) ASSERT_TRUE(seen.insert(p.task.value()).second);
    for (const Unplaced& u : plan.unplaced) ASSERT_TRUE(seen.insert(u.task.value()).second);
    ASSERT_EQ(seen.size(), w.job.tasks.size());

    // No node gives out more than it has.
    ResourceLedger ledger(w.fleet);
    for (const Placement& p : plan.placements) {
      const NodeFree& f = ledger.free(p.allocation.node);
      ASSERT_GE(f.cpu_milli, p.allocation.cpu_milli);
      ASSERT_GE(f.memory_bytes, p.allocation.memory_bytes);
      for (int32_t d : p.allocation.devices) ASSERT_GE(f.device_free_milli[d], p.allocation.device_share_milli);
      ASSERT_EQ(static_cast<int32_t>(p.allocation.devices.size()), w.job.tasks[p.task.value()].resources.device_count);
      const model::Node& node = w.fleet.node(p.allocation.node);
      ASSERT_EQ(node.health, model::NodeHealth::kHealthy);
      ledger.Take(p.allocation);
    }

    // Gangs: all members placed or none.
    std::map<std::string, std::pair<int, int>> gangs;  // placed, total
    for (const model::Task& t : w.job.tasks) if (!t.gang.empty()) ++gangs[t.gang].second;
    for (const Placement& p : plan.placements) {
      const std::string& g = w.job.tasks[p.task.value()].gang;
      if (!g.empty()) ++gangs[g].first;
    }
    for (const auto& [g, n] : gangs) ASSERT_TRUE(n.first == 0 || n.first == n.second) << "gang " << g;

    // Infeasible means no idle fleet could run the task; waiting means one could.
    for (const Unplaced& u : plan.unplaced) {
      const model::Task& t = w.job.tasks[u.task.value()];
      if (!t.gang.empty()) continue;
      bool alone = PlaceableAlone(w, t);
      bool any_unhealthy = false;
      for (const model::Node& n : w.fleet.nodes) any_unhealthy |= n.health != model::NodeHealth::kHealthy;
      if (u.kind == UnplacedKind::kInfeasible) {
        ASSERT_FALSE(alone) << t.name << ": " << u.reason;
      } else if (!any_unhealthy) {
        ASSERT_TRUE(alone) << t.name << " reported waiting: " << u.reason;
      }
    }
  }
}

}  // namespace
}  // namespace meridian::sched
