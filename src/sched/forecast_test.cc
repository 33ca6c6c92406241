#include "sched/forecast.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "sched/sched_test_util.h"

namespace meridian::sched {
namespace {

using ::testing::HasSubstr;

class ForecastTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::FleetBuilder b;
    a_ = b.Site("a");
    c_ = b.Site("c");
    b.Link(a_, c_, 10'000, 8 * kGbps, 50'000);
    b.Nodes(a_, "T4", 1, 1, 3'600'000);    // $3.60/h
    b.Nodes(c_, "A100", 1, 1, 3'600'000);
    fleet_ = b.Build();
  }
  SiteId a_, c_;
  model::Fleet fleet_;
  model::ThroughputTable tt_;
};

TEST_F(ForecastTest, DependantsStartWhenTheirInputsFinishAndPullTheirOutputs) {
  model::Task first = testing::GpuTask("first", {"T4"});
  first.duration_us = 10 * kSecondUs;
  first.output_bytes = kGB;
  model::Task second = testing::GpuTask("second", {"A100"});
  second.duration_us = 20 * kSecondUs;
  second.after = {TaskId(0)};
  model::Job job = testing::MakeJob("j", {first, second});
  Forecast f = ForecastJob(fleet_, tt_, job, Policy{}, 1);
  ASSERT_TRUE(f.complete());
  const Placement& p1 = *f.tasks[0].placement;
  const Placement& p2 = *f.tasks[1].placement;
  EXPECT_EQ(p1.finish_us, 10 * kSecondUs);
  EXPECT_EQ(p2.start_us, 10 * kSecondUs);
  // 1 GB over 8 Gbps (1 s) + 10 ms RTT, then 20 s of compute.
  EXPECT_EQ(p2.transfer_us, kSecondUs + 10'000);
  EXPECT_EQ(p2.finish_us, 10 * kSecondUs + kSecondUs + 10'000 + 20 * kSecondUs);
  EXPECT_EQ(f.makespan_us, p2.finish_us);
  ASSERT_EQ(f.links.size(), 1u);
  EXPECT_EQ((f.links.at({a_, c_}).bytes), kGB);
  EXPECT_EQ(f.egress_cost_micro_usd, 50'000);
  // $3.60/h for 10 s and for 21.01 s.
  EXPECT_EQ(f.compute_cost_micro_usd, 10'000 + 21'010);
}

TEST_F(ForecastTest, TasksQueueForBusyDevicesAndInfeasibleOnesBlockTheirDependants) {
  std::vector<model::Task> tasks(3, testing::GpuTask("", {"T4"}));
  model::Task impossible = testing::GpuTask("impossible", {"H100"});
  model::Task after = testing::GpuTask("after", {"T4"});
  after.after = {TaskId(3)};
  tasks.push_back(impossible);
  tasks.push_back(after);
  model::Job job = testing::MakeJob("j", tasks);
  Forecast f = ForecastJob(fleet_, tt_, job, Policy{}, 1);
  EXPECT_FALSE(f.complete());
  EXPECT_EQ(f.placed, 3u);
  EXPECT_EQ(f.tasks[0].placement->start_us, 0);
  EXPECT_EQ(f.tasks[1].placement->start_us, kMinuteUs);
  EXPECT_EQ(f.tasks[2].placement->start_us, 2 * kMinuteUs);
  EXPECT_EQ(f.makespan_us, 3 * kMinuteUs);
  EXPECT_EQ(f.tasks[3].outcome, Outcome::kInfeasible);
  EXPECT_THAT(f.tasks[3].reason, HasSubstr("have no H100"));
  EXPECT_EQ(f.tasks[4].outcome, Outcome::kBlocked);
  EXPECT_THAT(f.tasks[4].reason, HasSubstr("depends on 'impossible'"));
}

TEST_F(ForecastTest, HoldsOutForTheLocalDeviceWhenMovingTheDataTakesLonger) {
  // Two tasks read 4 GB (or 40 GB) each at site a, whose one T4 takes 10 s per task.
  // The A100 at c takes 1 s, plus 4 s (or 40 s) to move the input over 8 Gbps.
  // 4 GB: the first task goes to the A100 (5 s), the second to the idle T4 (10 s).
  // 40 GB: both stay with their data; the second holds out for the busy T4 (done
  // at 20 s) rather than move 40 GB to the free A100 (41 s).
  model::ThroughputTable tt;
  tt.Set("T4", "k", 1);
  tt.Set("A100", "k", 10);
  for (int64_t gb : {4, 40}) {
    std::vector<model::Task> tasks(2, testing::GpuTask("", {"T4", "A100"}));
    for (size_t i = 0; i < tasks.size(); ++i) {
      tasks[i].work = model::WorkAmount{"k", 10};
      tasks[i].inputs = {model::ObjectRef{"in" + std::to_string(i), gb * kGB, {a_}, {}}};
    }
    model::Job job = testing::MakeJob("j", tasks);
    Forecast f = ForecastJob(fleet_, tt, job, Policy{}, 1);
    ASSERT_TRUE(f.complete());
    if (gb == 4) {
      EXPECT_EQ(f.tasks[0].placement->site, c_);
      EXPECT_EQ(f.tasks[1].placement->site, a_);
      EXPECT_EQ(f.tasks[1].placement->start_us, 0);
    } else {
      EXPECT_EQ(f.tasks[0].placement->site, a_);
      EXPECT_EQ(f.tasks[1].placement->site, a_);
      EXPECT_EQ(f.tasks[1].placement->start_us, 10 * kSecondUs);
      EXPECT_TRUE(f.links.empty());
    }
  }
}

// An output derived from data that may be processed only at site a is an input
// bound to a too: the task after it may not pull it to c's A100.
TEST_F(ForecastTest, ResidencyFollowsDerivedData) {
  model::Task clean = testing::GpuTask("clean", {"T4"});
  clean.duration_us = 10 * kSecondUs;
  clean.output_bytes = kGB;
  clean.inputs = {model::ObjectRef{"raw", kGB, {a_}, {"a"}}};
  clean.output_residency = {"a"};  // as the job spec derives it
  model::Task train = testing::GpuTask("train", {"A100"});
  train.duration_us = 20 * kSecondUs;
  train.after = {TaskId(0)};
  model::Job job = testing::MakeJob("j", {clean, train});
  Forecast f = ForecastJob(fleet_, tt_, job, Policy{}, 1);
  ASSERT_TRUE(f.tasks[0].placement);
  EXPECT_FALSE(f.tasks[1].placement);
  EXPECT_THAT(f.tasks[1].reason, HasSubstr("where input 'clean.out' may not be processed (residency)"));
  // Freed by the job (no derived residency), it goes to the A100.
  job.tasks[0].output_residency.clear();
  f = ForecastJob(fleet_, tt_, job, Policy{}, 1);
  ASSERT_TRUE(f.complete());
  EXPECT_EQ(f.tasks[1].placement->site, c_);
}

TEST_F(ForecastTest, SameSeedSameForecast) {
  std::vector<model::Task> tasks(6, testing::GpuTask("", {"T4", "A100"}));
  model::Job job = testing::MakeJob("j", tasks);
  Forecast x = ForecastJob(fleet_, tt_, job, Policy{}, 42);
  Forecast y = ForecastJob(fleet_, tt_, job, Policy{}, 42);
  for (size_t i = 0; i < tasks.size(); ++i) {
    EXPECT_EQ(x.tasks[i].placement->allocation.node, y.tasks[i].placement->allocation.node);
    EXPECT_EQ(x.tasks[i].placement->start_us, y.tasks[i].placement->start_us);
  }
}

}  // namespace
}  // namespace meridian::sched
