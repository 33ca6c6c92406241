#include "agent/reports.h"

#include <gtest/gtest.h>

namespace meridian::agent {
namespace {

model::TaskUpdate Update(uint32_t task, model::UpdateKind kind, std::string out = "", int64_t out_bytes = 0) {
  model::TaskUpdate u;
  u.key = model::TaskKey{1, task, 1};
  u.kind = kind;
  u.stdout_tail = std::move(out);
  u.stdout_bytes = out_bytes;
  return u;
}

TEST(ReportsTest, RunningOutputMergesUntilAcknowledgedAndAnEndIsNeverOverwritten) {
  Reports r;
  r.Add(Update(0, model::UpdateKind::kRunning, "ab", 2));
  r.Add(Update(0, model::UpdateKind::kRunning, "cd", 4));
  model::AgentHeartbeat hb;
  Reports::Sent sent = r.ForHeartbeat(hb);
  ASSERT_EQ(hb.updates.size(), 1u);
  EXPECT_EQ(hb.updates[0].stdout_tail, "abcd");
  EXPECT_EQ(hb.updates[0].stdout_bytes, 4);
  EXPECT_FALSE(r.AnyEnded());
  r.Add(Update(0, model::UpdateKind::kSucceeded));
  r.Add(Update(0, model::UpdateKind::kRunning, "late", 8));  // after the end: dropped
  EXPECT_TRUE(r.Ended(model::TaskKey{1, 0, 1}));
  // The heartbeat's answer came after the end: the end, newer, is kept.
  r.Acknowledged(sent);
  ASSERT_EQ(r.size(), 1u);
  model::AgentHeartbeat next;
  sent = r.ForHeartbeat(next);
  ASSERT_EQ(next.updates.size(), 1u);
  EXPECT_EQ(next.updates[0].kind, model::UpdateKind::kSucceeded);
  r.Acknowledged(sent);
  EXPECT_EQ(r.size(), 0u);
}

TEST(ReportsTest, EndedAttemptsGoFirstAndMessagesStayWithinTheirBound) {
  Reports r;
  r.Add(Update(0, model::UpdateKind::kRunning, "x", 1));
  const std::string big(kMaxReportBytesPerMessage / 2, 'o');
  for (uint32_t t = 1; t <= 3; ++t) {
    model::TaskUpdate u = Update(t, model::UpdateKind::kSucceeded);
    u.output = big;
    r.Add(u);
  }
  model::AgentHeartbeat hb;
  const Reports::Sent sent = r.ForHeartbeat(hb);
  // One 2 MiB report fits, a second passes the 4 MiB bound: the next beat takes it,
  // and the running one's output, which comes after the ended ones, waits too.
  ASSERT_EQ(hb.updates.size(), 1u);
  EXPECT_EQ(hb.updates[0].key.task, 1u);
  r.Acknowledged(sent);
  EXPECT_EQ(r.size(), 3u);

  // A registration carries ended attempts up to the bound, the rest as running.
  model::AgentRegistration reg;
  r.ForRegistration(reg);
  ASSERT_EQ(reg.unacked.size(), 1u);
  EXPECT_EQ(reg.unacked[0].key.task, 2u);
  ASSERT_EQ(reg.running.size(), 1u);
  EXPECT_EQ(reg.running[0].task, 3u);
  r.Registered(reg);
  EXPECT_EQ(r.size(), 1u);
  EXPECT_TRUE(r.Ended(model::TaskKey{1, 3, 1}));
}

TEST(ReportsTest, ObjectChangesComeToEachObjectsLastChange) {
  // x dropped then put again, y put then dropped, z put: in the order they happened.
  std::deque<ObjectChange> changes = {{{"x", 0}, false}, {{"y", 5}, true}, {{"x", 7}, true},
                                      {{"y", 5}, false}, {{"z", 3}, true}, {{"w", 1}, false}};
  model::AgentHeartbeat hb;
  NetObjectChanges(changes, 5, hb);  // w is for the next heartbeat
  ASSERT_EQ(hb.objects_added.size(), 2u);
  EXPECT_EQ(hb.objects_added[0].id, "x");
  EXPECT_EQ(hb.objects_added[0].size, 7);
  EXPECT_EQ(hb.objects_added[1].id, "z");
  EXPECT_EQ(hb.objects_removed, std::vector<std::string>{"y"});
}

}  // namespace
}  // namespace meridian::agent
