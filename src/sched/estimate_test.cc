#include "sched/estimate.h"

#include <gtest/gtest.h>

#include "sched/sched_test_util.h"

namespace meridian::sched {
namespace {

TEST(EstimateTest, InputsComeFromTheBestReplicaAndSlowestSourceCounts) {
  testing::FleetBuilder b;
  SiteId a = b.Site("a"), c = b.Site("c"), d = b.Site("d");
  b.Link(a, c, 10'000, kGbps, 20'000);          // 10 ms, 1 Gbps, $0.02/GB
  b.Link(d, c, 50'000, 10 * kGbps, 90'000);     // 50 ms, 10 Gbps, $0.09/GB
  model::Fleet f = b.Build();
  // 1 GB at a and d: from d is faster (0.05 + 0.8 s) than from a (0.01 + 8 s).
  std::vector<model::ObjectRef> in = {{"x", kGB, {a, d}, {}}, {"y", kGB / 2, {a}, {}}};
  std::vector<SiteInputs> s = EstimateInputsPerSite(f, in);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_TRUE(s[c.value()].reachable);
  EXPECT_EQ(s[c.value()].transfer_us, std::max<int64_t>(50'000 + 800'000, 10'000 + 4'000'000));
  EXPECT_EQ(s[c.value()].egress_micro_usd, 90'000 + 10'000);
  EXPECT_EQ(s[c.value()].bytes_moved, kGB + kGB / 2);
  // At a, only x might move, but a holds both: nothing moves.
  EXPECT_EQ(s[a.value()].transfer_us, 0);
  EXPECT_EQ(s[a.value()].bytes_moved, 0);
  // d has no link to a, where y lives.
  EXPECT_FALSE(s[d.value()].reachable);
  EXPECT_EQ(s[d.value()].unreachable, "y");
  std::vector<Transfer> t = PlanTransfers(f, in, c);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].from, d);
  EXPECT_EQ(t[1].from, a);
}

TEST(EstimateTest, ComputeTimeFollowsTheThroughputTableAndShare) {
  model::ThroughputTable tt;
  tt.Set("A100", "gemm", 250);
  tt.Set("CPU", "gemm", 2);
  Pool pool;
  pool.device_type = "A100";
  pool.device_count = 8;
  model::Task t = testing::GpuTask("t", {"A100"});
  t.work = model::WorkAmount{"gemm", 500};
  EXPECT_EQ(EstimateComputeUs(tt, t, pool), 2 * kSecondUs);
  t.resources.device_count = 2;
  EXPECT_EQ(EstimateComputeUs(tt, t, pool), kSecondUs);  // linear without a measured entry
  t.resources.device_count = 1;
  t.resources.device_share_milli = 500;
  EXPECT_EQ(EstimateComputeUs(tt, t, pool), 4 * kSecondUs);
  pool.device_type = "T4";
  EXPECT_EQ(EstimateComputeUs(tt, t, pool), std::nullopt);
  model::Task cpu = testing::CpuTask("c", 4000);
  cpu.work = model::WorkAmount{"gemm", 16};
  EXPECT_EQ(EstimateComputeUs(tt, cpu, pool), 2 * kSecondUs);  // 2 per core x 4 cores
  cpu.work.reset();
  EXPECT_EQ(EstimateComputeUs(tt, cpu, pool), kMinuteUs);  // the declared duration
}

TEST(EstimateTest, ComputePerTypeIsIndexedByThePoolsTypeIndex) {
  testing::FleetBuilder b;
  SiteId s = b.Site("s");
  b.Nodes(s, "A100", 2, 8, 1'000'000);
  b.Nodes(s, "T4", 1, 1, 0);
  b.Nodes(s, "A100", 1, 8, 2'000'000);  // another A100 pool (price), same type index
  model::Fleet f = b.Build();
  PoolIndex index = PoolIndex::Build(f);
  const std::vector<Pool>& pools = index.pools;
  ASSERT_EQ(pools.size(), 3u);
  EXPECT_EQ(pools[0].type_index, pools[2].type_index);
  EXPECT_NE(pools[0].type_index, pools[1].type_index);
  model::ThroughputTable tt;
  tt.Set("A100", "gemm", 250);
  model::Task t = testing::GpuTask("t", {});
  t.work = model::WorkAmount{"gemm", 500};
  std::vector<std::optional<int64_t>> by_type;
  EstimateComputePerType(tt, t, pools, &by_type);
  ASSERT_EQ(by_type.size(), 2u);
  EXPECT_EQ(by_type[pools[0].type_index], 2 * kSecondUs);
  EXPECT_EQ(by_type[pools[1].type_index], std::nullopt);  // no T4 figure
}

TEST(EstimateTest, CostIsTheDominantShareOfTheNodePrice) {
  Pool pool;
  pool.device_count = 8;
  pool.cpu_milli = 96'000;
  pool.memory_bytes = 768 * kGiB;
  model::ResourceRequest r;
  r.device_count = 1;
  r.cpu_milli = 6'000;
  r.memory_bytes = 96 * kGiB;
  EXPECT_EQ(NodeShareppm(r, pool), 125'000);  // 1 of 8 GPUs
  r.cpu_milli = 48'000;
  EXPECT_EQ(NodeShareppm(r, pool), 500'000);  // half the CPUs dominates
  // $32/h node, a quarter of it, for 30 minutes: $4.
  EXPECT_EQ(RunCostMicroUsd(32'000'000, 250'000, 30 * kMinuteUs), 4'000'000);
}

}  // namespace
}  // namespace meridian::sched
