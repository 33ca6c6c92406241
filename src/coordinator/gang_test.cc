// Gangs at run time: their members placed and started in one pass, each told where
// the others run, and run again together (or failing the job) when one stops.
#include <map>
#include <set>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "coordinator/coordinator_test_util.h"

namespace meridian::coordinator {
namespace {

using ::testing::HasSubstr;

class GangTest : public CoordinatorTest {
 protected:
  // Two nodes of 4 cores, a job of two 3-core replicas: one on each.
  void StartTwoNodes(const std::string& job_yaml) {
    Start();
    model::AgentRegistration a = Node("n1");
    a.transfer_address = "10.0.0.1:7001";
    model::AgentRegistration b = Node("n2");
    b.transfer_address = "[fd00::2]:7002";
    n1_ = Register(a);
    n2_ = Register(b);
    auto r = coord_->Submit(job_yaml, "gang.yaml", "");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    job_ = r->job_id;
  }

  // Each node's next batch, which must hold one assignment; by rank. The cancels the
  // batches held go to `cancels`.
  std::vector<std::pair<model::RegistrationReply, model::TaskAssignment>> Placed(
      std::vector<model::TaskKey>* cancels = nullptr) {
    std::vector<std::pair<model::RegistrationReply, model::TaskAssignment>> out(2);
    for (const model::RegistrationReply& n : {n1_, n2_}) {
      auto b = coord_->NextAssignments(n.node_id, n.session, 2'000'000);
      EXPECT_TRUE(b.ok());
      if (!b.ok()) return {};
      if (cancels) cancels->insert(cancels->end(), b->cancel.begin(), b->cancel.end());
      const std::vector<model::TaskAssignment>& a = b->assignments;
      EXPECT_EQ(a.size(), 1u);
      if (a.size() != 1 || a[0].gang.rank > 1) return {};
      out[a[0].gang.rank] = {n, a[0]};
    }
    return out;
  }

  // The cancels in a node's next batch.
  std::vector<model::TaskKey> Cancels(const model::RegistrationReply& n) {
    auto b = coord_->NextAssignments(n.node_id, n.session, 2'000'000);
    EXPECT_TRUE(b.ok());
    return b.ok() ? b->cancel : std::vector<model::TaskKey>{};
  }

  model::RegistrationReply n1_, n2_;
  uint64_t job_ = 0;
};

constexpr const char* kTwoReplicas =
    "name: train\ntasks:\n  - {name: worker, command: [train], replicas: 2, retries: 1, resources: {cpu: 3}}\n";

TEST_F(GangTest, EveryMemberIsToldTheWholeGangAndRankZerosAddress) {
  StartTwoNodes(kTwoReplicas);
  auto placed = Placed();
  ASSERT_EQ(placed.size(), 2u);
  const model::GangInfo& g0 = placed[0].second.gang;
  const model::GangInfo& g1 = placed[1].second.gang;
  EXPECT_EQ(placed[0].second.task_name, "worker/0");
  EXPECT_EQ(placed[1].second.task_name, "worker/1");
  EXPECT_EQ(g0.name, "worker");
  ASSERT_EQ(g0.members.size(), 2u);
  // Where each rank runs, the host its agent advertises (brackets off an IPv6 one).
  const bool zero_on_n1 = placed[0].first.node_id == n1_.node_id;
  EXPECT_EQ(g0.members[0].node, zero_on_n1 ? "n1" : "n2");
  EXPECT_EQ(g0.members[1].node, zero_on_n1 ? "n2" : "n1");
  EXPECT_EQ(g0.members[0].host, zero_on_n1 ? "10.0.0.1" : "fd00::2");
  EXPECT_EQ(g0.members[1].site, "s1");
  EXPECT_EQ(g0.master_addr, g0.members[0].host);
  EXPECT_GE(g0.master_port, 29500);
  EXPECT_LT(g0.master_port, 30500);
  // Rank 1 is told the same gang.
  EXPECT_EQ(g1.rank, 1u);
  EXPECT_EQ(g1.master_addr, g0.master_addr);
  EXPECT_EQ(g1.master_port, g0.master_port);
  EXPECT_EQ(g1.members[1].node, g0.members[1].node);
  // One launch secret for this run of the gang, the same for every member.
  EXPECT_EQ(g0.secret.size(), 64u);
  EXPECT_EQ(g1.secret, g0.secret);
}

TEST_F(GangTest, AMemberThatFailsRunsTheWholeGangAgainOnAnotherPort) {
  StartTwoNodes(kTwoReplicas);
  auto first = Placed();
  ASSERT_EQ(first.size(), 2u);
  const int32_t first_port = first[0].second.gang.master_port;
  Report(first[0].first, {Running(first[0].second.key, "step 100\n")});
  // Rank 1 fails; it has a retry: rank 0 is stopped and both run again, together.
  Report(first[1].first, {Failed(first[1].second.key, "exit code 1")});
  std::vector<model::TaskKey> cancels;
  auto second = Placed(&cancels);
  ASSERT_EQ(second.size(), 2u);
  EXPECT_EQ(cancels, std::vector<model::TaskKey>{first[0].second.key});
  EXPECT_EQ(second[0].second.key.attempt, 2);
  EXPECT_EQ(second[1].second.key.attempt, 2);
  EXPECT_EQ(second[1].second.gang.master_port, second[0].second.gang.master_port);
  EXPECT_NE(second[0].second.gang.master_port, first_port);
  EXPECT_EQ(second[1].second.gang.secret, second[0].second.gang.secret);
  EXPECT_NE(second[0].second.gang.secret, first[0].second.gang.secret);
  // The stopped rank's own report of its cancelled attempt changes nothing.
  model::TaskUpdate cancelled;
  cancelled.key = first[0].second.key;
  cancelled.kind = model::UpdateKind::kCancelled;
  cancelled.reason = "killed on cancel";
  Report(first[0].first, {cancelled});
  Report(second[0].first, {Done(second[0].second.key, "r0")});
  Report(second[1].first, {Done(second[1].second.key, "r1")});
  model::JobView v = Job(job_);
  EXPECT_EQ(v.summary.job.status, model::JobStatus::kSucceeded);
  EXPECT_EQ(v.summary.retries, 2);
  ASSERT_EQ(v.tasks.size(), 2u);
  // Rank 0's first attempt: stopped for its gang, neither a failure nor a loss.
  ASSERT_EQ(v.tasks[0].history.size(), 2u);
  EXPECT_EQ(v.tasks[0].history[0].outcome, "lost");
  EXPECT_EQ(v.tasks[0].history[0].reason,
            "its gang 'worker' runs again: 'worker/1' stopped (attempt 1 failed: exit code 1)");
  EXPECT_EQ(v.tasks[0].record.failures, 0);
  EXPECT_EQ(v.tasks[0].record.losses, 0);
  EXPECT_EQ(v.tasks[1].history[0].outcome, "failed");
  EXPECT_EQ(v.tasks[1].record.failures, 1);
  // What rank 0 had reported of its stopped attempt is that attempt's log.
  StatusOr<std::vector<rpc::TaskLog>> logs = Logs(job_, "worker/0");
  ASSERT_TRUE(logs.ok()) << logs.status().ToString();
  ASSERT_EQ(logs->size(), 1u);
  EXPECT_EQ((*logs)[0].record.attempt, 1);
  EXPECT_EQ((*logs)[0].record.stdout_tail, "step 100\n");
}

// An elastic gang: a member that fails is placed again alone, with the same port and
// secret (rank 0's attempt draws them), while the other runs on; the replacement is
// given the newest checkpoint of its task, wherever a node holds those bytes, and each
// checkpoint copy is released once a later attempt or the job's end supersedes it.
TEST_F(GangTest, AnElasticGangPlacesOnlyTheStoppedMemberAgainWithItsCheckpoint) {
  StartTwoNodes(std::string("gang_failure: elastic\n") + kTwoReplicas);
  auto first = Placed();
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0].second.gang.failure, "elastic");
  EXPECT_TRUE(first[1].second.checkpoint.id.empty());
  const std::string x(32, 'a'), y(32, 'c');
  auto checkpoint = [](const model::TaskKey& key, const std::string& id) {
    model::TaskUpdate u;
    u.key = key;
    u.kind = model::UpdateKind::kRunning;
    u.checkpoint = model::HeldObject{id, 10};
    return u;
  };
  // Both ranks keep the same checkpoint (the same bytes): each node holds a copy.
  Report(first[0].first, {checkpoint(first[0].second.key, x)}, {model::HeldObject{x, 10}});
  Report(first[1].first, {checkpoint(first[1].second.key, x)}, {model::HeldObject{x, 10}});
  Report(first[1].first, {Failed(first[1].second.key, "exit code 1")});
  // Only rank 1 runs again, on the node that has room (its own), in the same gang run.
  auto again = coord_->NextAssignments(first[1].first.node_id, first[1].first.session, 2'000'000);
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(again->assignments.size(), 1u);
  const model::TaskAssignment& r1 = again->assignments[0];
  EXPECT_EQ(r1.task_name, "worker/1");
  EXPECT_EQ(r1.key.attempt, 2u);
  EXPECT_EQ(r1.gang.rank, 1u);
  EXPECT_EQ(r1.gang.master_port, first[0].second.gang.master_port);
  EXPECT_EQ(r1.gang.secret, first[0].second.gang.secret);
  EXPECT_EQ(r1.gang.members[0].node, first[0].second.gang.members[0].node);
  EXPECT_EQ(r1.checkpoint.id, x);
  EXPECT_EQ(r1.checkpoint.name, "checkpoint of worker/1");
  EXPECT_EQ(r1.checkpoint.replicas.size(), 2u);
  EXPECT_FALSE(r1.checkpoint.ticket.empty());
  // Rank 0 was neither stopped nor placed again.
  EXPECT_TRUE(Cancels(first[0].first).empty());
  model::JobView v = Job(job_);
  EXPECT_EQ(v.tasks[0].record.attempt, 1u);
  EXPECT_EQ(v.tasks[0].record.status, model::TaskStatus::kRunning);
  // The replacement keeps a newer checkpoint: its first attempt's copy is released.
  Report(first[1].first, {checkpoint(r1.key, y)}, {model::HeldObject{y, 10}});
  auto released = coord_->NextAssignments(first[1].first.node_id, first[1].first.session, 2'000'000);
  ASSERT_TRUE(released.ok());
  EXPECT_EQ(released->release_objects, std::vector<std::string>{x});
  // The job ends: every copy left goes.
  Report(first[0].first, {Done(first[0].second.key, "r0")});
  Report(first[1].first, {Done(r1.key, "r1")});
  EXPECT_EQ(Job(job_).summary.job.status, model::JobStatus::kSucceeded);
  auto end0 = coord_->NextAssignments(first[0].first.node_id, first[0].first.session, 2'000'000);
  auto end1 = coord_->NextAssignments(first[1].first.node_id, first[1].first.session, 2'000'000);
  ASSERT_TRUE(end0.ok() && end1.ok());
  EXPECT_EQ(end0->release_objects, std::vector<std::string>{x});
  EXPECT_EQ(end1->release_objects, std::vector<std::string>{y});
}

TEST_F(GangTest, AMemberLostWithItsNodeFailsAGangThatSaysSo) {
  StartTwoNodes(std::string("gang_failure: fail\n") + kTwoReplicas);
  auto placed = Placed();
  ASSERT_EQ(placed.size(), 2u);
  // The node of rank 1 falls silent: the job fails, rank 0 is stopped.
  const model::RegistrationReply& alive = placed[0].first;
  SilenceAllBut(alive);
  ASSERT_TRUE(Eventually([&] { return Job(job_).summary.job.status == model::JobStatus::kFailed; }));
  model::JobView v = Job(job_);
  EXPECT_THAT(v.summary.job.reason, HasSubstr("task 'worker/1' stopped (attempt 1 lost: "));
  EXPECT_THAT(v.summary.job.reason,
              HasSubstr("and its gang 'worker' fails with any member (gang_failure: fail)"));
  EXPECT_EQ(Cancels(alive), std::vector<model::TaskKey>{placed[0].second.key});
  EXPECT_EQ(v.summary.failed, 1);
  EXPECT_EQ(v.summary.cancelled, 1);
  EXPECT_EQ(v.summary.waiting, 0);
}

TEST_F(GangTest, AGangRunsAgainOnlyWhole) {
  StartTwoNodes(kTwoReplicas);
  auto placed = Placed();
  ASSERT_EQ(placed.size(), 2u);
  Report(placed[0].first, {Done(placed[0].second.key, "r0")});
  Report(placed[1].first, {Failed(placed[1].second.key, "exit code 1")});
  model::JobView v = Job(job_);
  EXPECT_EQ(v.summary.job.status, model::JobStatus::kFailed);
  EXPECT_EQ(v.summary.job.reason,
            "task 'worker/1' stopped (attempt 1 failed: exit code 1) after 'worker/0' of its gang 'worker' had "
            "finished; a gang runs again only whole");
  EXPECT_EQ(v.summary.waiting, 0);
}

TEST_F(GangTest, AGangStartsOnlyOnceEveryMemberMayStart) {
  // Three nodes of 4 cores; gang 'ring' is 'master' (ready at once) and 'worker' (after
  // 'prep'). master waits for worker though a node is free: they start together.
  Start();
  std::vector<model::RegistrationReply> nodes = {Register(Node("a")), Register(Node("b")), Register(Node("c"))};
  auto r = coord_->Submit(
      "name: g\ntasks:\n  - {name: prep, command: [p], resources: {cpu: 4}}\n"
      "  - {name: master, command: [m], gang: ring, resources: {cpu: 4}}\n"
      "  - {name: worker, command: [w], gang: ring, after: [prep], resources: {cpu: 4}}\n",
      "g.yaml", "");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto take = [&](std::map<std::string, std::pair<model::RegistrationReply, model::TaskAssignment>>& got) {
    for (const model::RegistrationReply& n : nodes) {
      auto batch = coord_->NextAssignments(n.node_id, n.session, 300'000);
      ASSERT_TRUE(batch.ok());
      for (const model::TaskAssignment& t : batch->assignments) got[t.task_name] = {n, t};
    }
  };
  std::map<std::string, std::pair<model::RegistrationReply, model::TaskAssignment>> first;
  take(first);
  ASSERT_EQ(first.size(), 1u);
  ASSERT_EQ(first.begin()->first, "prep");
  EXPECT_EQ(Job(r->job_id).tasks[1].record.status, model::TaskStatus::kQueued);
  Report(first["prep"].first, {Done(first["prep"].second.key, "x")});
  std::map<std::string, std::pair<model::RegistrationReply, model::TaskAssignment>> second;
  take(second);
  ASSERT_EQ(second.size(), 2u);
  EXPECT_EQ(second["master"].second.gang.rank, 0u);
  EXPECT_EQ(second["worker"].second.gang.rank, 1u);
  EXPECT_EQ(second["worker"].second.gang.members[0].node, second["master"].second.gang.members[0].node);
}

}  // namespace
}  // namespace meridian::coordinator
