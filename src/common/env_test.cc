#include "common/env.h"

#include <gtest/gtest.h>

#include <set>

#include "testing/fake_clock.h"

namespace meridian {
namespace {

TEST(RandomTest, SameSeedSameSequence) {
  Random a(42), b(42), c(43);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    uint64_t x = a.Next();
    EXPECT_EQ(x, b.Next());
    differs |= x != c.Next();
  }
  EXPECT_TRUE(differs);
}

TEST(RandomTest, KnownFirstValuesPinTheAlgorithm) {
  // Changing the generator silently would change every seeded simulation.
  Random r(1);
  EXPECT_EQ(r.Next(), 0xb3f2af6d0fc710c5ULL);
}

TEST(RandomTest, UniformStaysInRangeAndCoversIt) {
  Random r(7);
  std::set<uint64_t> seen;
  for (int i = 0; i < 1000; ++i) {
    uint64_t v = r.Uniform(10);
    ASSERT_LT(v, 10u);
    seen.insert(v);
    int64_t w = r.UniformRange(-3, 3);
    ASSERT_GE(w, -3);
    ASSERT_LE(w, 3);
    double d = r.UniformDouble();
    ASSERT_GE(d, 0.0);
    ASSERT_LT(d, 1.0);
  }
  EXPECT_EQ(seen.size(), 10u);
}

TEST(ClockTest, FakeClockMovesOnlyWhenTold) {
  testing::FakeClock clock(100);
  EXPECT_EQ(clock.Now().us, 100);
  clock.Advance(50);
  EXPECT_EQ(clock.Now().us, 150);
  EXPECT_GT(clock.WallNow().us, clock.Now().us);
}

TEST(ClockTest, RealClockIsMonotonic) {
  const Clock& c = Env::Default().clock();
  MonotonicTime a = c.Now();
  MonotonicTime b = c.Now();
  EXPECT_LE(a, b);
}

}  // namespace
}  // namespace meridian
