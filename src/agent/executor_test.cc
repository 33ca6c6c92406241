// The executor runs kernels and commands and ends each in exactly one final update.
#include "agent/executor.h"

#include <condition_variable>
#include <filesystem>
#include <mutex>

#include <gtest/gtest.h>

namespace meridian::agent {
namespace {

class ExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("meridian-exec-test-" + std::to_string(::getpid()));
    exec_ = std::make_unique<Executor>(ExecutorOptions{dir_.string(), "n1", "s1", false, 2, nullptr, nullptr},
                                       [this](model::TaskUpdate u) {
                                         std::lock_guard<std::mutex> lock(mu_);
                                         updates_.push_back(std::move(u));
                                         cv_.notify_all();
                                       });
  }
  void TearDown() override {
    exec_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Waits for the final update of `key`.
  model::TaskUpdate Final(const model::TaskKey& key) {
    std::unique_lock<std::mutex> lock(mu_);
    model::TaskUpdate found;
    bool ok = cv_.wait_for(lock, std::chrono::seconds(20), [&] {
      for (const model::TaskUpdate& u : updates_) {
        if (u.key == key && u.kind != model::UpdateKind::kRunning) {
          found = u;
          return true;
        }
      }
      return false;
    });
    EXPECT_TRUE(ok) << "no final update";
    return found;
  }

  int FinalCount(const model::TaskKey& key) {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int>(std::count_if(updates_.begin(), updates_.end(), [&](const model::TaskUpdate& u) {
      return u.key == key && u.kind != model::UpdateKind::kRunning;
    }));
  }

  model::TaskAssignment Task(uint32_t index, std::vector<std::string> command, std::string kernel = "") {
    model::TaskAssignment a;
    a.key = {1, index, 1};
    a.task_name = "t" + std::to_string(index);
    a.index = index;
    a.command = std::move(command);
    a.kernel = std::move(kernel);
    a.allocation.cpu_milli = 1000;
    return a;
  }

  std::filesystem::path dir_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<model::TaskUpdate> updates_;
  std::unique_ptr<Executor> exec_;
};

TEST_F(ExecutorTest, KernelsRunWithTheirArgsAndInputs) {
  model::TaskAssignment a = Task(0, {}, "sum");
  a.inputs = {"5", "7"};
  a.args = {{"from", "0"}, {"to", "4"}};
  ASSERT_TRUE(exec_->Start(a));
  model::TaskUpdate u = Final(a.key);
  EXPECT_EQ(u.kind, model::UpdateKind::kSucceeded);
  EXPECT_EQ(u.output, "18");
  model::TaskAssignment bad = Task(1, {}, "sum");
  bad.args = {{"bogus", "1"}};
  ASSERT_TRUE(exec_->Start(bad));
  model::TaskUpdate f = Final(bad.key);
  EXPECT_EQ(f.kind, model::UpdateKind::kFailed);
  EXPECT_NE(f.reason.find("no argument 'bogus'"), std::string::npos) << f.reason;
}

TEST_F(ExecutorTest, CommandsSeeTheirTaskAndInputsAndReportExitCodes) {
  model::TaskAssignment a = Task(3, {"sh", "-c", "echo $MERIDIAN_TASK_INDEX $MERIDIAN_ARG_MY_ARG; cat $MERIDIAN_INPUTS/0"});
  a.args = {{"my-arg", "x"}};
  a.inputs = {"in0"};
  ASSERT_TRUE(exec_->Start(a));
  model::TaskUpdate u = Final(a.key);
  EXPECT_EQ(u.kind, model::UpdateKind::kSucceeded) << u.reason;
  EXPECT_EQ(u.output, "3 x\nin0");
  model::TaskAssignment b = Task(4, {"sh", "-c", "echo oops >&2; exit 5"});
  ASSERT_TRUE(exec_->Start(b));
  model::TaskUpdate f = Final(b.key);
  EXPECT_EQ(f.kind, model::UpdateKind::kFailed);
  EXPECT_EQ(f.exit_code, 5);
  EXPECT_EQ(f.reason, "exit code 5");
  EXPECT_EQ(f.stderr_tail, "oops\n");
}

TEST_F(ExecutorTest, TimeoutsAndCancelsKillTheProcessGroup) {
  model::TaskAssignment slow = Task(5, {"sh", "-c", "sleep 30 & sleep 30"});
  slow.timeout_us = 200'000;
  ASSERT_TRUE(exec_->Start(slow));
  model::TaskUpdate t = Final(slow.key);
  EXPECT_EQ(t.kind, model::UpdateKind::kFailed);
  EXPECT_NE(t.reason.find("timed out after 200 ms"), std::string::npos) << t.reason;
  model::TaskAssignment cancelled = Task(6, {"sleep", "30"});
  ASSERT_TRUE(exec_->Start(cancelled));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  exec_->Cancel(cancelled.key);
  model::TaskUpdate c = Final(cancelled.key);
  EXPECT_EQ(c.kind, model::UpdateKind::kCancelled);
  EXPECT_EQ(FinalCount(cancelled.key), 1);
  // It leaves Running() just after it reports.
  for (int i = 0; i < 100 && !exec_->Running().empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(exec_->Running().empty());
}

TEST_F(ExecutorTest, AnAttemptAlreadyRunningIsNotStartedAgain) {
  model::TaskAssignment a = Task(8, {"sleep", "30"});
  ASSERT_TRUE(exec_->Start(a));
  EXPECT_FALSE(exec_->Start(a)) << "a resent assignment must not start a second copy";
  model::TaskAssignment next = a;
  next.key.attempt = 2;
  EXPECT_TRUE(exec_->Start(next)) << "another attempt is another task";
  exec_->Cancel(a.key);
  exec_->Cancel(next.key);
  EXPECT_EQ(Final(a.key).kind, model::UpdateKind::kCancelled);
  EXPECT_EQ(Final(next.key).kind, model::UpdateKind::kCancelled);
}

TEST_F(ExecutorTest, AMissingProgramIsAClearFailure) {
  model::TaskAssignment a = Task(7, {"definitely-not-a-program"});
  ASSERT_TRUE(exec_->Start(a));
  model::TaskUpdate u = Final(a.key);
  EXPECT_EQ(u.kind, model::UpdateKind::kFailed);
  EXPECT_EQ(u.reason, "cannot run 'definitely-not-a-program': not found in PATH");
}

}  // namespace
}  // namespace meridian::agent
