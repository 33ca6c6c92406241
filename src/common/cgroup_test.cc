// Task containment with cgroup v2: what a task started outside its process group dies
// with it, and an agent starting after a crash kills what its tasks left. Skipped,
// saying why, where this machine gives no writable cgroup2 file system.
#include "common/cgroup.h"

#include <signal.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "common/subprocess.h"

namespace meridian {
namespace {

// A daemon: a sleep in a session of its own (out of the task's process group), its
// pid printed once it has left the group.
const char* kDaemon =
    "setsid sleep 300 >/dev/null 2>&1 & d=$!; "
    "while [ \"$(cut -d' ' -f6 /proc/$d/stat)\" = \"$(cut -d' ' -f6 /proc/$$/stat)\" ]; do sleep 0.01; done; "
    "echo $d";

bool GoneWithin2s(int pid) {
  for (int i = 0; i < 200; ++i) {
    if (!ProcessRunning(pid, "sleep")) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

class CgroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StatusOr<CgroupTree> tree = CgroupTree::Open("meridian-test-" + std::to_string(std::random_device{}()));
    if (!tree.ok()) GTEST_SKIP() << "cgroup v2 is not usable here: " << tree.status().message();
    tree_.emplace(std::move(*tree));
  }
  void TearDown() override {
    if (tree_) tree_->Remove();
  }
  std::optional<CgroupTree> tree_;
};

TEST_F(CgroupTest, ADaemonATaskStartedDiesWithTheTask) {
  std::atomic<bool> stop{false};
  ProcessOptions p;
  p.argv = {"/bin/sh", "-c", kDaemon};
  p.env = CurrentEnvironment();
  // Without a cgroup the daemon outlives its task: it left the process group.
  StatusOr<ProcessResult> loose = RunProcess(p, stop);
  ASSERT_TRUE(loose.ok()) << loose.status().ToString();
  const int escaped = std::stoi(loose->stdout_head);
  EXPECT_FALSE(loose->in_cgroup);
  EXPECT_FALSE(GoneWithin2s(escaped));
  kill(escaped, SIGKILL);

  p.cgroup = tree_->TaskCgroup("task-1");
  StatusOr<ProcessResult> held = RunProcess(p, stop);
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  EXPECT_TRUE(held->in_cgroup);
  EXPECT_EQ(held->exit_code, 0);
  EXPECT_TRUE(GoneWithin2s(std::stoi(held->stdout_head)));
  EXPECT_FALSE(std::filesystem::exists(p.cgroup));
}

TEST_F(CgroupTest, AStoppedTaskTakesEverythingInItsCgroupWithIt) {
  std::atomic<bool> stop{false};
  ProcessOptions p;
  p.argv = {"/bin/sh", "-c", std::string(kDaemon) + "; sleep 300"};
  p.env = CurrentEnvironment();
  p.cgroup = tree_->TaskCgroup("task-2");
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    stop = true;
  });
  StatusOr<ProcessResult> r = RunProcess(p, stop);
  stopper.join();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->stopped);
  EXPECT_TRUE(GoneWithin2s(std::stoi(r->stdout_head)));
  EXPECT_FALSE(std::filesystem::exists(p.cgroup));
}

TEST_F(CgroupTest, WhatAnEarlierAgentsTasksLeftIsKilledWhenTheTreeIsOpenedAgain) {
  // A task cgroup with a process in it, as a crashed agent leaves it.
  const std::string task = tree_->TaskCgroup("task-3");
  ASSERT_TRUE(std::filesystem::create_directory(task));
  StatusOr<int> pid = SpawnDetached({"/bin/sleep", "300"}, "/dev/null");
  ASSERT_TRUE(pid.ok());
  std::ofstream(task + "/cgroup.procs") << *pid;
  StatusOr<CgroupTree> again = CgroupTree::Open(std::filesystem::path(tree_->path()).filename().string());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->path(), tree_->path());
  EXPECT_EQ(again->KillAll(), 1);
  EXPECT_TRUE(ChildExited(*pid) || GoneWithin2s(*pid));
  EXPECT_FALSE(std::filesystem::exists(task));
}

}  // namespace
}  // namespace meridian
