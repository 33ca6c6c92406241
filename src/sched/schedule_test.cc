#include "sched/schedule.h"

#include <map>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "sched/sched_test_util.h"

namespace meridian::sched {
namespace {

using ::testing::HasSubstr;

Plan RunSched(const model::Fleet& f, const std::vector<const model::Job*>& jobs, uint64_t seed = 1,
         QueueOrder order = QueueOrder::kFifo) {
  static const model::ThroughputTable kEmpty;
  Snapshot s = testing::MakeSnapshot(f, kEmpty, jobs);
  Random rng(seed);
  return Schedule(s, Policy::WithOrder(order), rng);
}

TEST(ScheduleTest, AccountsResourcesAcrossManyTasksInOneCall) {
  testing::FleetBuilder b;
  b.Nodes(b.Site("s"), "A100", 10, 4, 0);
  model::Fleet f = b.Build();
  std::vector<model::Task> tasks(50, testing::GpuTask("", {"A100"}));
  model::Job job = testing::MakeJob("j", tasks);
  Plan plan = RunSched(f, {&job});
  EXPECT_EQ(plan.placements.size(), 40u);
  ASSERT_EQ(plan.unplaced.size(), 10u);
  for (const Unplaced& u : plan.unplaced) {
    EXPECT_EQ(u.kind, UnplacedKind::kWaiting);
    // Each node counted once: busy, and worth waiting for (it used to be listed twice,
    // as busy and as held out for).
    EXPECT_EQ(u.reason,
              "0 of 10 nodes can run it now: 10 nodes at s are busy, but one frees in 1m 00s and would still finish it "
              "first (2m 00s from now)");
  }
  std::map<std::pair<uint32_t, int32_t>, int> used;
  for (const Placement& p : plan.placements) {
    for (int32_t d : p.allocation.devices) {
      EXPECT_EQ(++used[std::make_pair(p.allocation.node.value(), d)], 1);
    }
  }
}

TEST(ScheduleTest, InfeasibleDiffersFromWaitingAndSaysWhy) {
  testing::FleetBuilder b;
  SiteId s = b.Site("s");
  b.Nodes(s, "A100", 2, 8, 0);
  b.Nodes(s, "", 1, 0, 0);
  model::Fleet f = b.Build();
  model::Job job = testing::MakeJob("j", {testing::GpuTask("h100", {"H100"}),
                                          testing::GpuTask("sixteen", {"A100"}, 16)});
  Plan plan = RunSched(f, {&job});
  ASSERT_EQ(plan.unplaced.size(), 2u);
  EXPECT_EQ(plan.unplaced[0].kind, UnplacedKind::kInfeasible);
  EXPECT_EQ(plan.unplaced[0].reason, "0 of 3 nodes can run it: 3 nodes have no H100");
  EXPECT_EQ(plan.unplaced[1].kind, UnplacedKind::kInfeasible);
  EXPECT_EQ(plan.unplaced[1].reason,
            "0 of 3 nodes can run it: 2 nodes have 8 A100 devices, fewer than the 16 asked for on one node; "
            "1 node have no A100");
}

TEST(ScheduleTest, UnhealthyNodesMakeATaskWaitNotFail) {
  testing::FleetBuilder b;
  b.Nodes(b.Site("s"), "A100", 1, 8, 0);
  model::Fleet f = b.Build();
  f.nodes[0].health = model::NodeHealth::kUnhealthy;
  model::Job job = testing::MakeJob("j", {testing::GpuTask("t", {"A100"})});
  Plan plan = RunSched(f, {&job});
  ASSERT_EQ(plan.unplaced.size(), 1u);
  EXPECT_EQ(plan.unplaced[0].kind, UnplacedKind::kWaiting);
  EXPECT_THAT(plan.unplaced[0].reason, HasSubstr("1 node are unhealthy"));
}

// Tasks that differ only in which nodes they may take (spot rule, labels) are not
// alike: one finding its nodes full says nothing of another's.
TEST(ScheduleTest, NodeSelectorsKeepTasksApartWhenOneFindsNoRoom) {
  testing::FleetBuilder b;
  b.Nodes(b.Site("s"), "A100", 2, 1, 0);
  model::Fleet f = b.Build();
  f.nodes[0].spot = true;
  f.nodes[1].labels = {{"zone", "b"}};
  auto task = [](const std::string& name, model::SpotRule spot, std::map<std::string, std::string> labels) {
    model::Task t = testing::GpuTask(name, {"A100"});
    t.resources.spot = spot;
    t.resources.node_labels = std::move(labels);
    return t;
  };
  model::Job spot = testing::MakeJob("spot", {task("a", model::SpotRule::kOnly, {}), task("b", model::SpotRule::kOnly, {}),
                                              task("c", model::SpotRule::kNever, {})});
  Plan plan = RunSched(f, {&spot});
  ASSERT_EQ(plan.placements.size(), 2u);
  EXPECT_EQ(plan.placements[0].allocation.node.value(), 0u);
  EXPECT_EQ(plan.placements[1].task.value(), 2u);  // c, on the on-demand node
  EXPECT_EQ(plan.placements[1].allocation.node.value(), 1u);
  ASSERT_EQ(plan.unplaced.size(), 1u);
  EXPECT_EQ(plan.unplaced[0].task.value(), 1u);

  model::Job zones = testing::MakeJob("zones", {task("a", model::SpotRule::kAny, {{"zone", "b"}}),
                                                task("b", model::SpotRule::kAny, {{"zone", "b"}}),
                                                task("c", model::SpotRule::kAny, {})});
  plan = RunSched(f, {&zones});
  ASSERT_EQ(plan.placements.size(), 2u);
  EXPECT_EQ(plan.placements[0].allocation.node.value(), 1u);
  EXPECT_EQ(plan.placements[1].task.value(), 2u);
  EXPECT_EQ(plan.placements[1].allocation.node.value(), 0u);
}

// spot: prefer takes a spot node when one has room, and an on-demand one rather than
// wait; spot: avoid the other way round. Under the policy the coordinator runs.
TEST(ScheduleTest, ASpotPreferenceChoosesAmongNodesWithRoomAndNeverWaits) {
  testing::FleetBuilder b;
  b.Nodes(b.Site("s"), "A100", 2, 1, 0);
  model::Fleet f = b.Build();
  f.nodes[1].spot = true;  // node 0 on demand, node 1 spot, the same price
  static const model::ThroughputTable kEmpty;
  for (model::SpotRule rule : {model::SpotRule::kPrefer, model::SpotRule::kAvoid}) {
    std::vector<model::Task> tasks(2, testing::GpuTask("t", {"A100"}));
    for (model::Task& t : tasks) t.resources.spot = rule;
    model::Job job = testing::MakeJob("j", tasks);
    Snapshot snap = testing::MakeSnapshot(f, kEmpty, {&job});
    Random rng(1);
    Plan plan = Schedule(snap, Policy::Meridian(QueueOrder::kFifo), rng);
    ASSERT_EQ(plan.placements.size(), 2u) << static_cast<int>(rule);
    const uint32_t first = rule == model::SpotRule::kPrefer ? 1 : 0;
    EXPECT_EQ(plan.placements[0].allocation.node.value(), first);
    EXPECT_EQ(plan.placements[1].allocation.node.value(), 1 - first);  // the other kind, now
  }
}

TEST(ScheduleTest, GangIsPlacedWholeOrNotAtAll) {
  testing::FleetBuilder b;
  b.Nodes(b.Site("s"), "A100", 2, 4, 0);
  model::Fleet f = b.Build();
  std::vector<model::Task> fits(2, testing::GpuTask("", {"A100"}, 4));
  for (auto& t : fits) t.gang = "g";
  model::Job ok = testing::MakeJob("ok", fits);
  Plan plan = RunSched(f, {&ok});
  EXPECT_EQ(plan.placements.size(), 2u);

  // One GPU already taken by a task queued first: the 2 x 4-GPU gang no longer fits.
  model::Job first = testing::MakeJob("first", {testing::GpuTask("one", {"A100"})});
  plan = RunSched(f, {&first, &ok});
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].job, 0u);
  ASSERT_EQ(plan.unplaced.size(), 2u);
  for (const Unplaced& u : plan.unplaced) {
    EXPECT_EQ(u.kind, UnplacedKind::kWaiting);
    EXPECT_THAT(u.reason, HasSubstr("gang 'g' is placed all-or-nothing and task 't1' cannot be placed"));
  }
}

TEST(ScheduleTest, GangStaysOnOneSiteWhenItCan) {
  testing::FleetBuilder b;
  SiteId a = b.Site("a"), c = b.Site("c");
  b.Link(a, c, 50'000, kGbps);
  b.Nodes(a, "A100", 1, 4, 0);
  b.Nodes(c, "A100", 1, 4, 0);
  b.Nodes(a, "A100", 1, 4, 0);
  model::Fleet f = b.Build();
  std::vector<model::Task> members(4, testing::GpuTask("", {"A100"}, 2));
  for (auto& t : members) t.gang = "train";
  model::Job job = testing::MakeJob("j", members);
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    Plan plan = RunSched(f, {&job}, seed);
    ASSERT_EQ(plan.placements.size(), 4u);
    for (const Placement& p : plan.placements) EXPECT_EQ(p.site, a) << "seed " << seed;
  }
}

TEST(ScheduleTest, AGangTooBigForOneSiteSpansTheSitesWithTheFastestLinks) {
  // Four 2-GPU members need two of the three 4-GPU sites. b is the cheapest site after
  // a, but a-b is 80 ms at 1 Gbit/s, a-c 5 ms at 10 Gbit/s: the gang takes a and c.
  testing::FleetBuilder b;
  SiteId a = b.Site("a"), bs = b.Site("b"), c = b.Site("c");
  b.Link(a, bs, 80'000, kGbps);
  b.Link(a, c, 5'000, 10 * kGbps);
  b.Link(bs, c, 90'000, kGbps);
  b.Nodes(a, "A100", 1, 4, 1'000'000);
  b.Nodes(bs, "A100", 1, 4, 2'000'000);
  b.Nodes(c, "A100", 1, 4, 9'000'000);
  model::Fleet f = b.Build();
  std::vector<model::Task> members(4, testing::GpuTask("", {"A100"}, 2));
  for (auto& t : members) {
    t.gang = "train";
    t.duration_us = 3'600'000'000;
  }
  model::Job job = testing::MakeJob("j", members);
  job.objective = model::Objective::kCheapest;
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    Plan plan = RunSched(f, {&job}, seed);
    ASSERT_EQ(plan.placements.size(), 4u);
    std::map<SiteId, int> by_site;
    for (const Placement& p : plan.placements) ++by_site[p.site];
    EXPECT_EQ(by_site, (std::map<SiteId, int>{{a, 2}, {c, 2}})) << "seed " << seed;
  }
  // A gang that fits nowhere but on all three sites still goes.
  std::vector<model::Task> six(6, testing::GpuTask("", {"A100"}, 2));
  for (auto& t : six) t.gang = "big";
  model::Job big = testing::MakeJob("big", six);
  EXPECT_EQ(RunSched(f, {&big}).placements.size(), 6u);
}

TEST(ScheduleTest, FractionalSharesPackOntoOneDevice) {
  testing::FleetBuilder b;
  b.Nodes(b.Site("s"), "T4", 1, 2, 0);
  model::Fleet f = b.Build();
  std::vector<model::Task> tasks(4, testing::GpuTask("", {"T4"}, 1, 250));
  tasks.push_back(testing::GpuTask("whole", {"T4"}));
  model::Job job = testing::MakeJob("j", tasks);
  Plan plan = RunSched(f, {&job});
  ASSERT_EQ(plan.placements.size(), 5u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(plan.placements[i].allocation.devices, std::vector<int32_t>{0});
  EXPECT_EQ(plan.placements[4].allocation.devices, std::vector<int32_t>{1});
}

TEST(ScheduleTest, TenantQuotaHoldsBackOrRejects) {
  testing::FleetBuilder b;
  b.Nodes(b.Site("s"), "A100", 2, 8, 0);
  model::Fleet f = b.Build();
  f.tenants = {model::Tenant{TenantId(0), "team", 1, 2000, 0, 0}};
  std::vector<model::Task> tasks(3, testing::GpuTask("", {"A100"}));
  tasks.push_back(testing::GpuTask("big", {"A100"}, 4));
  model::Job job = testing::MakeJob("j", tasks);
  job.tenant = "team";
  Plan plan = RunSched(f, {&job});
  EXPECT_EQ(plan.placements.size(), 2u);
  ASSERT_EQ(plan.unplaced.size(), 2u);
  EXPECT_EQ(plan.unplaced[0].kind, UnplacedKind::kWaiting);
  EXPECT_EQ(plan.unplaced[0].reason, "tenant 'team' uses 2 of its 2 GPUs quota; this task needs 1 more");
  EXPECT_EQ(plan.unplaced[1].kind, UnplacedKind::kInfeasible);
  EXPECT_EQ(plan.unplaced[1].reason, "asks for 4 GPUs, more than tenant 'team''s quota of 2");
}

TEST(ScheduleTest, AllowedRegionsAndResidencyConfineTheTask) {
  testing::FleetBuilder b;
  SiteId us = b.Site("us-east", "us-east-1");
  SiteId eu = b.Site("eu-west", "eu-west-1");
  b.Link(us, eu, 80'000, kGbps);
  b.Nodes(us, "A100", 1, 8, 0);
  b.Nodes(eu, "T4", 1, 1, 0);
  model::Fleet f = b.Build();
  model::Task t = testing::GpuTask("t", {"A100", "T4"});
  t.inputs = {model::ObjectRef{"patients", kGiB, {eu}, {"eu"}}};
  model::Job job = testing::MakeJob("j", {t, t});
  Plan plan = RunSched(f, {&job});
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].site, eu);
  ASSERT_EQ(plan.unplaced.size(), 1u);
  EXPECT_EQ(plan.unplaced[0].kind, UnplacedKind::kWaiting);  // the eu T4 is busy
  EXPECT_THAT(plan.unplaced[0].reason,
              HasSubstr("1 node are at us-east, where input 'patients' may not be processed (residency)"));
  model::Job confined = testing::MakeJob("c", {testing::GpuTask("t", {"A100", "T4"})});
  confined.allowed_regions = {"us"};
  plan = RunSched(f, {&confined});
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].site, us);
}

TEST(ScheduleTest, SameSeedSamePlanAndSeedsBreakTiesBetweenEqualSites) {
  testing::FleetBuilder b;
  SiteId a = b.Site("a"), c = b.Site("c");
  b.Nodes(a, "A100", 4, 8, 0);
  b.Nodes(c, "A100", 4, 8, 0);
  model::Fleet f = b.Build();
  std::vector<model::Task> tasks(5, testing::GpuTask("", {"A100"}));
  model::Job job = testing::MakeJob("j", tasks);
  auto sites = [&](uint64_t seed) {
    std::vector<uint32_t> out;
    for (const Placement& p : RunSched(f, {&job}, seed).placements) out.push_back(p.allocation.node.value());
    return out;
  };
  EXPECT_EQ(sites(7), sites(7));
  bool differs = false;
  for (uint64_t seed = 1; seed < 10 && !differs; ++seed) differs = sites(seed) != sites(seed + 1);
  EXPECT_TRUE(differs);
}

TEST(ScheduleTest, PriorityOrderGivesScarceGpusToTheHigherPriorityJob) {
  testing::FleetBuilder b;
  b.Nodes(b.Site("s"), "A100", 1, 2, 0);
  model::Fleet f = b.Build();
  std::vector<model::Task> tasks(2, testing::GpuTask("", {"A100"}));
  model::Job low = testing::MakeJob("low", tasks);
  model::Job high = testing::MakeJob("high", tasks);
  high.priority = 5;
  Plan plan = RunSched(f, {&low, &high}, 1, QueueOrder::kPriority);
  ASSERT_EQ(plan.placements.size(), 2u);
  for (const Placement& p : plan.placements) EXPECT_EQ(p.job, 1u);
}

}  // namespace
}  // namespace meridian::sched

namespace meridian::sched {
namespace {

TEST(ScheduleWaitTest, ABusyNodeThatFreesSoonBeatsAFreeNodeFarFromTheData) {
  testing::FleetBuilder b;
  SiteId edge = b.Site("edge"), cloud = b.Site("cloud");
  b.Link(edge, cloud, 50'000, 100'000'000);  // 100 Mbps uplink
  b.Nodes(edge, "T4", 1, 1, 0);
  b.Nodes(cloud, "A100", 1, 1, 0);
  model::Fleet f = b.Build();
  model::ThroughputTable tt;
  model::Task t = testing::GpuTask("t", {"T4", "A100"});
  t.duration_us = kSecondUs;
  t.inputs = {model::ObjectRef{"frames", kGiB, {edge}, {}}};
  model::Job job = testing::MakeJob("j", {t});
  Snapshot s = testing::MakeSnapshot(f, tt, {&job});
  // The T4 is busy with a task expected to end in 2 s.
  Allocation running{NodeId(0), 1000, kGiB, {0}, 1000};
  s.free.Take(running);
  s.releases.push_back(Release{2 * kSecondUs, running});
  Random rng(1);
  Plan plan = Schedule(s, Policy{}, rng);
  ASSERT_EQ(plan.unplaced.size(), 1u);
  EXPECT_EQ(plan.unplaced[0].kind, UnplacedKind::kWaiting);
  EXPECT_THAT(plan.unplaced[0].reason, ::testing::HasSubstr("1 node at edge are busy, but one frees in 2 s"));
  // Without a known release the T4 might stay busy: move the data and go.
  s.releases.clear();
  plan = Schedule(s, Policy{}, rng);
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].site, cloud);
}

}  // namespace
}  // namespace meridian::sched

namespace meridian::sched {
namespace {

// needs_room says "nothing but room can change this answer": set when every pool
// that passes the filters is full, never when a quota, a deadline or a better
// pool freeing soon is what holds the task back.
TEST(ScheduleParkTest, NeedsRoomOnlyWhenRoomAloneIsMissing) {
  testing::FleetBuilder b;
  b.Nodes(b.Site("s"), "A100", 2, 2, 0);
  model::Fleet f = b.Build();
  f.tenants = {model::Tenant{TenantId(0), "team", 1, 1000, 0, 0}};
  model::Job full = testing::MakeJob("full", std::vector<model::Task>(6, testing::GpuTask("", {"A100"})));
  model::Job quota = testing::MakeJob("quota", {testing::GpuTask("", {"A100"})});
  quota.tenant = "team";
  model::Job deadline = testing::MakeJob("deadline", {testing::GpuTask("", {"A100"})});
  deadline.deadline_us = 3600 * kSecondUs;
  static const model::ThroughputTable kEmpty;
  Snapshot s = testing::MakeSnapshot(f, kEmpty, {&full, &quota, &deadline});
  // The tenant already holds its one GPU elsewhere.
  s.tenant_usage = {TenantUsage{1000, 0, 0}};
  Random rng(1);
  Policy p;
  p.explain_waiting = false;
  Plan plan = Schedule(s, p, rng);
  ASSERT_EQ(plan.placements.size(), 4u);
  ASSERT_EQ(plan.unplaced.size(), 4u);
  for (const Unplaced& u : plan.unplaced) {
    EXPECT_EQ(u.kind, UnplacedKind::kWaiting);
    const std::string& job = s.jobs[u.job].job->name;
    EXPECT_EQ(u.needs_room, job == "full") << job;
    // Waiting for room is not put in words unless asked; a quota says so anyway.
    EXPECT_EQ(u.reason, job == "quota" ? "tenant 'team' uses 1 of its 1 GPUs quota; this task needs 1 more" : "")
        << job;
  }
  // With releases known, the scored policy holds out for them: still room alone.
  s.releases.push_back(Release{60 * kSecondUs, Allocation{NodeId(0), 1000, kGiB, {0}, 1000}});
  plan = Schedule(s, p, rng);
  EXPECT_TRUE(plan.unplaced[0].needs_room);
  // Infeasible tasks never need room: nothing can make them fit.
  model::Job h100 = testing::MakeJob("h100", {testing::GpuTask("", {"H100"})});
  Snapshot s2 = testing::MakeSnapshot(f, kEmpty, {&h100});
  plan = Schedule(s2, p, rng);
  ASSERT_EQ(plan.unplaced.size(), 1u);
  EXPECT_EQ(plan.unplaced[0].kind, UnplacedKind::kInfeasible);
  EXPECT_FALSE(plan.unplaced[0].needs_room);
  EXPECT_EQ(plan.unplaced[0].reason, "0 of 2 nodes can run it: 2 nodes have no H100");
}

// A task the caller knows has room only on grown nodes is looked for there alone:
// a node with room that did not grow is not looked at (the caller's knowledge
// says it cannot have room; here it is deliberately wrong, to show the scan).
TEST(ScheduleParkTest, RoomOnlyOnGrownLooksAtGrownNodesAlone) {
  testing::FleetBuilder b;
  b.Nodes(b.Site("s"), "A100", 3, 1, 0);
  model::Fleet f = b.Build();
  static const model::ThroughputTable kEmpty;
  model::Job job = testing::MakeJob("j", {testing::GpuTask("a", {"A100"}), testing::GpuTask("b", {"A100"})});
  Snapshot s = testing::MakeSnapshot(f, kEmpty, {&job});
  for (PendingTask& p : s.queue) p.room_only_on_grown = true;
  s.grown = {NodeId(2)};
  Random rng(1);
  Policy p;
  p.explain_waiting = false;
  Plan plan = Schedule(s, p, rng);
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].allocation.node, NodeId(2));
  ASSERT_EQ(plan.unplaced.size(), 1u);
  EXPECT_TRUE(plan.unplaced[0].needs_room);
  // Without the flag, every node is looked at.
  for (PendingTask& q : s.queue) q.room_only_on_grown = false;
  plan = Schedule(s, p, rng);
  EXPECT_EQ(plan.placements.size(), 2u);
}

}  // namespace
}  // namespace meridian::sched
