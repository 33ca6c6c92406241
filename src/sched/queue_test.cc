#include "sched/queue.h"

#include <gtest/gtest.h>

#include "sched/schedule.h"
#include "sched/sched_test_util.h"

namespace meridian::sched {
namespace {

struct OrderCase {
  QueueOrder order;
  std::vector<std::string> want;  // job of each handed-out task, in order
};

TEST(QueueOrderTest, FifoAndPriority) {
  model::Job low = testing::MakeJob("low", {testing::CpuTask("a"), testing::CpuTask("b")});
  model::Job high = testing::MakeJob("high", {testing::CpuTask("c")});
  high.priority = 10;
  testing::FleetBuilder b;
  b.Nodes(b.Site("s"), "", 1, 0, 0);
  model::Fleet f = b.Build();
  model::ThroughputTable tt;
  Snapshot s = testing::MakeSnapshot(f, tt, {&low, &high});
  const OrderCase cases[] = {
      {QueueOrder::kFifo, {"low", "low", "high"}},
      {QueueOrder::kPriority, {"high", "low", "low"}},
  };
  for (const OrderCase& c : cases) {
    TaskOrder order(s, c.order);
    std::vector<std::string> got;
    while (auto i = order.Next()) got.push_back(s.jobs[s.queue[*i].job].job->name);
    EXPECT_EQ(got, c.want) << QueueOrderName(c.order);
  }
}

TEST(QueueOrderTest, FairShareSplitsByWeightedDominantShare) {
  testing::FleetBuilder b;
  b.Nodes(b.Site("s"), "A100", 3, 4, 0);  // 12 GPUs
  model::Fleet f = b.Build();
  f.tenants = {model::Tenant{TenantId(0), "a", 1, 0, 0, 0}, model::Tenant{TenantId(1), "b", 2, 0, 0, 0}};
  std::vector<model::Task> tasks(20, testing::GpuTask("", {"A100"}));
  model::Job ja = testing::MakeJob("ja", tasks);
  ja.tenant = "a";
  model::Job jb = testing::MakeJob("jb", tasks);
  jb.tenant = "b";
  model::ThroughputTable tt;
  Snapshot s = testing::MakeSnapshot(f, tt, {&ja, &jb});  // a submitted first

  Random rng(1);
  Plan fifo = Schedule(s, Policy::WithOrder(QueueOrder::kFifo), rng);
  Plan fair = Schedule(s, Policy::WithOrder(QueueOrder::kFairShare), rng);
  auto count = [](const Plan& p, uint32_t job) {
    int n = 0;
    for (const Placement& x : p.placements) n += x.job == job;
    return n;
  };
  EXPECT_EQ(count(fifo, 0), 12);  // FIFO: the first tenant takes everything
  EXPECT_EQ(count(fifo, 1), 0);
  EXPECT_EQ(count(fair, 0), 4);   // DRF with weights 1:2 -> 4 and 8 GPUs
  EXPECT_EQ(count(fair, 1), 8);
}

TEST(QueueOrderTest, ParsesNames) {
  EXPECT_EQ(ParseQueueOrder("fair"), QueueOrder::kFairShare);
  EXPECT_EQ(ParseQueueOrder("lifo"), std::nullopt);
}

}  // namespace
}  // namespace meridian::sched
