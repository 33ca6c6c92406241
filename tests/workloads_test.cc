// The workloads end to end, as real processes: data made by the workload's own
// generator, put on a local cluster's agents at three sites, and verified by a job.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "local_cluster.h"

namespace meridian::testing {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

const model::TaskView* TaskNamed(const model::JobView& v, const std::string& name) {
  for (const model::TaskView& t : v.tasks) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

TEST(WorkloadsTest, AChainSpreadOverThreeSitesIsVerifiedWhereItsShardsLie) {
  LocalCluster cluster(SourceDir() + "/tests/fleets/local-three-sites.yaml");
  ASSERT_TRUE(cluster.Up());
  const std::string dir = cluster.dir() + "/chain";
  CommandResult gen = Meridian({"chain", "generate", "--out", dir, "--blocks", "12", "--transactions-per-block", "150",
                                "--accounts", "200", "--forged", "3", "--tampered", "2", "--shards", "6", "--sites",
                                "us-east,eu-west,factory", "--seed", "5", "--json"});
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  const nlohmann::json made = nlohmann::json::parse(gen.out);
  const std::string expected = made["expected_report"];
  EXPECT_EQ(made["transactions"], 1800);
  // Five bad transactions, reported by height and index (the seed fixes which).
  EXPECT_NE(expected.find("bad_signatures=5 "), std::string::npos) << expected;
  CommandResult put =
      Meridian({"data", "put", dir, "--by-site", "--name", "chain", "--dir", cluster.dir()});
  ASSERT_EQ(put.exit_code, 0) << put.err;
  EXPECT_NE(put.out.find("6 shards"), std::string::npos) << put.out;

  StatusOr<model::JobView> v = cluster.RunJob(ReadAll(SourceDir() + "/examples/jobs/chain-verify.yaml"));
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  ASSERT_EQ(v->summary.job.status, model::JobStatus::kSucceeded) << v->summary.job.reason;
  const model::TaskView* report = TaskNamed(*v, "report");
  ASSERT_NE(report, nullptr);
  EXPECT_EQ(report->record.output, expected);
  // Shards in order of site name, two each: eu-west's, factory's, us-east's; each was
  // verified at its site, and only reports crossed sites.
  const char* sites[] = {"eu-west", "eu-west", "factory", "factory", "us-east", "us-east"};
  for (int i = 0; i < 6; ++i) {
    const model::TaskView* t = TaskNamed(*v, "verify/" + std::to_string(i));
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->record.site, sites[i]) << "verify/" << i;
  }
  int64_t crossed = 0, local = 0;
  for (const model::JobTraffic& t : v->traffic) (t.from_site == t.to_site ? local : crossed) += t.bytes;
  EXPECT_EQ(local, made["bytes"].get<int64_t>());
  EXPECT_LT(crossed, 6 * 1024);

  // Bytes that are not blocks: the task fails, saying where and why.
  std::filesystem::create_directories(cluster.dir() + "/junk");
  cluster.WriteFile("junk/0.mbk", std::string(200, 'x'));
  ASSERT_EQ(Meridian({"data", "put", cluster.dir() + "/junk", "--name", "junk", "--dir", cluster.dir()}).exit_code, 0);
  StatusOr<model::JobView> bad = cluster.RunJob(
      "name: junk\ntasks:\n  - {name: verify, kernel: chain-verify, map: {over: dataset://junk}}\n");
  ASSERT_TRUE(bad.ok()) << bad.status().ToString();
  EXPECT_EQ(bad->summary.job.status, model::JobStatus::kFailed);
  EXPECT_NE(bad->summary.job.reason.find("input 0: byte 0: not a block (blocks start with 'MBK1')"), std::string::npos)
      << bad->summary.job.reason;
}

}  // namespace
}  // namespace meridian::testing
