// RunProcess's output while the child runs (on_output): each byte told once, in
// order, with the totals; what a slow reader missed is counted, never silently cut.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/subprocess.h"

namespace meridian {
namespace {

// The child writes a line, then waits for the test to let it go on: the first line
// is told while it runs, before the second exists.
TEST(SubprocessTest, OutputIsToldWhileTheChildRunsEachByteOnce) {
  const std::string gate = std::filesystem::temp_directory_path() / ("meridian-gate-" + std::to_string(getpid()));
  std::filesystem::remove(gate);
  ProcessOptions p;
  p.argv = {"sh", "-c", "echo first; echo warn >&2; while [ ! -e " + gate + " ]; do sleep 0.02; done; echo second"};
  p.output_interval_us = 20'000;
  p.timeout_us = 60'000'000;
  std::vector<OutputSoFar> told;
  p.on_output = [&](const OutputSoFar& o) {
    told.push_back(o);
    // The first report holds both streams' first lines once both were read.
    if (o.stdout_bytes >= 6 && o.stderr_bytes >= 5) std::ofstream(gate) << "go";
  };
  std::atomic<bool> stop{false};
  StatusOr<ProcessResult> r = RunProcess(p, stop);
  std::filesystem::remove(gate);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->exit_code, 0);
  EXPECT_EQ(r->stdout_tail, "first\nsecond\n");
  EXPECT_EQ(r->stdout_bytes, 13);
  EXPECT_EQ(r->stderr_bytes, 5);
  // What was told, joined, is a prefix of each stream whose length is the last total.
  std::string out, err;
  for (const OutputSoFar& o : told) {
    out += o.stdout_new;
    err += o.stderr_new;
    EXPECT_EQ(static_cast<int64_t>(out.size()), o.stdout_bytes);
    EXPECT_EQ(static_cast<int64_t>(err.size()), o.stderr_bytes);
  }
  ASSERT_FALSE(told.empty());
  EXPECT_EQ(out.substr(0, 6), "first\n");
  EXPECT_EQ(err, "warn\n");
  EXPECT_EQ(r->stdout_tail.rfind(out, 0), 0u) << out;
}

// More output between two reports than a tail holds: the report carries the newest
// max_tail bytes, and its total says how many came before them.
TEST(SubprocessTest, AReportOfMoreThanATailCarriesTheNewestAndTheTotal) {
  const std::string gate = std::filesystem::temp_directory_path() / ("meridian-gate2-" + std::to_string(getpid()));
  std::filesystem::remove(gate);
  ProcessOptions p;
  // 3000 bytes at once ("0123456789" 300 times), then a wait for the gate.
  p.argv = {"sh", "-c", "i=0; while [ $i -lt 300 ]; do printf 0123456789; i=$((i+1)); done; "
                        "while [ ! -e " + gate + " ]; do sleep 0.02; done"};
  p.max_tail = 100;
  p.output_interval_us = 20'000;
  p.timeout_us = 60'000'000;
  std::vector<OutputSoFar> told;
  p.on_output = [&](const OutputSoFar& o) {
    told.push_back(o);
    if (o.stdout_bytes == 3000) std::ofstream(gate) << "go";
  };
  std::atomic<bool> stop{false};
  StatusOr<ProcessResult> r = RunProcess(p, stop);
  std::filesystem::remove(gate);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_FALSE(told.empty());
  EXPECT_EQ(told.back().stdout_bytes, 3000);
  for (const OutputSoFar& o : told) EXPECT_LE(o.stdout_new.size(), 100u);
  // The newest bytes, whole: the last report ends where the output does.
  const std::string& last = told.back().stdout_new;
  std::string expected;
  for (int i = 0; i < 300; ++i) expected += "0123456789";
  EXPECT_EQ(expected.substr(expected.size() - last.size()), last);
  EXPECT_EQ(r->stdout_bytes, 3000);
  EXPECT_EQ(r->stdout_tail, expected.substr(2900));
}

// The fields of a /proc/PID/status text: "SigBlk" -> its value.
std::map<std::string, std::string> StatusFields(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const size_t value = line.find_first_not_of(" \t", colon + 1);
    out[line.substr(0, colon)] = value == std::string::npos ? "" : line.substr(value);
  }
  return out;
}

// The agent and coordinator block SIGINT and SIGTERM in every thread (they wait for
// them) and ignore SIGPIPE: a task's program once started with both blocked, so its
// own SIGTERM handling never ran. It starts with none blocked and SIGPIPE default.
// A server raises its soft limit on open files to the hard one; what it starts gets
// the limit it had before (a program using select() breaks past 1024), as before the
// raise. In a process of its own: the limit it had is remembered for good.
TEST(SubprocessTest, TheOpenFileLimitIsRaisedForThisProcessNotWhatItStarts) {
  rlimit before{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &before), 0);
  ASSERT_NE(before.rlim_max, RLIM_INFINITY);
  ASSERT_GT(before.rlim_max, rlim_t{64});
  int report[2];
  ASSERT_EQ(pipe(report), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(report[0]);
    rlimit low = before;
    low.rlim_cur = 64;
    std::string seen = setrlimit(RLIMIT_NOFILE, &low) == 0 ? "" : "setrlimit failed; ";
    seen += std::to_string(CurrentOpenFileLimit()) + " ";
    const OpenFileLimit raised = RaiseOpenFileLimit();
    seen += std::to_string(raised.before) + " " + std::to_string(raised.now) + " " +
            std::to_string(CurrentOpenFileLimit()) + " | ";
    ProcessOptions o;
    o.argv = {"sh", "-c", "echo $(ulimit -Sn) $(ulimit -Hn)"};
    o.env = CurrentEnvironment();
    std::atomic<bool> stop{false};
    StatusOr<ProcessResult> r = RunProcess(o, stop);
    seen += r.ok() ? r->stdout_head : r.status().ToString();
    const ssize_t wrote = write(report[1], seen.data(), seen.size());
    _exit(wrote == static_cast<ssize_t>(seen.size()) ? 0 : 1);
  }
  close(report[1]);
  std::string seen;
  char buf[256];
  for (ssize_t n; (n = read(report[0], buf, sizeof(buf))) > 0;) seen.append(buf, static_cast<size_t>(n));
  close(report[0]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  const std::string hard = std::to_string(before.rlim_max);
  EXPECT_EQ(seen, "64 64 " + hard + " " + hard + " | 64 " + hard + "\n");
}

TEST(SubprocessTest, AChildStartsWithNoSignalBlockedAndSigpipeDefault) {
  sigset_t before;
  pthread_sigmask(SIG_SETMASK, nullptr, &before);
  BlockTerminationSignals();
  struct sigaction old_pipe;
  sigaction(SIGPIPE, nullptr, &old_pipe);
  IgnoreBrokenPipes();
  ProcessOptions p;
  p.argv = {"cat", "/proc/self/status"};
  std::atomic<bool> stop{false};
  StatusOr<ProcessResult> r = RunProcess(p, stop);
  sigset_t during;
  pthread_sigmask(SIG_SETMASK, &before, &during);
  sigaction(SIGPIPE, &old_pipe, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // Ours is as it was: the start left our mask alone.
  EXPECT_EQ(sigismember(&during, SIGTERM), 1);
  EXPECT_EQ(sigismember(&during, SIGINT), 1);
  std::map<std::string, std::string> status = StatusFields(r->stdout_head);
  EXPECT_EQ(status["SigBlk"], "0000000000000000") << r->stdout_head;
  EXPECT_EQ(status["SigIgn"], "0000000000000000") << r->stdout_head;
}

// Stopped with a grace period, a child's group gets SIGTERM first: a child that ends
// on it ends as it chooses (a server draining its requests), one that ignores it gets
// SIGKILL when the grace is over; without one, SIGKILL at once.
TEST(SubprocessTest, AStoppedChildGetsSigtermAndItsGraceBeforeSigkill) {
  auto run = [](const std::string& script, int64_t grace_us, int64_t* stopped_for_us) {
    ProcessOptions p;
    p.argv = {"/bin/sh", "-c", script};
    p.stop_grace_us = grace_us;
    std::atomic<bool> stop{false};
    std::chrono::steady_clock::time_point stopped_at;
    std::thread stopper([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      stopped_at = std::chrono::steady_clock::now();
      stop = true;
    });
    StatusOr<ProcessResult> r = RunProcess(p, stop);
    stopper.join();
    *stopped_for_us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() -
                                                                          stopped_at).count();
    return r;
  };
  int64_t took_us = 0;
  StatusOr<ProcessResult> drains =
      run("trap 'echo draining; sleep 0.2; echo drained; exit 3' TERM; echo up; while :; do sleep 0.05; done",
          5'000'000, &took_us);
  ASSERT_TRUE(drains.ok()) << drains.status().ToString();
  EXPECT_TRUE(drains->stopped);
  EXPECT_EQ(drains->signal, 0);
  EXPECT_EQ(drains->exit_code, 3);
  EXPECT_EQ(drains->stdout_head, "up\ndraining\ndrained\n");
  EXPECT_LT(took_us, 5'000'000);  // it ended on its own, not at the grace's end
  StatusOr<ProcessResult> ignores = run("trap '' TERM; echo up; while :; do sleep 0.05; done", 400'000, &took_us);
  ASSERT_TRUE(ignores.ok());
  EXPECT_EQ(ignores->signal, SIGKILL);
  EXPECT_EQ(ignores->stdout_head, "up\n");
  EXPECT_GE(took_us, 400'000);
  StatusOr<ProcessResult> no_grace =
      run("trap 'echo never; exit 0' TERM; echo up; while :; do sleep 0.05; done", 0, &took_us);
  ASSERT_TRUE(no_grace.ok());
  EXPECT_EQ(no_grace->signal, SIGKILL);
  EXPECT_EQ(no_grace->stdout_head, "up\n");
}

// As root, a child switched to another user is that user, and the switch touches
// neither this process nor its other threads (the child shares our memory until exec).
TEST(SubprocessTest, AChildRunsAsItsUserAndTheCallerKeepsItsOwn) {
  if (geteuid() != 0) GTEST_SKIP() << "switching users needs root";
  std::atomic<bool> done{false};
  std::thread other([&] {
    while (!done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  });
  ProcessOptions p;
  p.argv = {"cat", "/proc/self/status"};
  p.uid = 65534;
  p.gid = 65534;
  std::atomic<bool> stop{false};
  StatusOr<ProcessResult> r = RunProcess(p, stop);
  done = true;
  other.join();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::map<std::string, std::string> child = StatusFields(r->stdout_head);
  EXPECT_EQ(child["Uid"], "65534\t65534\t65534\t65534");
  EXPECT_EQ(child["Gid"], "65534\t65534\t65534\t65534");
  EXPECT_EQ(child["Groups"], "");
  // Every thread of ours is still root.
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream in(entry.path() / "status");
    std::stringstream text;
    text << in.rdbuf();
    EXPECT_EQ(StatusFields(text.str())["Uid"], "0\t0\t0\t0") << entry.path();
  }
  EXPECT_EQ(getuid(), 0u);
  EXPECT_EQ(getgid(), 0u);
}

// Many threads starting children at once (as an agent starting a job's tasks): each
// gets its own child's output, whole.
TEST(SubprocessTest, ManyThreadsStartChildrenAtOnceEachGettingItsOwnOutput) {
  constexpr int kThreads = 32;
  std::vector<std::string> outputs(kThreads);
  std::vector<int> codes(kThreads, -1);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      ProcessOptions p;
      p.argv = {"sh", "-c", "echo child $0; exit $(($0 % 3))", std::to_string(i)};
      std::atomic<bool> stop{false};
      StatusOr<ProcessResult> r = RunProcess(p, stop);
      if (!r.ok()) return;
      outputs[i] = r->stdout_tail;
      codes[i] = r->exit_code;
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kThreads; ++i) {
    EXPECT_EQ(outputs[i], "child " + std::to_string(i) + "\n");
    EXPECT_EQ(codes[i], i % 3);
  }
}

}  // namespace
}  // namespace meridian
