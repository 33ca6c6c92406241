// A warm interpreter starts a Python script exactly as `python SCRIPT` would: the same
// output, exit status, traceback, arguments, directory, environment, user and cgroup;
// kills and timeouts reach it; it never trusts what the interpreter says.
#include "agent/warm_python.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "common/cgroup.h"
#include "common/subprocess.h"

namespace meridian::agent {
namespace {

class WarmPythonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("meridian-warm-python-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    chmod(dir_.c_str(), 0755);  // the scripts are read by other users too
    WarmPythonOptions o;
    o.log_path = (dir_ / "warm.log").string();
    warm_ = std::make_unique<WarmPython>(o);
  }
  void TearDown() override {
    warm_.reset();
    std::filesystem::remove_all(dir_);
  }

  std::string Script(const std::string& name, const std::string& text) {
    const std::filesystem::path p = dir_ / name;
    std::ofstream(p) << text;
    chmod(p.c_str(), 0644);
    return p.string();
  }

  ProcessOptions Options(std::vector<std::string> argv) {
    ProcessOptions p;
    p.argv = std::move(argv);
    p.cwd = dir_.string();
    p.env = {"PATH=/usr/bin:/bin", "LANG=C.UTF-8", "FOO=bar"};
    p.rlimits = {{RLIMIT_CORE, 0}};
    return p;
  }

  // Runs `p` warm (asserting it was) and cold.
  std::pair<ProcessResult, ProcessResult> WarmAndCold(ProcessOptions p) {
    std::atomic<bool> stop{false};
    p.launcher = warm_->LauncherFor(p);
    EXPECT_NE(p.launcher, nullptr);
    StatusOr<ProcessResult> warm = RunProcess(p, stop);
    p.launcher = nullptr;
    StatusOr<ProcessResult> cold = RunProcess(p, stop);
    EXPECT_TRUE(warm.ok()) << warm.status().message();
    EXPECT_TRUE(cold.ok()) << cold.status().message();
    return {warm.ok() ? *warm : ProcessResult{}, cold.ok() ? *cold : ProcessResult{}};
  }

  std::filesystem::path dir_;
  std::unique_ptr<WarmPython> warm_;
};

TEST_F(WarmPythonTest, AScriptRunsWarmExactlyAsItRunsCold) {
  const std::string script = Script("show.py",
                                    "import os, sys, resource\n"
                                    "print(sys.argv, os.getcwd(), os.environ['FOO'], sorted(os.environ))\n"
                                    "print(sys.path[0], __name__, __file__, __spec__, __doc__,\n"
                                    "      resource.getrlimit(resource.RLIMIT_CORE))\n"
                                    "print(sys.stdin.read() == '', os.getpgid(0) == os.getpid())\n"
                                    "sys.stdout.write('x' * 200000)\n"
                                    "print('to stderr', file=sys.stderr)\n"
                                    "sys.exit(3)\n");
  auto [warm, cold] = WarmAndCold(Options({"/usr/bin/python3", script, "a b", "c"}));
  EXPECT_EQ(warm.exit_code, 3);
  EXPECT_EQ(warm.signal, 0);
  EXPECT_EQ(warm.stdout_head, cold.stdout_head);
  EXPECT_EQ(warm.stdout_head.substr(0, warm.stdout_head.find('\n')),
            fmt::format("['{}', 'a b', 'c'] {} bar ['FOO', 'LANG', 'PATH']", script, dir_.string()));
  EXPECT_EQ(warm.stdout_bytes, cold.stdout_bytes);
  EXPECT_EQ(warm.stderr_tail, "to stderr\n");
  EXPECT_EQ(warm.stderr_tail, cold.stderr_tail);
  EXPECT_EQ(warm_->warm_starts(), 1);
  EXPECT_EQ(warm_->interpreters_started(), 1);
}

TEST_F(WarmPythonTest, ExceptionsAndExitsEndItAsTheyEndAnInterpreter) {
  const std::string raises = Script("raises.py", "def f():\n    return 1 / 0\n\nf()\n");
  auto [warm, cold] = WarmAndCold(Options({"/usr/bin/python3", raises}));
  EXPECT_EQ(warm.exit_code, 1);
  EXPECT_EQ(warm.stderr_tail, cold.stderr_tail);
  EXPECT_EQ(warm.stderr_tail, fmt::format("Traceback (most recent call last):\n  File \"{0}\", line 4, in <module>\n"
                                          "    f()\n  File \"{0}\", line 2, in f\n    return 1 / 0\n"
                                          "           ~~^~~\nZeroDivisionError: division by zero\n",
                                          raises));
  const std::string says = Script("says.py", "import sys\nsys.exit('no input given')\n");
  std::tie(warm, cold) = WarmAndCold(Options({"/usr/bin/python3", says}));
  EXPECT_EQ(warm.exit_code, 1);
  EXPECT_EQ(warm.stderr_tail, "no input given\n");
  EXPECT_EQ(cold.stderr_tail, "no input given\n");
  // A non-daemon thread is waited for, then atexit hooks run, as at an interpreter's exit.
  const std::string threads = Script("threads.py",
                                     "import atexit, threading, time\n"
                                     "atexit.register(lambda: print('atexit'))\n"
                                     "threading.Thread(target=lambda: (time.sleep(0.2), print('thread'))).start()\n");
  std::tie(warm, cold) = WarmAndCold(Options({"/usr/bin/python3", threads}));
  EXPECT_EQ(warm.exit_code, 0);
  EXPECT_EQ(warm.stdout_head, "thread\natexit\n");
  EXPECT_EQ(cold.stdout_head, "thread\natexit\n");
  std::tie(warm, cold) = WarmAndCold(Options({"/usr/bin/python3", (dir_ / "missing.py").string()}));
  EXPECT_EQ(warm.exit_code, 2);
  EXPECT_EQ(cold.exit_code, 2);
  EXPECT_EQ(warm.stderr_tail, cold.stderr_tail);
  EXPECT_EQ(warm_->warm_starts(), 4);
  EXPECT_EQ(warm_->interpreters_started(), 1);
}

TEST_F(WarmPythonTest, TasksOfOneKeyShareAnInterpreterAndAnotherKeyGetsItsOwn) {
  const std::string script = Script("parent.py", "import os\nprint(os.getppid())\n");
  std::atomic<bool> stop{false};
  std::vector<std::string> parents;
  for (std::string seed : {"", "", "PYTHONHASHSEED=1", ""}) {
    ProcessOptions p = Options({"/usr/bin/python3", script});
    if (!seed.empty()) p.env.push_back(seed);
    p.launcher = warm_->LauncherFor(p);
    ASSERT_NE(p.launcher, nullptr);
    StatusOr<ProcessResult> r = RunProcess(p, stop);
    ASSERT_TRUE(r.ok()) << r.status().message();
    parents.push_back(r->stdout_head);
  }
  EXPECT_EQ(parents[0], parents[1]);
  EXPECT_EQ(parents[0], parents[3]);
  EXPECT_NE(parents[0], parents[2]);  // PYTHONHASHSEED is read as an interpreter starts
  EXPECT_NE(parents[0], fmt::format("{}\n", getpid()));
  EXPECT_EQ(warm_->interpreters_started(), 2);
  EXPECT_EQ(warm_->warm_starts(), 4);
  // Past max_interpreters, the idle one used least recently goes.
  WarmPythonOptions one;
  one.max_interpreters = 1;
  warm_ = std::make_unique<WarmPython>(one);
  for (std::string seed : {"PYTHONHASHSEED=1", "PYTHONHASHSEED=2", "PYTHONHASHSEED=1"}) {
    ProcessOptions p = Options({"/usr/bin/python3", script});
    p.env.push_back(seed);
    p.launcher = warm_->LauncherFor(p);
    ASSERT_NE(p.launcher, nullptr);
    ASSERT_TRUE(RunProcess(p, stop).ok());
  }
  EXPECT_EQ(warm_->interpreters_started(), 3);
}

TEST_F(WarmPythonTest, OnlyPythonScriptsStartWarm) {
  EXPECT_TRUE(WarmPython::IsPythonScript({"python3", "x.py"}));
  EXPECT_TRUE(WarmPython::IsPythonScript({"python3.11", "x.py", "--flag"}));
  EXPECT_TRUE(WarmPython::IsPythonScript({"/usr/bin/python", "a/b.py"}));
  EXPECT_FALSE(WarmPython::IsPythonScript({"python3", "-c", "pass"}));
  EXPECT_FALSE(WarmPython::IsPythonScript({"python3", "-m", "x.py"}));
  EXPECT_FALSE(WarmPython::IsPythonScript({"python3", "x"}));
  EXPECT_FALSE(WarmPython::IsPythonScript({"python3"}));
  EXPECT_FALSE(WarmPython::IsPythonScript({"pythonista", "x.py"}));
  EXPECT_FALSE(WarmPython::IsPythonScript({"sh", "x.py"}));
  EXPECT_EQ(warm_->LauncherFor(Options({"sh", "-c", "true"})), nullptr);
  ProcessOptions nul = Options({"/usr/bin/python3", Script("nul.py", "")});
  nul.env.push_back(std::string("BAD=a\0b", 7));  // cannot cross as a field: cold
  EXPECT_EQ(warm_->LauncherFor(nul), nullptr);
  EXPECT_EQ(warm_->LauncherFor(Options({"python3-not-installed", "x.py"})), nullptr);
  EXPECT_EQ(warm_->interpreters_started(), 0);
}

TEST_F(WarmPythonTest, TimeoutsAndStopsKillIt) {
  const std::string script = Script("sleeps.py", "import subprocess, time\nsubprocess.Popen(['sleep', '30'])\n"
                                                 "print('started', flush=True)\ntime.sleep(30)\n");
  ProcessOptions p = Options({"/usr/bin/python3", script});
  p.timeout_us = 500'000;
  p.launcher = warm_->LauncherFor(p);
  std::atomic<bool> stop{false};
  StatusOr<ProcessResult> r = RunProcess(p, stop);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(r->timed_out);
  EXPECT_EQ(r->signal, SIGKILL);
  EXPECT_EQ(r->stdout_head, "started\n");
  p.timeout_us = 0;
  stop = true;
  r = RunProcess(p, stop);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->stopped);
  EXPECT_EQ(r->signal, SIGKILL);
  EXPECT_EQ(warm_->interpreters_started(), 1);
}

TEST_F(WarmPythonTest, ItJoinsItsTasksCgroupBeforeItRunsAndRunsAsItsUser) {
  if (geteuid() != 0) GTEST_SKIP() << "switching users needs root";
  StatusOr<CgroupTree> tree = CgroupTree::Open(fmt::format("meridian-warm-test-{}", getpid()));
  const std::string who = Script("who.py",
                                 "import os\nprint(os.getuid(), os.getgid(), os.getgroups())\n"
                                 "print(open('/proc/self/cgroup').read().strip())\n");
  ProcessOptions p = Options({"/usr/bin/python3", who});
  p.uid = p.gid = 200'123;
  p.cwd = "/";
  if (tree.ok()) p.cgroup = tree->TaskCgroup("task-1-2-3");
  p.launcher = warm_->LauncherFor(p);
  ASSERT_NE(p.launcher, nullptr);
  std::atomic<bool> stop{false};
  StatusOr<ProcessResult> r = RunProcess(p, stop);
  if (tree.ok()) tree->Remove();
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->exit_code, 0) << r->stderr_tail;
  const std::string first = r->stdout_head.substr(0, r->stdout_head.find('\n') + 1);
  EXPECT_EQ(first, "200123 200123 []\n");
  if (tree.ok()) {
    EXPECT_TRUE(r->in_cgroup);
    const std::string cgroup = r->stdout_head.substr(first.size());
    EXPECT_EQ(cgroup.substr(cgroup.rfind('/') + 1), "task-1-2-3\n") << cgroup;
  }
}

TEST_F(WarmPythonTest, WhatAnInterpreterSaysIsNotTrusted) {
  // A "python" that claims a process that is not its child: it is neither placed,
  // signalled nor waited for, and the start fails (the executor then starts cold).
  const std::filesystem::path bin = dir_ / "bin";
  std::filesystem::create_directories(bin);
  const std::string liar = (bin / "python3").string();
  std::ofstream(liar) << "#!/bin/sh\nprintf 'ready\\n' >&3\nhead -c 16 <&3 >/dev/null\n"
                         "printf 'started 1 %d\\n' $$ >&3\nsleep 30\n";
  chmod(liar.c_str(), 0755);
  ProcessOptions p = Options({liar, Script("any.py", "print(1)\n")});
  p.launcher = warm_->LauncherFor(p);
  ASSERT_NE(p.launcher, nullptr);
  std::atomic<bool> stop{false};
  StatusOr<ProcessResult> r = RunProcess(p, stop);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("could not be placed"), std::string::npos) << r.status().message();
  // One that says what the protocol has not: it is ended, and its task fails to start.
  std::ofstream(liar) << "#!/bin/sh\nprintf 'ready\\n' >&3\nhead -c 16 <&3 >/dev/null\nprintf 'started 7 99\\n' >&3\n"
                         "sleep 30\n";
  p.env.push_back("PYTHONHASHSEED=3");  // another interpreter
  p.launcher = warm_->LauncherFor(p);
  ASSERT_NE(p.launcher, nullptr);
  r = RunProcess(p, stop);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "the warm interpreter did not start the task");
}

TEST_F(WarmPythonTest, AnInterpreterThatCannotStartIsNotTriedForEachTask) {
  WarmPythonOptions o;
  o.cold_after_failure = 3;
  warm_ = std::make_unique<WarmPython>(o);
  const std::string broken = (dir_ / "python3").string();
  std::ofstream(broken) << "#!/bin/sh\nexit 1\n";
  chmod(broken.c_str(), 0755);
  const ProcessOptions p = Options({broken, Script("any.py", "")});
  std::vector<bool> warm;
  for (int i = 0; i < 5; ++i) warm.push_back(warm_->LauncherFor(p) != nullptr);
  EXPECT_EQ(warm, std::vector<bool>(5, false));
  EXPECT_EQ(warm_->interpreters_started(), 0);
  EXPECT_EQ(warm_->start_failures(), 2);  // the first, and the fourth (after 3 cold)
}

}  // namespace
}  // namespace meridian::agent
