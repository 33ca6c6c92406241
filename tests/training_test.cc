// Distributed training on a local cluster of real processes: an unmodified PyTorch
// DDP script (Debian's python3-torch, gloo on CPU) run as a gang of four ranks at two
// sites, as examples/training/ddp-digits.yaml runs it from the README; and the same
// gang when one rank's agent is killed mid-training.
#include <map>
#include <set>

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

class TrainingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = std::make_unique<LocalCluster>(SourceDir() + "/examples/fleets/two-sites-training.yaml");
    ASSERT_TRUE(cluster_->Up());
    CommandResult put = Meridian({"data", "put", SourceDir() + "/examples/training/ddp_digits.py", "--name",
                                  "ddp-digits-code", "--dir", cluster_->dir()});
    ASSERT_EQ(put.exit_code, 0) << put.err;
  }

  // The example's spec, with `epochs` in place of its own.
  std::string Spec(int epochs) const {
    std::string spec = ReadAll(SourceDir() + "/examples/training/ddp-digits.yaml");
    const std::string from = "EPOCHS: \"40\"";
    const size_t at = spec.find(from);
    EXPECT_NE(at, std::string::npos);
    if (at != std::string::npos) spec.replace(at, from.size(), "EPOCHS: \"" + std::to_string(epochs) + "\"");
    return spec;
  }

  // Each rank's report (its output, one JSON line), checked to be one run of one
  // model: ranks 0..3 of four, the same parameters on all, at least 95% accuracy.
  std::vector<nlohmann::json> CheckTrained(const model::JobView& v) {
    EXPECT_EQ(v.summary.job.status, model::JobStatus::kSucceeded) << v.summary.job.reason;
    std::vector<nlohmann::json> ranks;
    std::map<std::string, int> sites;
    for (const model::TaskView& t : v.tasks) {
      EXPECT_EQ(t.record.status, model::TaskStatus::kSucceeded) << t.name;
      const nlohmann::json r = nlohmann::json::parse(t.record.output, nullptr, false);
      EXPECT_FALSE(r.is_discarded()) << t.name << ": " << t.record.output;
      if (r.is_discarded()) return {};
      ranks.push_back(r);
      ++sites[t.record.site];
      EXPECT_EQ(r["site"], t.record.site);
    }
    EXPECT_EQ(ranks.size(), 4u);
    // Two ranks at each site: a gang spread over the WAN.
    EXPECT_EQ(sites, (std::map<std::string, int>{{"eu-west", 2}, {"factory", 2}}));
    for (size_t i = 0; i < ranks.size(); ++i) {
      EXPECT_EQ(ranks[i]["rank"], static_cast<int>(i));
      EXPECT_EQ(ranks[i]["world_size"], 4);
      // DDP kept the replicas in step: every rank holds the very same parameters.
      EXPECT_EQ(ranks[i]["checksum"], ranks[0]["checksum"]) << i;
      EXPECT_EQ(ranks[i]["accuracy"], ranks[0]["accuracy"]) << i;
    }
    EXPECT_GE(ranks[0]["accuracy"].get<double>(), 0.95) << ranks[0].dump();
    return ranks;
  }

  std::unique_ptr<LocalCluster> cluster_;
};

TEST_F(TrainingTest, AnUnmodifiedDdpScriptTrainsAsAGangOfFourRanksAtTwoSites) {
  StatusOr<model::JobView> v = cluster_->RunJob(Spec(40), "ddp-digits.yaml");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  std::vector<nlohmann::json> ranks = CheckTrained(*v);
  ASSERT_EQ(ranks.size(), 4u);
  EXPECT_EQ(ranks[0]["epochs"], 40);
  // 1,437 training images over four ranks in batches of 16: 22 steps an epoch.
  EXPECT_EQ(ranks[0]["steps_per_epoch"], 22);
  EXPECT_EQ(v->summary.retries, 0);
  std::fprintf(stderr, "ddp: accuracy %s, %s s of training\n", ranks[0]["accuracy"].dump().c_str(),
               ranks[0]["seconds"].dump().c_str());
}

TEST_F(TrainingTest, AGangWhoseRankLosesItsAgentRunsAgainWholeAndStillTrains) {
  StatusOr<rpc::SubmitResult> submitted = cluster_->client().Submit(Spec(200), "ddp-digits.yaml");
  ASSERT_TRUE(submitted.ok()) << submitted.status().ToString();
  const uint64_t id = submitted->job_id;
  // Mid-training: rank 0 has reported its fifth epoch.
  ASSERT_TRUE(WaitFor(
      [&] {
        StatusOr<std::vector<rpc::TaskLog>> logs = cluster_->client().Logs(id, "train/0");
        if (!logs.ok()) return false;
        for (const rpc::TaskLog& l : *logs) {
          if (l.record.stderr_tail.find("epoch 5/200") != std::string::npos) return true;
        }
        return false;
      },
      120));
  StatusOr<model::JobView> before = cluster_->client().GetJob(id, true);
  ASSERT_TRUE(before.ok());
  ASSERT_EQ(before->tasks.size(), 4u);
  const std::string victim = before->tasks[2].record.node;  // rank 2's node
  ASSERT_FALSE(victim.empty());
  cluster_->Kill9("agent-" + victim);
  // The node comes back, as a supervisor would bring it (`meridian up` starts only
  // what is not running); the gang runs again once every rank can be placed.
  ASSERT_TRUE(cluster_->Up());
  ASSERT_TRUE(WaitFor(
      [&] {
        StatusOr<model::JobView> now = cluster_->client().GetJob(id, false);
        return now.ok() && model::IsTerminal(now->summary.job.status);
      },
      300));
  StatusOr<model::JobView> v = cluster_->client().GetJob(id, true);
  ASSERT_TRUE(v.ok());
  std::vector<nlohmann::json> ranks = CheckTrained(*v);
  ASSERT_EQ(ranks.size(), 4u);
  // Every rank ran again (the gang restarts whole), and rank 2's first attempt was
  // lost with its node; no rank used up its retries.
  bool lost_with_node = false;
  for (const model::TaskView& t : v->tasks) {
    EXPECT_GE(t.record.attempt, 2) << t.name;
    EXPECT_LE(t.record.failures, 2) << t.name;
    for (const model::AttemptRecord& a : t.history) {
      std::fprintf(stderr, "  %s attempt %d on %s: %s %s\n", t.name.c_str(), a.attempt, a.node.c_str(),
                   a.outcome.c_str(), a.reason.c_str());
      if (t.name == "train/2" && a.attempt == 1 && a.node == victim) {
        lost_with_node = a.outcome == "lost" || a.outcome == "failed";
      }
    }
  }
  EXPECT_TRUE(lost_with_node);
  std::fprintf(stderr, "ddp after a lost rank: accuracy %s, %d retries\n", ranks[0]["accuracy"].dump().c_str(),
               v->summary.retries);
}

}  // namespace
}  // namespace meridian::testing
