// The judgement users pay for, pinned: data gravity against faster GPUs, cost
// against deadline, and per-kind device speed rather than one scalar per device.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "sched/schedule.h"
#include "sched/sched_test_util.h"

namespace meridian::sched {
namespace {

using ::testing::HasSubstr;

class JudgementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::FleetBuilder b;
    eu_ = b.Site("eu-west", "eu-west-1");
    us_ = b.Site("us-east", "us-east-1");
    b.Link(eu_, us_, 80'000, kGbps, 20'000);   // 1 Gbps between the regions
    b.Nodes(eu_, "T4", 2, 1, 500'000);          // $0.50/h, one T4
    b.Nodes(us_, "A100", 2, 8, 32'000'000);     // $32/h, eight A100s
    fleet_ = b.Build();
    tt_.Set("T4", "train", 50);
    tt_.Set("A100", "train", 250);              // 5x faster on this kind
    tt_.Set("T4", "transcode", 900);            // NVENC: the T4 wins this kind
    tt_.Set("A100", "transcode", 160);
  }

  Plan Run(const model::Job& job, uint64_t seed = 1) {
    Snapshot s = testing::MakeSnapshot(fleet_, tt_, {&job});
    Random rng(seed);
    return Schedule(s, Policy{}, rng);
  }

  model::Job TrainingJob(double amount, model::Objective objective) {
    model::Task t = testing::GpuTask("train", {"A100", "T4"});
    t.work = model::WorkAmount{"train", amount};
    t.inputs = {model::ObjectRef{"data", 10 * kGiB, {eu_}, {}}};
    model::Job job = testing::MakeJob("j", {t});
    job.objective = objective;
    return job;
  }

  SiteId eu_, us_;
  model::Fleet fleet_;
  model::ThroughputTable tt_;
};

TEST_F(JudgementTest, FastestKeepsTheTaskWithItsDataWhenMovingCostsMoreThanItSaves) {
  // 1,000 steps: 20 s on the T4 beside the data; 4 s on an A100 plus 86 s to move
  // 10 GiB over 1 Gbps.
  Plan plan = Run(TrainingJob(1'000, model::Objective::kFastest));
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].site, eu_);
  EXPECT_EQ(plan.placements[0].device_type, "T4");
  EXPECT_TRUE(plan.placements[0].transfers.empty());
  EXPECT_EQ(plan.placements[0].finish_us, 20 * kSecondUs);
}

TEST_F(JudgementTest, FastestMovesTheDataWhenTheFasterGpuSavesMoreThanTheMove) {
  // 100,000 steps: 2,000 s on the T4; 400 s on an A100 + 86 s of transfer.
  Plan plan = Run(TrainingJob(100'000, model::Objective::kFastest));
  ASSERT_EQ(plan.placements.size(), 1u);
  const Placement& p = plan.placements[0];
  EXPECT_EQ(p.site, us_);
  EXPECT_EQ(p.device_type, "A100");
  ASSERT_EQ(p.transfers.size(), 1u);
  EXPECT_EQ(p.transfers[0].from, eu_);
  EXPECT_EQ(p.transfers[0].bytes, 10 * kGiB);
  EXPECT_EQ(p.transfer_us, 80'000 + TransferTimeUs(10 * kGiB, kGbps));
  EXPECT_EQ(p.finish_us, p.transfer_us + 400 * kSecondUs);
  // Egress: 10 GiB at $0.02/GB.
  EXPECT_EQ(p.egress_cost_micro_usd, 214'749);
}

TEST_F(JudgementTest, CheapestPicksTheCheaperSiteWhileMeetingTheDeadline) {
  // 180,000 steps: 1 h on a T4 for $0.50; 12 min + transfer on 1/8 of a $32/h node
  // (about $0.90 with egress).
  model::Job job = TrainingJob(180'000, model::Objective::kCheapest);
  job.deadline_us = 2 * kHourUs;
  Plan plan = Run(job);
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].site, eu_);
  EXPECT_EQ(plan.placements[0].cost_micro_usd(), 500'000);

  // A 30-minute deadline rules the T4 out: cheapest pays for the A100.
  job.deadline_us = 30 * kMinuteUs;
  plan = Run(job);
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].site, us_);
  EXPECT_LE(plan.placements[0].finish_us, 30 * kMinuteUs);

  // Nothing meets a 5-minute deadline: infeasible, and the reason says why.
  job.deadline_us = 5 * kMinuteUs;
  plan = Run(job);
  ASSERT_EQ(plan.unplaced.size(), 1u);
  EXPECT_EQ(plan.unplaced[0].kind, UnplacedKind::kInfeasible);
  EXPECT_THAT(plan.unplaced[0].reason, HasSubstr("after the deadline (5m 00s from now)"));
}

TEST_F(JudgementTest, BalancedTradesTimeAgainstMoney) {
  // 100,000 steps: A100 finishes in 486 s for ~$0.65, T4 in 2,000 s for ~$0.28.
  // Neither dominates; balanced must pick one of them deterministically and
  // both extremes pick as their objective says.
  model::Job fast = TrainingJob(100'000, model::Objective::kFastest);
  model::Job cheap = TrainingJob(100'000, model::Objective::kCheapest);
  EXPECT_EQ(Run(fast).placements[0].site, us_);
  EXPECT_EQ(Run(cheap).placements[0].site, eu_);
  model::Job balanced = TrainingJob(100'000, model::Objective::kBalanced);
  Plan a = Run(balanced, 1), b = Run(balanced, 99);
  ASSERT_EQ(a.placements.size(), 1u);
  EXPECT_EQ(a.placements[0].site, b.placements[0].site);
}

TEST_F(JudgementTest, AKindThatRunsFasterOnT4IsPlacedOnTheT4) {
  model::Task transcode = testing::GpuTask("transcode", {"A100", "T4"});
  transcode.work = model::WorkAmount{"transcode", 90'000};
  model::Task train = testing::GpuTask("train", {"A100", "T4"});
  train.work = model::WorkAmount{"train", 90'000};
  model::Job job = testing::MakeJob("j", {transcode, train});
  Plan plan = Run(job);
  ASSERT_EQ(plan.placements.size(), 2u);
  EXPECT_EQ(plan.placements[0].device_type, "T4");    // 100 s vs 562 s
  EXPECT_EQ(plan.placements[1].device_type, "A100");  // 360 s vs 1,800 s
}

TEST_F(JudgementTest, BudgetIsAHardLimit) {
  model::Job job = TrainingJob(180'000, model::Objective::kFastest);
  job.budget_micro_usd = 600'000;  // $0.60: the A100 (~$0.90) is over budget
  Plan plan = Run(job);
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].site, eu_);
  job.budget_micro_usd = 100'000;
  plan = Run(job);
  ASSERT_EQ(plan.unplaced.size(), 1u);
  EXPECT_EQ(plan.unplaced[0].kind, UnplacedKind::kInfeasible);
  EXPECT_THAT(plan.unplaced[0].reason, HasSubstr("more than the $0.10 left of the job's budget"));
}

}  // namespace
}  // namespace meridian::sched
