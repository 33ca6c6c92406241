// Distributed training on a local cluster of real processes: an unmodified PyTorch
// DDP script (Debian's python3-torch, gloo on CPU) run as a gang of four ranks at two
// sites, as examples/training/ddp-digits.yaml runs it from the README; and the same
// gang when one rank's agent is killed mid-training.
#include <atomic>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "local_cluster.h"

namespace meridian::testing {
namespace {

// `meridian gang ARGS...` run as a gang member with `env` (and this process's PATH).
CommandResult Gang(const std::vector<std::string>& args, const std::vector<std::string>& env) {
  ProcessOptions p;
  p.argv = {MeridianBinary(), "gang"};
  p.argv.insert(p.argv.end(), args.begin(), args.end());
  p.env = env;
  p.env.push_back(std::string("PATH=") + std::getenv("PATH"));
  p.timeout_us = 60'000'000;
  std::atomic<bool> stop{false};
  StatusOr<ProcessResult> r = RunProcess(p, stop);
  if (!r.ok()) return {-1, "", r.status().ToString()};
  return {r->exit_code, r->stdout_head, r->stderr_tail};
}

TEST(GangLaunchTest, ALaunchMustProveTheGangsSecretAndGetsTheCommandsExitStatus) {
  const std::string dir = ::testing::TempDir() + "gang-launch";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/peers") << "0 n0 s 127.0.0.1\n1 n1 s 127.0.0.1\n";
  const std::vector<std::string> base = {"WORLD_SIZE=2", "MASTER_PORT=31377", "MERIDIAN_GANG_PEERS=" + dir + "/peers"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.end(), base.begin(), base.end());
    return more;
  };
  // Rank 1 waits for its launch; a launcher with another secret is refused (exit 4)
  // and rank 1 goes on waiting; the right secret runs the command, output and status.
  CommandResult served;
  std::thread rank1([&] {
    served = Gang({"mpirun", "--", "unused"}, with({"RANK=1", "MERIDIAN_GANG_SECRET=right"}));
  });
  CommandResult wrong = Gang({"rsh", "rank1", "echo", "never"}, with({"RANK=0", "MERIDIAN_GANG_SECRET=wrong"}));
  EXPECT_EQ(wrong.exit_code, 4);
  EXPECT_EQ(wrong.out, "");
  EXPECT_EQ(wrong.err, "meridian: rank1 refused the launch: not a launch from this gang (no proof of its secret)\n");
  CommandResult bad_rank = Gang({"rsh", "rank2", "true"}, with({"RANK=0", "MERIDIAN_GANG_SECRET=right"}));
  EXPECT_EQ(bad_rank.exit_code, 2);
  EXPECT_EQ(bad_rank.err, "meridian: 'rank2' is not a rank of this gang (rank0 to rank1)\n");
  CommandResult right = Gang({"rsh", "rank1", "echo", "-mca", "x", "'a b'", ";", "echo", "$TMPDIR", ";", "exit", "7"},
                             with({"RANK=0", "MERIDIAN_GANG_SECRET=right"}));
  rank1.join();
  EXPECT_EQ(right.exit_code, 7);
  // The launched command (Open MPI's daemon) has a TMPDIR of its member's own, for its
  // session directory, gone once the launch is over.
  const std::string first_line = "-mca x a b\n";
  ASSERT_EQ(right.out.substr(0, first_line.size()), first_line);
  const std::string tmpdir = right.out.substr(first_line.size());
  EXPECT_EQ(tmpdir.substr(0, 18), "/tmp/meridian-mpi-") << tmpdir;
  EXPECT_EQ(tmpdir.size(), 18 + 6 + 1) << tmpdir;
  EXPECT_FALSE(std::filesystem::exists(tmpdir.substr(0, tmpdir.size() - 1)));
  EXPECT_EQ(served.exit_code, 7);
  // Its own log has the launched command's output too.
  EXPECT_EQ(served.err, "meridian gang: refused a launch that did not prove the gang's secret\n" + right.out);
  // Outside a gang, it says so.
  CommandResult outside = Gang({"mpirun", "--", "true"}, {});
  EXPECT_EQ(outside.exit_code, 2);
  EXPECT_EQ(outside.err,
            "meridian: RANK is not set: meridian gang runs as the command of a gang's member (a task with replicas or "
            "gang)\n");
}

// Every attempt of every task: what a test prints when a gang ran more than once.
std::string History(const model::JobView& v) {
  std::string out;
  for (const model::TaskView& t : v.tasks) {
    for (const model::AttemptRecord& a : t.history) {
      out += "  " + t.name + " attempt " + std::to_string(a.attempt) + " on " + a.node + ": " + a.outcome + " " +
             a.reason + "\n";
    }
  }
  return out;
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

  // Debian's digits as the dataset `digits` (examples/training/mlp-digits.yaml).
  void PutDigits() {
    CommandResult put = Meridian({"data", "put", "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz",
                                  "--name", "digits", "--dir", cluster_->dir()});
    ASSERT_EQ(put.exit_code, 0) << put.err;
  }

  // Submits `spec`, kills rank 2's agent with kill -9 once rank 0 has logged
  // `marker`, starts it again (as a supervisor would: `meridian up` starts only what
  // is not running) and returns the job once it has ended.
  StatusOr<model::JobView> RunKillingRankTwo(const std::string& spec, const std::string& file,
                                             const std::string& marker) {
    StatusOr<rpc::SubmitResult> submitted = cluster_->client().Submit(spec, file);
    if (!submitted.ok()) return submitted.status();
    const uint64_t id = submitted->job_id;
    const bool midway = WaitFor(
        [&] {
          StatusOr<std::vector<rpc::TaskLog>> logs = cluster_->client().Logs(id, "train/0");
          if (!logs.ok()) return false;
          for (const rpc::TaskLog& l : *logs) {
            if (l.record.stderr_tail.find(marker) != std::string::npos) return true;
          }
          return false;
        },
        120);
    if (!midway) return DeadlineExceededError("rank 0 never logged '" + marker + "'");
    StatusOr<model::JobView> before = cluster_->client().GetJob(id, true);
    if (!before.ok()) return before.status();
    if (before->tasks.size() != 4u || before->tasks[2].record.node.empty()) {
      return InternalError("rank 2 is not placed");
    }
    victim_ = before->tasks[2].record.node;
    cluster_->Kill9("agent-" + victim_);
    if (!cluster_->Up()) return InternalError("the cluster did not come up again");
    const bool ended = WaitFor(
        [&] {
          StatusOr<model::JobView> now = cluster_->client().GetJob(id, false);
          return now.ok() && model::IsTerminal(now->summary.job.status);
        },
        300);
    if (!ended) return DeadlineExceededError("the job did not end");
    return cluster_->client().GetJob(id, true);
  }

  std::unique_ptr<LocalCluster> cluster_;
  std::string victim_;  // the node RunKillingRankTwo killed the agent of
};

TEST_F(TrainingTest, AnUnmodifiedDdpScriptTrainsAsAGangOfFourRanksAtTwoSites) {
  StatusOr<model::JobView> v = cluster_->RunJob(Spec(40), "ddp-digits.yaml");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  std::vector<nlohmann::json> ranks = CheckTrained(*v);
  ASSERT_EQ(ranks.size(), 4u);
  EXPECT_EQ(ranks[0]["epochs"], 40);
  // 1,437 training images over four ranks in batches of 16: 22 steps an epoch.
  EXPECT_EQ(ranks[0]["steps_per_epoch"], 22);
  EXPECT_EQ(v->summary.retries, 0) << History(*v);
  std::fprintf(stderr, "ddp: accuracy %s, %s s of training\n", ranks[0]["accuracy"].dump().c_str(),
               ranks[0]["seconds"].dump().c_str());
}

TEST_F(TrainingTest, AnMpiProgramRunsAsAGangWithMeridianAsMpirunsLauncher) {
  CommandResult put = Meridian({"data", "put", SourceDir() + "/examples/training/mpi_pi.py", "--name", "mpi-pi-code",
                                "--dir", cluster_->dir()});
  ASSERT_EQ(put.exit_code, 0) << put.err;
  StatusOr<model::JobView> v =
      cluster_->RunJob(ReadAll(SourceDir() + "/examples/training/mpi-pi.yaml"), "mpi-pi.yaml");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  ASSERT_EQ(v->summary.job.status, model::JobStatus::kSucceeded) << v->summary.job.reason;
  ASSERT_EQ(v->tasks.size(), 4u);
  // Rank 0's member ran mpirun: the program's report is its output.
  const nlohmann::json r = nlohmann::json::parse(v->tasks[0].record.output, nullptr, false);
  ASSERT_FALSE(r.is_discarded()) << v->tasks[0].record.output;
  EXPECT_EQ(r["world_size"], 4);
  EXPECT_EQ(r["rank_sum"], 10);
  EXPECT_LT(r["error"].get<double>(), 1e-10) << r.dump();
  // MPI rank k ran in gang member k: on its node, at its site.
  ASSERT_EQ(r["ranks"].size(), 4u);
  for (size_t k = 0; k < 4; ++k) {
    EXPECT_EQ(r["ranks"][k]["rank"], static_cast<int>(k));
    EXPECT_EQ(r["ranks"][k]["node"], v->tasks[k].record.node) << k;
    EXPECT_EQ(r["ranks"][k]["site"], v->tasks[k].record.site) << k;
  }
  std::map<std::string, int> sites;
  for (const model::TaskView& t : v->tasks) ++sites[t.record.site];
  EXPECT_EQ(sites, (std::map<std::string, int>{{"eu-west", 2}, {"factory", 2}}));
  EXPECT_EQ(v->summary.retries, 0) << History(*v);
}

// Meridian's own trainer as the gang: the digits learnt, every replica identical, and
// the gradients all-reduced hierarchically: each site's first rank (its leader) sent
// the other site the whole gradient once a step, and no other rank sent a byte across;
// ranks of one host send through shared memory.
TEST_F(TrainingTest, TheBuiltInTrainerLearnsTheDigitsAsAGangOfFourRanksAtTwoSites) {
  ASSERT_NO_FATAL_FAILURE(PutDigits());
  StatusOr<model::JobView> v =
      cluster_->RunJob(ReadAll(SourceDir() + "/examples/training/mlp-digits.yaml"), "mlp-digits.yaml");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  std::vector<nlohmann::json> ranks = CheckTrained(*v);
  ASSERT_EQ(ranks.size(), 4u);
  EXPECT_EQ(v->summary.retries, 0) << History(*v);
  // 1,437 training images in steps of 64: 23 steps an epoch, 30 epochs. The gradient
  // of 75 x 128 + 10 parameters and the loss: 9,611 floats.
  const int64_t steps = 30 * 23;
  const int64_t whole = 9611 * 4;
  std::set<std::string> seen;
  for (const nlohmann::json& r : ranks) {
    EXPECT_EQ(r["steps"], steps);
    EXPECT_EQ(r["parameters"], 9610);
    EXPECT_EQ(r["resumed_from"], -1);
    const std::string site = r["site"];
    const std::string other = site == "eu-west" ? "factory" : "eu-west";
    const bool leader = seen.insert(site).second;  // the lowest rank at its site
    if (leader) {
      // (and 8 bytes for each of the two one-number all-reduces that agree where to start)
      EXPECT_EQ(r["bytes_sent"][other], steps * whole + 2 * 8) << r.dump();
    } else {
      EXPECT_FALSE(r["bytes_sent"].contains(other)) << r.dump();
    }
    // The test's agents share one host: every connection is through shared memory
    // (each rank announces itself to the three others before the first step).
    EXPECT_EQ(r["shared_memory_connections"], 3) << r.dump();
  }
  std::fprintf(stderr, "built-in trainer: accuracy %s, loss %s\n", ranks[0]["accuracy"].dump().c_str(),
               ranks[0]["final_loss"].dump().c_str());
}

// The elastic gang of the built-in trainer loses rank 2's agent mid-training: only
// rank 2 is placed again, it resumes from the last checkpoint (an object that every
// rank's node holds) while the other ranks roll back to it and rejoin, and the job
// ends with the accuracy of an undisturbed run (the bar: within 1 point).
TEST_F(TrainingTest, AnElasticGangReplacesOnlyTheLostRankAndResumesFromItsCheckpoint) {
  ASSERT_NO_FATAL_FAILURE(PutDigits());
  std::string spec = ReadAll(SourceDir() + "/examples/training/mlp-digits.yaml");
  const size_t at = spec.find("--epochs 30");
  ASSERT_NE(at, std::string::npos);
  spec.replace(at, 11, "--epochs 120");
  // Undisturbed, for the figure to compare with.
  StatusOr<model::JobView> calm = cluster_->RunJob(spec, "mlp-digits.yaml");
  ASSERT_TRUE(calm.ok()) << calm.status().ToString();
  std::vector<nlohmann::json> undisturbed = CheckTrained(*calm);
  ASSERT_EQ(undisturbed.size(), 4u);

  StatusOr<model::JobView> v = RunKillingRankTwo(spec, "mlp-digits.yaml", "epoch 15/120");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  std::fprintf(stderr, "%s", History(*v).c_str());
  std::vector<nlohmann::json> ranks = CheckTrained(*v);
  ASSERT_EQ(ranks.size(), 4u);
  // Only rank 2 ran again; the others kept their first attempt throughout.
  for (const model::TaskView& t : v->tasks) {
    EXPECT_EQ(t.record.attempt, t.name == "train/2" ? 2 : 1) << t.name << "\n" << History(*v);
  }
  EXPECT_EQ(v->summary.retries, 1) << History(*v);
  // Rank 2's replacement resumed from a checkpoint (a whole epoch's: 23 steps), and
  // every rank rejoined from it at least once, all in one generation.
  EXPECT_GT(ranks[2]["resumed_from"].get<int64_t>(), 0) << ranks[2].dump();
  EXPECT_EQ(ranks[2]["resumed_from"].get<int64_t>() % 23, 0) << ranks[2].dump();
  for (size_t r = 0; r < 4; ++r) {
    EXPECT_EQ(ranks[r]["steps"], 120 * 23);
    EXPECT_EQ(ranks[r]["resumed_from"], ranks[2]["resumed_from"]) << r;
    EXPECT_EQ(ranks[r]["generation"], ranks[0]["generation"]) << r;
    if (r != 2) {
      EXPECT_GE(ranks[r]["rejoins"].get<int>(), 1) << ranks[r].dump();
    }
  }
  const double calm_accuracy = undisturbed[0]["accuracy"].get<double>();
  const double accuracy = ranks[0]["accuracy"].get<double>();
  EXPECT_LE(std::abs(accuracy - calm_accuracy), 0.01) << accuracy << " against " << calm_accuracy;
  std::fprintf(stderr,
               "elastic: accuracy %.4f (undisturbed %.4f), parameters %s the undisturbed run's; rank 2 resumed "
               "from step %s; generation %s\n",
               accuracy, calm_accuracy, ranks[0]["checksum"] == undisturbed[0]["checksum"] ? "equal to" : "differ from",
               ranks[2]["resumed_from"].dump().c_str(), ranks[0]["generation"].dump().c_str());
}

TEST_F(TrainingTest, AGangWhoseRankLosesItsAgentRunsAgainWholeAndStillTrains) {
  // Mid-training: rank 0 has reported its fifth epoch.
  StatusOr<model::JobView> v = RunKillingRankTwo(Spec(200), "ddp-digits.yaml", "epoch 5/200");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  const std::string& victim = victim_;
  std::vector<nlohmann::json> ranks = CheckTrained(*v);
  ASSERT_EQ(ranks.size(), 4u);
  // Every rank ran again (the gang restarts whole), and rank 2's first attempt was
  // lost with its node; no rank used up its retries.
  bool lost_with_node = false;
  for (const model::TaskView& t : v->tasks) {
    EXPECT_GE(t.record.attempt, 2) << t.name;
    EXPECT_LE(t.record.failures, 2) << t.name;
    for (const model::AttemptRecord& a : t.history) {
      if (t.name == "train/2" && a.attempt == 1 && a.node == victim) {
        lost_with_node = a.outcome == "lost" || a.outcome == "failed";
      }
    }
  }
  EXPECT_TRUE(lost_with_node) << History(*v);
  std::fprintf(stderr, "%s", History(*v).c_str());
  std::fprintf(stderr, "ddp after a lost rank: accuracy %s, %d retries\n", ranks[0]["accuracy"].dump().c_str(),
               v->summary.retries);
}

}  // namespace
}  // namespace meridian::testing
