#include "sched/filters.h"

#include <functional>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "sched/sched_test_util.h"

namespace meridian::sched {
namespace {

using ::testing::HasSubstr;

// One row: a filter, a change to a default task / pool / job, and the verdict.
struct FilterCase {
  const char* name;
  const char* filter;
  std::function<void(model::Task&, Pool&, model::Job&)> setup;
  bool pass;
  const char* explain;  // substring of Explain when it fails
};

class FilterTableTest : public ::testing::TestWithParam<FilterCase> {};

TEST_P(FilterTableTest, Verdict) {
  const FilterCase& c = GetParam();
  testing::FleetBuilder b;
  SiteId us = b.Site("us-east", "us-east-1");
  SiteId eu = b.Site("eu-west", "eu-west-1");
  b.Nodes(us, "A100", 1, 8, 0);
  model::Fleet fleet = b.Build();
  (void)eu;
  model::ThroughputTable tt;
  tt.Set("A100", "gemm", 100);
  model::Task task = testing::GpuTask("t", {"A100", "T4"});
  Pool pool;
  pool.site = us;
  pool.device_type = "A100";
  pool.device_count = 8;
  pool.device_memory_bytes = 40 * kGiB;
  pool.cpu_milli = 96'000;
  pool.memory_bytes = 680 * kGiB;
  pool.nodes = {NodeId(0)};
  model::Job job;
  c.setup(task, pool, job);
  PendingTask pending{0, TaskId(0), task.inputs, 0};
  std::vector<SiteInputs> per_site = EstimateInputsPerSite(fleet, task.inputs);
  if (task.inputs.empty()) per_site.clear();
  std::vector<std::optional<int64_t>> compute = {EstimateComputeUs(tt, task, pool)};
  TaskView view{fleet, tt, job, task, pending, per_site, compute};
  const Filter* f = FindFilter(c.filter);
  ASSERT_NE(f, nullptr) << c.filter;
  EXPECT_EQ(f->Check(view, pool), c.pass) << c.name;
  if (!c.pass) {
    EXPECT_THAT(f->Explain(view, pool), HasSubstr(c.explain)) << c.name;
  }
}

const std::string kT4 = "T4";
const std::string kCpu = "CPU";

INSTANTIATE_TEST_SUITE_P(
    Table, FilterTableTest,
    ::testing::Values(
        FilterCase{"type in set", "device_type", [](auto&, auto&, auto&) {}, true, ""},
        FilterCase{"type not in set", "device_type", [](auto& t, auto&, auto&) { t.resources.accelerator_any_of = {"H100"}; }, false, "have no H100"},
        FilterCase{"any accelerator", "device_type", [](auto& t, auto&, auto&) { t.resources.accelerator_any_of = {}; }, true, ""},
        FilterCase{"gpu task on cpu node", "device_type", [](auto&, auto& p, auto&) { p.device_count = 0; p.device_type = kCpu; }, false, "have no A100 or T4"},
        FilterCase{"cpu task anywhere", "device_type", [](auto& t, auto& p, auto&) { t.resources.device_count = 0; p.device_count = 0; }, true, ""},
        FilterCase{"count fits", "device_count", [](auto& t, auto&, auto&) { t.resources.device_count = 8; }, true, ""},
        FilterCase{"count too big", "device_count", [](auto& t, auto&, auto&) { t.resources.device_count = 9; }, false, "fewer than the 9 asked for"},
        FilterCase{"memory capability met", "device_memory", [](auto& t, auto&, auto&) { t.resources.min_device_memory_bytes = 40 * kGiB; }, true, ""},
        FilterCase{"memory capability unmet", "device_memory", [](auto& t, auto&, auto&) { t.resources.min_device_memory_bytes = 80 * kGiB; }, false, "under the 80 GiB asked for"},
        FilterCase{"cpu fits", "cpu", [](auto& t, auto&, auto&) { t.resources.cpu_milli = 96'000; }, true, ""},
        FilterCase{"cpu too big", "cpu", [](auto& t, auto&, auto&) { t.resources.cpu_milli = 128'000; }, false, "96 CPU cores, fewer than the 128"},
        FilterCase{"memory too big", "memory", [](auto& t, auto&, auto&) { t.resources.memory_bytes = kTiB; }, false, "less than the 1 TiB"},
        FilterCase{"no region rule", "allowed_regions", [](auto&, auto&, auto&) {}, true, ""},
        FilterCase{"region allowed by prefix", "allowed_regions", [](auto&, auto&, auto& j) { j.allowed_regions = {"us"}; }, true, ""},
        FilterCase{"region not allowed", "allowed_regions", [](auto&, auto&, auto& j) { j.allowed_regions = {"eu-west"}; }, false, "outside the job's allowed regions"},
        FilterCase{"residency met", "data_residency", [](auto& t, auto&, auto&) { t.inputs = {model::ObjectRef{"x", 1, {SiteId(0)}, {"us"}}}; }, true, ""},
        FilterCase{"residency violated", "data_residency", [](auto& t, auto&, auto&) { t.inputs = {model::ObjectRef{"gdpr", 1, {SiteId(1)}, {"eu"}}}; }, false, "input 'gdpr' may not be processed"},
        FilterCase{"throughput known", "throughput_known", [](auto& t, auto&, auto&) { t.work = model::WorkAmount{"gemm", 10}; }, true, ""},
        FilterCase{"throughput unknown", "throughput_known", [](auto& t, auto&, auto&) { t.work = model::WorkAmount{"fft", 10}; }, false, "no 'fft' figure"},
        FilterCase{"work of 12 days", "compute_bounded", [](auto& t, auto&, auto&) { t.work = model::WorkAmount{"gemm", 1e8}; }, true, ""},
        FilterCase{"work of 300,000 years", "compute_bounded", [](auto& t, auto&, auto&) { t.work = model::WorkAmount{"gemm", 1e15}; }, false, "have A100, on which its work (1e+15 gemm) would take more than 100 years"},
        FilterCase{"work past any clock", "compute_bounded", [](auto& t, auto&, auto&) { t.work = model::WorkAmount{"gemm", 1e300}; }, false, "more than 100 years"},
        FilterCase{"data reachable", "data_reachable", [](auto& t, auto&, auto&) { t.inputs = {model::ObjectRef{"x", kGiB, {SiteId(0)}, {}}}; }, true, ""},
        FilterCase{"no link to the data", "data_reachable", [](auto& t, auto&, auto&) { t.inputs = {model::ObjectRef{"far", kGiB, {SiteId(1)}, {}}}; }, false, "no link joins to a replica of input 'far'"},
        FilterCase{"no labels asked", "node_labels", [](auto&, auto& p, auto&) { p.labels = {{"zone", "a"}}; }, true, ""},
        FilterCase{"labels held", "node_labels", [](auto& t, auto& p, auto&) { p.labels = {{"zone", "a"}, {"rack", "7"}}; t.resources.node_labels = {{"zone", "a"}}; }, true, ""},
        FilterCase{"label missing", "node_labels", [](auto& t, auto& p, auto&) { p.labels = {{"rack", "7"}}; t.resources.node_labels = {{"zone", "a"}}; }, false, "have no label zone"},
        FilterCase{"label differs", "node_labels", [](auto& t, auto& p, auto&) { p.labels = {{"zone", "b"}}; t.resources.node_labels = {{"zone", "a"}}; }, false, "have zone=b, not a"},
        FilterCase{"spot any", "spot", [](auto&, auto& p, auto&) { p.spot = true; }, true, ""},
        FilterCase{"spot never, on spot", "spot", [](auto& t, auto& p, auto&) { p.spot = true; t.resources.spot = model::SpotRule::kNever; }, false, "are spot nodes, which the task never takes"},
        FilterCase{"spot never, on demand", "spot", [](auto& t, auto&, auto&) { t.resources.spot = model::SpotRule::kNever; }, true, ""},
        FilterCase{"spot only, on demand", "spot", [](auto& t, auto&, auto&) { t.resources.spot = model::SpotRule::kOnly; }, false, "are not spot nodes, and the task takes only those"},
        FilterCase{"spot only, on spot", "spot", [](auto& t, auto& p, auto&) { p.spot = true; t.resources.spot = model::SpotRule::kOnly; }, true, ""},
        FilterCase{"healthy", "node_health", [](auto&, auto&, auto&) {}, true, ""},
        FilterCase{"draining", "node_health", [](auto&, auto& p, auto&) { p.health = model::NodeHealth::kDraining; }, false, "are draining"}),
    [](const ::testing::TestParamInfo<FilterCase>& info) {
      std::string n = info.param.name;
      for (char& ch : n) if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
      return n;
    });

TEST(FilterKindsTest, OnlyHealthIsTemporary) {
  for (const auto& f : DefaultFilters()) {
    EXPECT_EQ(f->kind() == UnplacedKind::kWaiting, f->name() == "node_health") << f->name();
  }
}

TEST(FitsNowTest, WholeDevicesAndFractionsBestFit) {
  NodeFree free{8000, 64 * kGiB, {1000, 300, 600, 1000}};
  std::vector<int32_t> devs;
  model::ResourceRequest whole;
  whole.device_count = 2;
  whole.cpu_milli = 1000;
  ASSERT_TRUE(FitsNow(whole, free, &devs));
  EXPECT_EQ(devs, (std::vector<int32_t>{0, 3}));
  whole.device_count = 3;
  EXPECT_FALSE(FitsNow(whole, free, &devs));
  model::ResourceRequest frac;
  frac.device_count = 1;
  frac.device_share_milli = 250;
  frac.cpu_milli = 500;
  ASSERT_TRUE(FitsNow(frac, free, &devs));
  EXPECT_EQ(devs, std::vector<int32_t>{1});  // the fullest device that still has room
  frac.device_share_milli = 500;
  ASSERT_TRUE(FitsNow(frac, free, &devs));
  EXPECT_EQ(devs, std::vector<int32_t>{2});
  frac.cpu_milli = 9000;
  EXPECT_FALSE(FitsNow(frac, free, &devs));
  EXPECT_EQ(ShortResource(frac, free), "free CPU");
}

}  // namespace
}  // namespace meridian::sched
