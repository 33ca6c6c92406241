// The workloads end to end, as real processes: data made by the workload's own
// generator, put on a local cluster's agents at three sites, and verified by a job.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "local_cluster.h"

namespace meridian::testing {
namespace {

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

TEST(WorkloadsTest, QaoaRunsAsRoundsOfCircuitsOnSimulatorsAndReachesTheOptimum) {
  LocalCluster cluster(SourceDir() + "/tests/fleets/quantum-lab.yaml");
  ASSERT_TRUE(cluster.Up());
  StatusOr<model::JobView> v = cluster.RunJob(ReadAll(SourceDir() + "/examples/jobs/qaoa-maxcut.yaml"));
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  ASSERT_EQ(v->summary.job.status, model::JobStatus::kSucceeded) << v->summary.job.reason;
  EXPECT_EQ(v->tasks.size(), 156u);  // 6 rounds of 25 circuits and an optimiser step
  // Every circuit ran on a simulator device (the QPU-SIM boxes or the A100).
  for (const model::TaskView& t : v->tasks) {
    if (t.name.rfind("round", 0) != 0) continue;
    EXPECT_TRUE(t.record.node.rfind("qsim-box-", 0) == 0 || t.record.node == "cloud-a100") << t.name << " on " << t.record.node;
  }
  // After six rounds the grid is 1/32 of the first: the expected cut is within 1e-3 of
  // one layer's best, 4.110068884448432 (a dense numpy search), and the most likely
  // assignment is a best cut, 5 of 6 edges, the classical answer beside it.
  const model::TaskView* last = TaskNamed(*v, "step6");
  ASSERT_NE(last, nullptr);
  const std::string& out = last->record.output;
  EXPECT_EQ(out.rfind("qaoa-search round=7 ", 0), 0u) << out;
  const size_t at = out.find(" expectation=");
  ASSERT_NE(at, std::string::npos) << out;
  EXPECT_NEAR(std::stod(out.substr(at + 13)), 4.110068884448432, 1e-3) << out;
  EXPECT_NE(out.find(" likely=00101 likely_cut=5 max_cut=5 edges=6\n"), std::string::npos) << out;

  // Circuits as tasks: GHZ's counts of 1,000 shots and Grover's answer.
  StatusOr<model::JobView> c = cluster.RunJob(ReadAll(SourceDir() + "/examples/jobs/circuits.yaml"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->summary.job.status, model::JobStatus::kSucceeded) << c->summary.job.reason;
  const model::TaskView* ghz = TaskNamed(*c, "ghz");
  ASSERT_NE(ghz, nullptr);
  EXPECT_EQ(ghz->record.output.rfind("qsim qubits=12 clbits=12 gates=12 fused=12 output=counts\n", 0), 0u)
      << ghz->record.output;
  int64_t shots = 0;
  for (const char* outcome : {"000000000000 ", "111111111111 "}) {
    const size_t p = ghz->record.output.find(outcome);
    ASSERT_NE(p, std::string::npos) << ghz->record.output;
    shots += std::stoll(ghz->record.output.substr(p + 13));
  }
  EXPECT_EQ(shots, 1000) << ghz->record.output;
  const model::TaskView* grover = TaskNamed(*c, "grover");
  ASSERT_NE(grover, nullptr);
  // A circuit whose task asked for no memory is refused before its state is made.
  StatusOr<model::JobView> bare = cluster.RunJob(
      "name: bare\ntasks:\n  - {name: a, kernel: qsim, args: {circuit: \"OPENQASM 2.0; qreg q[4]; h q;\"}}\n");
  ASSERT_TRUE(bare.ok()) << bare.status().ToString();
  EXPECT_EQ(bare->summary.job.status, model::JobStatus::kFailed);
  EXPECT_NE(bare->summary.job.reason.find(
                "kernel qsim: 4 qubits need 256 B of state; this task was given 0 B (ask for it: resources: {qubits: 4})"),
            std::string::npos)
      << bare->summary.job.reason;
  EXPECT_EQ(grover->record.output,
            "qsim qubits=3 clbits=3 gates=43 fused=19 output=probabilities\n101 0.9453125\n000 0.0078125\n"
            "001 0.0078125\n");
}

}  // namespace
}  // namespace meridian::testing
