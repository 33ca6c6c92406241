// Pool and node choices: the baselines the simulator compares (first fit, best fit,
// random, heterogeneity-agnostic, cheapest price) and the fragmentation-aware
// packing, each pinned on a fleet small enough to work out by hand.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "sched/filters.h"
#include "sched/schedule.h"
#include "sched/sched_test_util.h"

namespace meridian::sched {
namespace {

Policy With(NodeChoice nodes, PoolChoice pools = PoolChoice::kScored) {
  Policy p;
  p.nodes = nodes;
  p.pools = pools;
  return p;
}

// Two nodes of four GPUs; node 1 already runs half a GPU and one whole GPU.
class NodeChoiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::FleetBuilder b;
    SiteId s = b.Site("dc");
    b.Nodes(s, "T4", 2, 4, 1'000'000);
    fleet_ = b.Build();
  }

  Snapshot Busy(const std::vector<const model::Job*>& jobs) {
    Snapshot snap = testing::MakeSnapshot(fleet_, tt_, jobs);
    snap.free.Take(Allocation{NodeId(1), 1000, 0, {0}, 500});
    snap.free.Take(Allocation{NodeId(1), 1000, 0, {1}, 1000});
    return snap;
  }

  NodeId PlaceOne(const model::Task& task, const Policy& policy, uint64_t seed = 1) {
    model::Job job = testing::MakeJob("j", {task});
    Snapshot snap = Busy({&job});
    Random rng(seed);
    Plan plan = Schedule(snap, policy, rng);
    EXPECT_EQ(plan.placements.size(), 1u);
    return plan.placements.empty() ? NodeId(99) : plan.placements[0].allocation.node;
  }

  model::Fleet fleet_;
  model::ThroughputTable tt_;
};

TEST_F(NodeChoiceTest, FirstFitTakesTheFirstNodeWithRoom) {
  EXPECT_EQ(PlaceOne(testing::GpuTask("t", {"T4"}), With(NodeChoice::kFirstFit)), NodeId(0));
}

TEST_F(NodeChoiceTest, BestFitTakesTheFullestNodeWithRoom) {
  EXPECT_EQ(PlaceOne(testing::GpuTask("t", {"T4"}), With(NodeChoice::kBestFit)), NodeId(1));
}

TEST_F(NodeChoiceTest, BestFitPutsAFractionOnThePartlyUsedDevice) {
  model::Job job = testing::MakeJob("j", {testing::GpuTask("t", {"T4"}, 1, 400)});
  Snapshot snap = Busy({&job});
  Random rng(1);
  Plan plan = Schedule(snap, With(NodeChoice::kBestFit), rng);
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].allocation.node, NodeId(1));
  EXPECT_EQ(plan.placements[0].allocation.devices, std::vector<int32_t>{0});
}

TEST_F(NodeChoiceTest, RandomSpreadsOverEveryNodeWithRoomAndRepeatsForASeed) {
  std::set<uint32_t> seen;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    NodeId a = PlaceOne(testing::GpuTask("t", {"T4"}), With(NodeChoice::kRandom, PoolChoice::kAnyPool), seed);
    NodeId b = PlaceOne(testing::GpuTask("t", {"T4"}), With(NodeChoice::kRandom, PoolChoice::kAnyPool), seed);
    EXPECT_EQ(a, b) << "seed " << seed;
    seen.insert(a.value());
  }
  EXPECT_EQ(seen, (std::set<uint32_t>{0, 1}));
}

TEST(UnusableDeviceMilliTest, CountsWhatAShapeCannotUse) {
  model::ResourceRequest whole;  // one whole GPU, one core
  whole.device_count = 1;
  model::ResourceRequest half = whole;
  half.device_share_milli = 500;
  model::ResourceRequest two = whole;
  two.device_count = 2;
  NodeFree f{4000, 0, {1000, 300, 600, 0}};
  EXPECT_EQ(UnusableDeviceMilli(whole, f, "T4"), 900);   // the partly used ones
  EXPECT_EQ(UnusableDeviceMilli(half, f, "T4"), 300);    // only the 300 is too small
  EXPECT_EQ(UnusableDeviceMilli(two, f, "T4"), 1900);    // two whole ones are not there
  NodeFree no_cpu{0, 0, {1000, 1000}};
  EXPECT_EQ(UnusableDeviceMilli(whole, no_cpu, "T4"), 2000);
  EXPECT_EQ(UnusableDeviceMilli(whole, NodeFree{4000, 0, {0, 0}}, "T4"), 0);
  // FGD: a type the shape does not accept loses it every free device; a shape that
  // needs no device loses none where its CPU fits, and all where it does not.
  model::ResourceRequest a100 = whole;
  a100.accelerator_any_of = {"A100"};
  EXPECT_EQ(UnusableDeviceMilli(a100, f, "T4"), 1900);
  EXPECT_EQ(UnusableDeviceMilli(a100, f, "A100"), 900);
  model::ResourceRequest cpu_only;
  cpu_only.device_count = 0;
  cpu_only.cpu_milli = 2000;
  EXPECT_EQ(UnusableDeviceMilli(cpu_only, f, "T4"), 0);
  EXPECT_EQ(UnusableDeviceMilli(cpu_only, NodeFree{1000, 0, {1000, 300}}, "T4"), 1300);
}

TEST(WorkloadTest, FgdTypicalTasksByCpuDevicesShareAndTypeWeightedByFrequency) {
  model::ResourceRequest a = testing::GpuTask("", {"T4"}, 1, 500).resources;
  model::ResourceRequest b = a;
  b.memory_bytes = 64 * kGiB;  // memory is not part of the key
  model::ResourceRequest c = testing::GpuTask("", {"A100"}, 1, 500).resources;
  model::ResourceRequest cpu = testing::CpuTask("", 4000).resources;
  std::vector<WorkloadShape> w = FgdWorkload({&a, &b, &c, &cpu, &cpu, &cpu});
  ASSERT_EQ(w.size(), 3u);
  std::map<std::string, double> weight;
  for (const WorkloadShape& s : w) {
    const std::string key = s.request.device_count == 0 ? "cpu" : s.request.accelerator_any_of.at(0);
    weight[key] = s.weight;
    EXPECT_EQ(s.request.memory_bytes, 0);
  }
  EXPECT_EQ(weight, (std::map<std::string, double>{{"A100", 1}, {"T4", 2}, {"cpu", 3}}));
}

// FGD places tasks that need no device by fragmentation too: on a node where its
// CPU would leave the free GPU to no GPU task, it is a poor fit.
TEST(FragmentationTest, ACpuTaskAvoidsStrandingAFreeGpu) {
  testing::FleetBuilder b;
  SiteId s = b.Site("dc");
  b.Nodes(s, "T4", 2, 1, 1'000'000, /*cpu_milli=*/8000);
  model::Fleet fleet = b.Build();
  model::ThroughputTable tt;
  model::Job job = testing::MakeJob("j", {testing::CpuTask("c", 4000)});
  Snapshot snap = testing::MakeSnapshot(fleet, tt, {&job});
  // Node 0: 4 cores and its GPU free; node 1: 8 cores and its GPU free.
  snap.free.Take(Allocation{NodeId(0), 4000, 0, {}, 0});
  Policy p = With(NodeChoice::kLeastFragmentation);
  model::ResourceRequest gpu_shape = testing::GpuTask("", {"T4"}, 1, 1000).resources;
  gpu_shape.cpu_milli = 2000;
  p.workload = {WorkloadShape{gpu_shape, 1}};
  Random rng(1);
  Plan plan = Schedule(snap, p, rng);
  ASSERT_EQ(plan.placements.size(), 1u);
  // Best fit takes node 0 (the fewest cores left), which strands node 0's T4.
  EXPECT_EQ(plan.placements[0].allocation.node, NodeId(1));
  plan = Schedule(snap, With(NodeChoice::kBestFit), rng);
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].allocation.node, NodeId(0));
}

TEST(FragmentationTest, DependsOnTheWorkloadWhereBestFitDoesNot) {
  // Two one-GPU nodes: node 0 has 600 milli free, node 1 is idle; a 500-milli task
  // fits both. Best fit takes node 0 and leaves 100 that nothing can use. For a
  // workload of 500-milli tasks that 100 is new fragmentation while node 1's other
  // half stays usable, so fragmentation-aware packing takes node 1; for a workload
  // of whole GPUs node 1 would lose its whole GPU, so it takes node 0.
  testing::FleetBuilder b;
  SiteId s = b.Site("dc");
  b.Nodes(s, "T4", 2, 1, 1'000'000);
  model::Fleet fleet = b.Build();
  model::ThroughputTable tt;
  model::Job job = testing::MakeJob("j", {testing::GpuTask("t", {"T4"}, 1, 500)});
  auto place = [&](const Policy& p) {
    Snapshot snap = testing::MakeSnapshot(fleet, tt, {&job});
    snap.free.Take(Allocation{NodeId(0), 0, 0, {0}, 400});
    Random rng(1);
    Plan plan = Schedule(snap, p, rng);
    EXPECT_EQ(plan.placements.size(), 1u);
    return plan.placements.empty() ? NodeId(99) : plan.placements[0].allocation.node;
  };
  auto frag = [&](int32_t workload_share) {
    Policy p = With(NodeChoice::kLeastFragmentation);
    model::ResourceRequest shape;
    shape.device_count = 1;
    shape.device_share_milli = workload_share;
    shape.cpu_milli = 0;
    p.workload = {WorkloadShape{shape, 1}};
    return p;
  };
  EXPECT_EQ(place(With(NodeChoice::kBestFit)), NodeId(0));
  EXPECT_EQ(place(frag(500)), NodeId(1));
  EXPECT_EQ(place(frag(1000)), NodeId(0));
}

class PoolChoiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::FleetBuilder b;
    SiteId cheap = b.Site("cheap");
    SiteId fast = b.Site("fast");
    b.Link(cheap, fast, 1000, 100 * kGbps);
    b.Nodes(cheap, "K80", 1, 1, 500'000);
    b.Nodes(fast, "V100", 1, 1, 3'000'000);
    fleet_ = b.Build();
    tt_.Set("K80", "train", 1);
    tt_.Set("V100", "train", 10);
  }
  Plan Run(const Policy& policy) {
    model::Task t = testing::GpuTask("t", {"K80", "V100"});
    t.work = model::WorkAmount{"train", 3600};
    job_ = testing::MakeJob("j", {t});
    Snapshot snap = testing::MakeSnapshot(fleet_, tt_, {&job_});
    Random rng(3);
    return Schedule(snap, policy, rng);
  }
  model::Fleet fleet_;
  model::ThroughputTable tt_;
  model::Job job_;
};

TEST_F(PoolChoiceTest, AwareTakesTheFastTypeCheapestPriceTheCheapOne) {
  EXPECT_EQ(Run(Policy{}).placements.at(0).device_type, "V100");  // 6 min against 1 h
  Plan cheap = Run(With(NodeChoice::kNextFit, PoolChoice::kCheapestPrice));
  EXPECT_EQ(cheap.placements.at(0).device_type, "K80");
}

TEST_F(PoolChoiceTest, AgnosticBelievesEveryTypeIsEquallyFast) {
  Policy agnostic;
  agnostic.heterogeneity_aware = false;
  Plan plan = Run(agnostic);
  ASSERT_EQ(plan.placements.size(), 1u);
  // Both at the mean, 1 h 50 s... the estimate is the same on either type.
  const int64_t mean_us = (3600 + 360) * kSecondUs / 2;
  EXPECT_EQ(plan.placements[0].compute_us, mean_us);
}

TEST_F(PoolChoiceTest, AGangDoesNotHoldOutForItsOwnMembersRelease) {
  // The second replica would rather wait for the V100 the first one takes (it
  // frees in 6 min, and 12 min beats 1 h on the K80), but that release is the
  // gang's own: holding out would roll the gang back every round, forever.
  model::Task t = testing::GpuTask("r", {"K80", "V100"});
  t.work = model::WorkAmount{"train", 3600};
  t.gang = "g";
  job_ = testing::MakeJob("j", {t, t});
  Snapshot snap = testing::MakeSnapshot(fleet_, tt_, {&job_});
  Random rng(1);
  Plan plan = Schedule(snap, Policy{}, rng);
  EXPECT_EQ(plan.placements.size(), 2u);
  EXPECT_TRUE(plan.unplaced.empty());
}

TEST(GangTest, AGangStaysOnOneDeviceTypeWhenOneHasRoom) {
  // One V100 and two K80s free: the first replica would take the V100, but the
  // second could then only run on a K80, and a synchronous gang runs at its
  // slowest member's pace; both go to the K80s and the V100 stays free.
  testing::FleetBuilder b;
  SiteId s = b.Site("dc");
  b.Nodes(s, "V100", 1, 1, 3'000'000);
  b.Nodes(s, "K80", 1, 2, 1'000'000);
  model::Fleet fleet = b.Build();
  model::ThroughputTable tt;
  tt.Set("K80", "train", 1);
  tt.Set("V100", "train", 10);
  model::Task t = testing::GpuTask("r", {"K80", "V100"});
  t.work = model::WorkAmount{"train", 60};
  t.gang = "g";
  model::Job job = testing::MakeJob("j", {t, t});
  Snapshot snap = testing::MakeSnapshot(fleet, tt, {&job});
  Random rng(1);
  Plan plan = Schedule(snap, Policy{}, rng);
  ASSERT_EQ(plan.placements.size(), 2u);
  EXPECT_EQ(plan.placements[0].device_type, "K80");
  EXPECT_EQ(plan.placements[1].device_type, "K80");
}

TEST_F(PoolChoiceTest, NoRoomAnywhereIsWaitingWithTheBusyPoolsNamed) {
  Policy first = With(NodeChoice::kFirstFit, PoolChoice::kAnyPool);
  model::Task t = testing::GpuTask("t", {"K80", "V100"}, 2);
  t.work = model::WorkAmount{"train", 10};
  job_ = testing::MakeJob("j", {t, t});
  testing::FleetBuilder b;
  SiteId s = b.Site("dc");
  b.Nodes(s, "V100", 1, 2, 1);
  model::Fleet fleet = b.Build();
  Snapshot snap = testing::MakeSnapshot(fleet, tt_, {&job_});
  Random rng(1);
  Plan plan = Schedule(snap, first, rng);
  EXPECT_EQ(plan.placements.size(), 1u);
  ASSERT_EQ(plan.unplaced.size(), 1u);
  EXPECT_EQ(plan.unplaced[0].kind, UnplacedKind::kWaiting);
}

}  // namespace
}  // namespace meridian::sched
