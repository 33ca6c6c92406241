#include "sched/backlog.h"

#include <vector>

#include <gtest/gtest.h>

#include "sched/sched_test_util.h"

namespace meridian::sched {
namespace {

std::vector<Backlog::Handle> Active(Backlog& b) {
  std::vector<Backlog::Handle> out;
  b.Offer(0, [&](const Backlog::Offered& o) { out.push_back(o.handle); });
  return out;
}

NodeFree Free(int64_t cpu_milli, int64_t memory_bytes, std::vector<int32_t> devices) {
  return NodeFree{cpu_milli, memory_bytes, std::move(devices)};
}

TEST(BacklogTest, AParkedTaskComesBackOnlyWhenANodeHasRoomForIt) {
  model::Task one = testing::GpuTask("one", {}, 1);
  model::Task two = testing::GpuTask("two", {}, 2);
  model::Job job = testing::MakeJob("j", {one, one, one, two});
  Backlog b;
  for (uint32_t t = 0; t < 4; ++t) b.Add(t, 0, 10 + t, job, job.tasks[t], false);
  EXPECT_EQ(b.classes(), 2u);
  EXPECT_EQ(Active(b), (std::vector<Backlog::Handle>{0, 1, 2, 3}));
  // A round: every task offered, none has room.
  for (uint32_t t = 0; t < 4; ++t) b.Park(t);
  b.EndRound();
  EXPECT_EQ(b.active(), 0u);
  EXPECT_EQ(b.parked(), 4u);
  EXPECT_FALSE(b.HasWork());

  // One whole device free: one task of one device comes back, the oldest; not the
  // two-device one. The scheduler finds no room for it after all.
  b.Released(Free(64'000, 512 * kGiB, {0, 1000, 400, 0}));
  EXPECT_EQ(Active(b), (std::vector<Backlog::Handle>{0}));
  b.Park(0);
  b.EndRound();
  // Not enough CPU for anything: nothing.
  b.Released(Free(0, 512 * kGiB, {1000, 1000, 1000, 1000}));
  EXPECT_FALSE(b.HasWork());
  // Three devices: up to three one-device tasks and one two-device one.
  b.Released(Free(64'000, 512 * kGiB, {1000, 1000, 1000, 0}));
  EXPECT_EQ(Active(b), (std::vector<Backlog::Handle>{0, 1, 2, 3}));
  // They come back for one round: those the scheduler parks again stay parked,
  // the others are active from then on.
  b.Park(1);
  b.Park(3);
  b.EndRound();
  EXPECT_EQ(Active(b), (std::vector<Backlog::Handle>{0, 2}));
  EXPECT_EQ(b.parked(), 2u);
  EXPECT_TRUE(b.IsParked(1));
  EXPECT_TRUE(b.IsParked(3));
  b.EndRound();
}

TEST(BacklogTest, WhatCameBackIsFlaggedForOneRoundAndNothingIsLostPastTheCap) {
  model::Task one = testing::GpuTask("one", {}, 1);
  model::Job job = testing::MakeJob("j", {one, one, one, one});
  Backlog b;
  for (uint32_t t = 0; t < 4; ++t) b.Add(t, 0, t, job, job.tasks[t], false);
  for (uint32_t t = 1; t < 4; ++t) b.Park(t);
  b.EndRound();
  b.Released(Free(64'000, 512 * kGiB, {1000, 1000, 1000, 1000}));  // room for all three
  std::vector<std::pair<Backlog::Handle, bool>> offered;
  b.Offer(2, [&](const Backlog::Offered& o) { offered.emplace_back(o.handle, o.came_back); });
  // Oldest first, at most two: the active one, then one come back.
  EXPECT_EQ(offered, (std::vector<std::pair<Backlog::Handle, bool>>{{0, false}, {1, true}}));
  b.Park(1);
  b.EndRound();
  // 2 and 3 were not offered: active now, with no claim about where room is.
  offered.clear();
  b.Offer(0, [&](const Backlog::Offered& o) { offered.emplace_back(o.handle, o.came_back); });
  EXPECT_EQ(offered, (std::vector<std::pair<Backlog::Handle, bool>>{{0, false}, {2, false}, {3, false}}));
  EXPECT_TRUE(b.IsParked(1));
  b.EndRound();
  EXPECT_TRUE(b.HasWork());
  b.Remove(0);
  b.Remove(2);
  b.Remove(3);
  EXPECT_FALSE(b.HasWork());
  EXPECT_EQ(b.size(), 1u);
}

// A task queued again (its node failed) has a new seq but keeps its job's
// submission time: it comes back before younger jobs' tasks of its class, as the
// scheduler's queue orders them.
TEST(BacklogTest, WithinAClassTasksComeBackInTheSchedulersQueueOrder) {
  model::Task one = testing::GpuTask("one", {}, 1);
  model::Job job = testing::MakeJob("j", {one, one});
  Backlog b;
  b.Add(0, /*submit_us=*/200, /*seq=*/1, job, job.tasks[0], false);
  b.Add(1, /*submit_us=*/100, /*seq=*/7, job, job.tasks[1], false);  // queued again
  EXPECT_EQ(Active(b), (std::vector<Backlog::Handle>{1, 0}));
  b.Park(0);
  b.Park(1);
  b.EndRound();
  b.Released(Free(64'000, 512 * kGiB, {1000, 0}));
  EXPECT_EQ(Active(b), (std::vector<Backlog::Handle>{1}));
  b.EndRound();
}

TEST(BacklogTest, ClassesSeparateWhatTheFiltersTellApart) {
  model::Job a = testing::MakeJob("a", {testing::GpuTask("x", {"A100"}), testing::GpuTask("y", {"A100"})});
  model::Job other_tenant = a;
  other_tenant.tenant = "team-b";
  model::Job regions = a;
  regions.allowed_regions = {"eu"};
  Backlog b;
  b.Add(0, 0, 0, a, a.tasks[0], false);
  b.Add(1, 0, 1, a, a.tasks[1], false);  // the same class: only the name differs
  EXPECT_EQ(b.classes(), 1u);
  b.Add(2, 0, 2, other_tenant, other_tenant.tasks[0], false);
  b.Add(3, 0, 3, regions, regions.tasks[0], false);
  b.Add(4, 0, 4, a, a.tasks[0], true);  // inputs: a class of its own
  b.Add(5, 0, 5, a, a.tasks[0], true);
  EXPECT_EQ(b.classes(), 5u);

  // A class goes when its last task does, parked or not.
  b.Park(4);
  b.Remove(4);
  b.Remove(5);
  EXPECT_EQ(b.classes(), 3u);
  EXPECT_EQ(b.size(), 4u);
  EXPECT_FALSE(b.Contains(4));
  b.Park(0);
  b.Park(1);
  b.EndRound();
  b.Remove(0);
  EXPECT_TRUE(b.IsParked(1));
  b.UnparkAll();
  EXPECT_EQ(Active(b), (std::vector<Backlog::Handle>{1, 2, 3}));
  // Handles are reused after removal.
  b.Add(0, 0, 9, a, a.tasks[0], false);
  EXPECT_EQ(Active(b), (std::vector<Backlog::Handle>{1, 2, 3, 0}));
}

TEST(BacklogTest, FitCountIsTheLeastOfCpuMemoryAndDeviceShares) {
  model::ResourceRequest r;
  r.cpu_milli = 4000;
  r.memory_bytes = 8 * kGiB;
  r.device_count = 1;
  r.device_share_milli = 300;
  // Devices: 3 + 1 + 0 shares of 300.
  EXPECT_EQ(Backlog::FitCount(r, Free(64'000, 512 * kGiB, {1000, 500, 200})), 4);
  EXPECT_EQ(Backlog::FitCount(r, Free(12'500, 512 * kGiB, {1000, 500, 200})), 3);
  EXPECT_EQ(Backlog::FitCount(r, Free(64'000, 17 * kGiB, {1000, 500, 200})), 2);
  r.device_count = 2;
  r.device_share_milli = 1000;
  EXPECT_EQ(Backlog::FitCount(r, Free(64'000, 512 * kGiB, {1000, 1000, 1000, 999})), 1);
  r.device_count = 0;
  r.cpu_milli = 0;
  r.memory_bytes = 0;
  EXPECT_GT(Backlog::FitCount(r, Free(0, 0, {})), 1'000'000'000);
}

}  // namespace
}  // namespace meridian::sched
