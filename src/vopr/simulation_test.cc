#include "vopr/simulation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace meridian::vopr {
namespace {

using PlantedBug = coordinator::CoordinatorOptions::PlantedBug;

Options Seed(uint64_t seed, PlantedBug bug = PlantedBug::kNone) {
  Options o;
  o.seed = seed;
  o.planted_bug = bug;
  return o;
}

TEST(VoprTest, ASeedReplaysExactly) {
  const Result a = vopr::Run(Seed(7));
  const Result b = vopr::Run(Seed(7));
  ASSERT_TRUE(a.ok) << a.failure;
  EXPECT_EQ(a.trace_digest, b.trace_digest);
  EXPECT_EQ(a.steps, b.steps);
  EXPECT_EQ(a.virtual_us, b.virtual_us);
  EXPECT_EQ(a.messages, b.messages);
  EXPECT_EQ(a.dropped, b.dropped);
  EXPECT_EQ(a.agent_crashes, b.agent_crashes);
  EXPECT_EQ(a.coordinator_crashes, b.coordinator_crashes);
  EXPECT_EQ(a.tasks_committed, b.tasks_committed);
  EXPECT_NE(a.trace_digest, vopr::Run(Seed(8)).trace_digest);
}

// Every kind of fault happens in a few seeds, and every invariant holds through them:
// each client's job is acknowledged once, stored, and ends with every task committed
// once with its own output.
TEST(VoprTest, EveryKindOfFaultHappensAndEveryInvariantHolds) {
  Result sum;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const Result r = vopr::Run(Seed(seed));
    ASSERT_TRUE(r.ok) << "seed " << seed << ": " << r.failure;
    EXPECT_EQ(r.jobs_acknowledged, 12) << "seed " << seed;
    EXPECT_GE(r.tasks_committed, 12) << "seed " << seed;
    sum.dropped += r.dropped;
    sum.duplicated += r.duplicated;
    sum.agent_crashes += r.agent_crashes;
    sum.coordinator_crashes += r.coordinator_crashes;
    sum.commits_torn += r.commits_torn;
  }
  EXPECT_GT(sum.dropped, 0);
  EXPECT_GT(sum.duplicated, 0);
  EXPECT_GT(sum.agent_crashes, 0);
  EXPECT_GT(sum.coordinator_crashes, 0);
  EXPECT_GT(sum.commits_torn, 0);
}

// A coordinator that acknowledges a job before storing it: the first seed finds it.
TEST(VoprTest, FindsAJobAcknowledgedBeforeItIsStored) {
  const Result r = vopr::Run(Seed(1, PlantedBug::kAckBeforeCommit));
  ASSERT_FALSE(r.ok);
  EXPECT_THAT(r.failure, ::testing::HasSubstr("was acknowledged but is not stored"));
  EXPECT_TRUE(vopr::Run(Seed(1)).ok);
}

// A coordinator that takes reports of earlier attempts: found within ten seeds, and the
// seed that finds it finds it again.
TEST(VoprTest, FindsReportsOfEarlierAttemptsTaken) {
  uint64_t found = 0;
  Result first;
  for (uint64_t seed = 1; seed <= 10 && found == 0; ++seed) {
    first = vopr::Run(Seed(seed, PlantedBug::kAcceptStaleReports));
    if (!first.ok) found = seed;
  }
  ASSERT_NE(found, 0u) << "no seed of 1..10 found it";
  // Which seed, and which task, change with any change of the coordinator's logic.
  EXPECT_THAT(first.failure, ::testing::ContainsRegex(
                                 "task [^ ]+:? (committed twice|succeeded with 0 succeeded|attempts [0-9]+ and [0-9]+ "
                                 "both succeeded)"));
  const Result again = vopr::Run(Seed(found, PlantedBug::kAcceptStaleReports));
  EXPECT_EQ(again.failure, first.failure);
  EXPECT_EQ(again.trace_digest, first.trace_digest);
  EXPECT_TRUE(vopr::Run(Seed(found)).ok);
}

}  // namespace
}  // namespace meridian::vopr
