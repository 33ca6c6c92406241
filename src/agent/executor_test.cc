// The executor runs kernels and commands and ends each in exactly one final update.
#include "agent/executor.h"

#include <netinet/in.h>
#include <sys/socket.h>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <fmt/format.h>

#include "common/subprocess.h"
#include "testing/file_size_limit.h"

namespace meridian::agent {
namespace {

class ExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("meridian-exec-test-" + std::to_string(::getpid()));
    Reset(nullptr, nullptr);
  }
  void Reset(FetchFn fetch, StoreFn store, FetchTogetherFn together = nullptr, PaceFn pace = nullptr,
             int task_uid_base = 0, std::map<int32_t, int64_t> device_memory = {}) {
    exec_.reset();
    ExecutorOptions o{dir_.string(), "n1", "s1", false, 2, std::move(fetch), std::move(store)};
    o.fetch_together = std::move(together);
    o.pace_inline = std::move(pace);
    o.task_uid_base = task_uid_base;
    o.device_memory_bytes = std::move(device_memory);
    o.release_object = release_;
    if (interval_us_ > 0) o.live_output_interval_us = interval_us_;
    exec_ = std::make_unique<Executor>(std::move(o),
                                       [this](model::TaskUpdate u) {
                                         std::lock_guard<std::mutex> lock(mu_);
                                         updates_.push_back(std::move(u));
                                         cv_.notify_all();
                                       });
  }
  std::function<void(const std::string&)> release_;  // for the next Reset
  int64_t interval_us_ = 0;

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

TEST_F(ExecutorTest, AKernelHoldsNoMoreThanTheMemoryItsTaskWasGiven) {
  // Device 0 has 2 MiB; a task given half of it may hold 1 MiB: a 16-qubit state
  // (2^16 amplitudes of 16 bytes), not a 17-qubit one.
  Reset(nullptr, nullptr, nullptr, nullptr, 0, {{0, 2 << 20}});
  auto circuit = [](int qubits) {
    return "OPENQASM 2.0;\ninclude \"qelib1.inc\";\nqreg q[" + std::to_string(qubits) + "];\nh q;\n";
  };
  model::TaskAssignment fits = Task(0, {}, "qsim");
  fits.args = {{"circuit", circuit(16)}, {"top", "1"}};
  fits.allocation.devices = {0};
  fits.allocation.device_share_milli = 500;
  model::TaskAssignment big = fits;
  big.key.task = 1;
  big.args["circuit"] = circuit(17);
  // Without a device, its own memory request is the bound.
  model::TaskAssignment host = Task(2, {}, "qsim");
  host.args = {{"circuit", circuit(10)}};
  host.allocation.memory_bytes = 8 << 10;
  for (const model::TaskAssignment* a : {&fits, &big, &host}) ASSERT_TRUE(exec_->Start(*a));
  EXPECT_EQ(Final(fits.key).kind, model::UpdateKind::kSucceeded);
  model::TaskUpdate refused = Final(big.key);
  EXPECT_EQ(refused.kind, model::UpdateKind::kFailed);
  EXPECT_EQ(refused.reason, "kernel qsim: 17 qubits need 2 MiB of state; this task was given 1 MiB (ask for it: "
                            "resources: {qubits: 17})");
  model::TaskUpdate small = Final(host.key);
  EXPECT_EQ(small.kind, model::UpdateKind::kFailed);
  EXPECT_EQ(small.reason, "kernel qsim: 10 qubits need 16 KiB of state; this task was given 8 KiB (ask for it: "
                          "resources: {qubits: 10})");
}

TEST_F(ExecutorTest, AKernelTaskHoldsItsMemoryRequestOrOneGibInTheAgent) {
  // Kernels run in the agent's process. A task that asks for no memory may hold 1 GiB
  // there: sorting and writing out 100,000,000 generated values (8 bytes each, and
  // "999999999\n" at most) is refused before anything is allocated. It once ran,
  // holding about 3 GiB, and as many at once as the agent has kernel threads.
  model::TaskAssignment unasked = Task(0, {}, "sort");
  unasked.args = {{"generate", "100000000"}};
  // A task that asked for 2 MiB may hold that much: 200,000 values to sort (1.6 MB)
  // but not also their text (2 MB more).
  model::TaskAssignment summary = Task(1, {}, "sort");
  summary.args = {{"generate", "200000"}, {"output", "summary"}, {"seed", "1"}};
  summary.allocation.memory_bytes = 2 << 20;
  model::TaskAssignment values = summary;
  values.key.task = 2;
  values.args.erase("output");
  for (const model::TaskAssignment* a : {&unasked, &summary, &values}) ASSERT_TRUE(exec_->Start(*a));
  model::TaskUpdate refused = Final(unasked.key);
  EXPECT_EQ(refused.kind, model::UpdateKind::kFailed);
  EXPECT_EQ(refused.reason, "kernel sort: 100000000 values to sort and write out need 1.68 GiB; this task may hold "
                            "1 GiB (its resources' memory, 1 GiB when it asks for none): ask for it with resources: "
                            "{memory: 1717MiB}");
  model::TaskUpdate fits = Final(summary.key);
  EXPECT_EQ(fits.kind, model::UpdateKind::kSucceeded) << fits.reason;
  EXPECT_EQ(fits.output.rfind("count=200000 ", 0), 0u) << fits.output;
  model::TaskUpdate big = Final(values.key);
  EXPECT_EQ(big.kind, model::UpdateKind::kFailed);
  EXPECT_EQ(big.reason, "kernel sort: 200000 values to sort and write out need 3.43 MiB; this task may hold 2 MiB "
                        "(its resources' memory, 1 GiB when it asks for none): ask for it with resources: "
                        "{memory: 4MiB}");
}

TEST_F(ExecutorTest, AKernelTasksInputsCountAgainstWhatItMayHoldInTheAgent) {
  // A kernel holds its inputs whole in the agent's memory. Inputs recorded as more
  // than the task may hold are not fetched; inputs that arrive larger than recorded
  // are refused before they are copied. They once ran whatever their size.
  std::mutex m;
  std::vector<std::string> fetched;
  Reset(
      [&](const model::ObjectLocation& o, const std::atomic<bool>&, std::vector<std::string>*) -> StatusOr<FetchedInput> {
        {
          std::lock_guard<std::mutex> lock(m);
          fetched.push_back(o.id);
        }
        auto keep = std::make_shared<std::string>(o.id == "understated" ? std::string((3 << 20) - 1, ' ') + "7" : "1 2 3\n");
        return FetchedInput{keep, *keep, model::InputTransfer{o.id, "s2", "s1", static_cast<int64_t>(keep->size()), 0}};
      },
      nullptr);
  const int64_t mib = 1 << 20;
  model::TaskAssignment big = Task(20, {}, "sum");
  big.allocation.memory_bytes = 2 * mib;
  big.input_objects = {{"a", "", 3 * mib / 2, {}}, {"b", "part-b", 3 * mib / 2, {}}};
  model::TaskAssignment understated = Task(21, {}, "sum");
  understated.allocation.memory_bytes = 2 * mib;
  understated.input_objects = {{"understated", "", 6, {}}};
  // No memory asked: 1 GiB, for an object and an input inline alike.
  model::TaskAssignment fits = Task(22, {}, "sum");
  fits.input_objects = {{"small", "", 6, {}}};
  fits.inputs = {"10"};
  for (const model::TaskAssignment* a : {&big, &understated, &fits}) ASSERT_TRUE(exec_->Start(*a));
  const std::string why = " (its resources' memory, 1 GiB when it asks for none): ask for it with resources: ";
  model::TaskUpdate refused = Final(big.key);
  EXPECT_EQ(refused.kind, model::UpdateKind::kFailed);
  EXPECT_EQ(refused.reason, "kernel sum: its inputs need 3 MiB; this task may hold 2 MiB" + why + "{memory: 3MiB}");
  EXPECT_TRUE(refused.transfers.empty());
  model::TaskUpdate larger = Final(understated.key);
  EXPECT_EQ(larger.kind, model::UpdateKind::kFailed);
  EXPECT_EQ(larger.reason, "kernel sum: its inputs need 3 MiB; this task may hold 2 MiB" + why + "{memory: 3MiB}");
  ASSERT_EQ(larger.transfers.size(), 1u);  // it did move
  EXPECT_EQ(larger.transfers[0].bytes, 3 * mib);
  model::TaskUpdate ran = Final(fits.key);
  EXPECT_EQ(ran.kind, model::UpdateKind::kSucceeded) << ran.reason;
  EXPECT_EQ(ran.output, "16");
  std::lock_guard<std::mutex> lock(m);
  std::sort(fetched.begin(), fetched.end());
  EXPECT_EQ(fetched, (std::vector<std::string>{"small", "understated"}));
}

TEST_F(ExecutorTest, ACommandDoesNotStartOnAnInputItsFileCouldNotHoldWhole) {
  // Inputs go to files in the task's directory. A write that fails (a full disk,
  // here a file size limit of 1 MiB) fails the task naming the input; the command
  // once ran on the first 1 MiB of its 2 MiB input, none the wiser.
  Reset(
      [](const model::ObjectLocation& o, const std::atomic<bool>&, std::vector<std::string>*) -> StatusOr<FetchedInput> {
        auto keep = std::make_shared<std::string>(2 << 20, 'x');
        return FetchedInput{keep, *keep, model::InputTransfer{o.id, "s2", "s1", 2 << 20, 0}};
      },
      nullptr);
  model::TaskAssignment a = Task(23, {"sh", "-c", "wc -c < $MERIDIAN_INPUTS/1"});
  a.inputs = {"small, whole in the assignment"};
  a.input_objects = {{"big", "", 2 << 20, {}}};
  model::TaskAssignment fits = Task(24, {"sh", "-c", "wc -c < $MERIDIAN_INPUTS/0"});
  fits.inputs = {"small, whole in the assignment"};
  auto limit = std::make_unique<testing::FileSizeLimit>(1 << 20);
  ASSERT_TRUE(limit->ok());
  ASSERT_TRUE(exec_->Start(a));
  model::TaskUpdate u = Final(a.key);
  ASSERT_TRUE(exec_->Start(fits));
  model::TaskUpdate ran = Final(fits.key);
  // A gang member's list of peers likewise, here past a limit of 16 bytes.
  model::TaskAssignment member = Task(25, {"sh", "-c", "cat $MERIDIAN_GANG_PEERS"});
  member.gang.name = "worker";
  member.gang.rank = 1;
  member.gang.members = {{"n0", "eu-west", "10.200.1.2"}, {"n1", "factory", "10.200.2.2"}};
  member.gang.master_addr = "10.200.1.2";
  member.gang.master_port = 29517;
  limit->Set(16);
  ASSERT_TRUE(limit->ok());
  ASSERT_TRUE(exec_->Start(member));
  model::TaskUpdate peers = Final(member.key);
  limit.reset();
  EXPECT_EQ(peers.kind, model::UpdateKind::kFailed) << peers.output;
  EXPECT_EQ(peers.reason, fmt::format("cannot write 48 B to {}/tasks/1-25-1/gang-peers: File too large", dir_.string()));
  EXPECT_EQ(u.kind, model::UpdateKind::kFailed) << u.output;
  EXPECT_EQ(u.exit_code, 127);
  EXPECT_EQ(u.reason, fmt::format("input 0: cannot write 2 MiB to {}/tasks/1-23-1/inputs/0: File too large", dir_.string()));
  EXPECT_FALSE(std::filesystem::exists(dir_ / "tasks" / "1-23-1"));
  ASSERT_EQ(u.transfers.size(), 1u);  // it did move
  EXPECT_EQ(ran.kind, model::UpdateKind::kSucceeded) << ran.reason;
  EXPECT_EQ(ran.output, "30\n");
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

TEST_F(ExecutorTest, AGangMemberSeesItsRankItsPeersAndRankZerosAddress) {
  model::TaskAssignment a =
      Task(5, {"sh", "-c", "echo $RANK/$WORLD_SIZE $LOCAL_RANK/$LOCAL_WORLD_SIZE $NODE_RANK $MASTER_ADDR:$MASTER_PORT "
                           "$MERIDIAN_GANG; cat $MERIDIAN_GANG_PEERS"});
  a.gang.name = "worker";
  a.gang.rank = 1;
  a.gang.members = {{"n0", "eu-west", "10.200.1.2"}, {"n1", "factory", "10.200.2.2"}};
  a.gang.master_addr = "10.200.1.2";
  a.gang.master_port = 29517;
  ASSERT_TRUE(exec_->Start(a));
  model::TaskUpdate u = Final(a.key);
  EXPECT_EQ(u.kind, model::UpdateKind::kSucceeded) << u.reason;
  EXPECT_EQ(u.output, "1/2 0/1 1 10.200.1.2:29517 worker\n0 n0 eu-west 10.200.1.2\n1 n1 factory 10.200.2.2\n");
  // Rank 0 whose port is taken here: stopped (the gang runs again), not failed.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  model::TaskAssignment zero = a;
  zero.key.task = 6;
  zero.gang.rank = 0;
  zero.gang.master_port = ntohs(addr.sin_port);
  ASSERT_TRUE(exec_->Start(zero));
  model::TaskUpdate stopped = Final(zero.key);
  close(fd);
  EXPECT_EQ(stopped.kind, model::UpdateKind::kCancelled);
  EXPECT_THAT(stopped.reason, ::testing::HasSubstr("(MASTER_PORT) is taken on this host"));
  // A gang view that does not hold together fails the attempt, saying why.
  model::TaskAssignment bad = a;
  bad.key.task = 7;
  bad.gang.rank = 2;
  ASSERT_TRUE(exec_->Start(bad));
  model::TaskUpdate f = Final(bad.key);
  EXPECT_EQ(f.kind, model::UpdateKind::kFailed);
  EXPECT_EQ(f.reason, "gang 'worker': rank 2 of 2 members");
}

TEST_F(ExecutorTest, CommandsRunAsTheirTenantsUserAndCannotReadAnotherTenantsDirectory) {
  if (geteuid() != 0) GTEST_SKIP() << "switching users needs root";
  Reset(nullptr, nullptr, nullptr, nullptr, 200'000);
  const int uid_a = TaskUid(200'000, "team-a"), uid_b = TaskUid(200'000, "team-b");
  ASSERT_NE(uid_a, uid_b);
  // team-a's task keeps a secret in its directory while it runs.
  model::TaskAssignment a = Task(0, {"sh", "-c", "echo secret > mine; id -u; id -g; id -G; sleep 3"});
  a.tenant = "team-a";
  ASSERT_TRUE(exec_->Start(a));
  const std::filesystem::path a_dir = dir_ / "tasks" / "1-0-1";
  for (int i = 0; i < 200 && !std::filesystem::exists(a_dir / "mine"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // team-b's task tries to read it, and the agent's environment.
  model::TaskAssignment b = Task(1, {"sh", "-c", "id -u; echo HOME=$HOME; env | grep -c '^MERIDIAN_TOKEN' ; cat " +
                                                     (a_dir / "mine").string()});
  b.tenant = "team-b";
  setenv("MERIDIAN_TOKEN", "mrd_agent_secret", 1);
  ASSERT_TRUE(exec_->Start(b));
  model::TaskUpdate ub = Final(b.key);
  unsetenv("MERIDIAN_TOKEN");
  EXPECT_EQ(ub.kind, model::UpdateKind::kFailed);
  EXPECT_EQ(ub.output, "");
  EXPECT_EQ(ub.stdout_tail, fmt::format("{}\nHOME={}\n0\n", uid_b, (dir_ / "tasks" / "1-1-1").string()));
  EXPECT_NE(ub.stderr_tail.find("Permission denied"), std::string::npos) << ub.stderr_tail;
  model::TaskUpdate ua = Final(a.key);
  EXPECT_EQ(ua.kind, model::UpdateKind::kSucceeded) << ua.reason;
  EXPECT_EQ(ua.output, fmt::format("{}\n{}\n{}\n", uid_a, uid_a, uid_a));  // no supplementary groups
}

// A task's directory goes when it ends; an agent that was killed left those of the
// tasks it ran, and a restarted agent in the same work directory did not remove them.
TEST_F(ExecutorTest, TaskDirectoriesAnEarlierAgentLeftAreRemovedWhenItStarts) {
  exec_.reset();
  std::filesystem::create_directories(dir_ / "tasks" / "7-0-1" / "inputs");
  std::ofstream(dir_ / "tasks" / "7-0-1" / "big.out") << "what the killed agent's task wrote";
  std::filesystem::create_directories(dir_ / "tasks" / "7-1-2");
  Reset(nullptr, nullptr);
  EXPECT_EQ(exec_->tasks_root(), dir_ / "tasks");
  EXPECT_TRUE(std::filesystem::is_empty(dir_ / "tasks"));
  // And it runs tasks there as before.
  model::TaskAssignment a = Task(0, {"sh", "-c", "pwd"});
  ASSERT_TRUE(exec_->Start(a));
  model::TaskUpdate u = Final(a.key);
  EXPECT_EQ(u.kind, model::UpdateKind::kSucceeded) << u.reason;
  EXPECT_EQ(u.output, (dir_ / "tasks" / "1-0-1").string() + "\n");
}

// Tasks that run as their tenant's user and cannot reach the work directory (under a
// directory of mode 0700) have theirs in /tmp: in a directory named after the work
// directory, so that a restarted agent finds what a killed one left there (one named
// at random was left behind for ever).
TEST_F(ExecutorTest, TheTasksDirectoryInTmpIsFoundAgainByARestartedAgent) {
  if (geteuid() != 0) GTEST_SKIP() << "switching users needs root";
  exec_.reset();
  std::filesystem::create_directories(dir_);
  std::filesystem::permissions(dir_, std::filesystem::perms::owner_all, std::filesystem::perm_options::replace);
  Reset(nullptr, nullptr, nullptr, nullptr, 200'000);
  const std::filesystem::path root = exec_->tasks_root();
  EXPECT_EQ(root.parent_path(), std::filesystem::temp_directory_path());
  EXPECT_TRUE(root.filename().string().starts_with("meridian-tasks-0-")) << root;
  EXPECT_EQ(std::filesystem::status(root).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_all | std::filesystem::perms::group_exec | std::filesystem::perms::others_exec);
  // The agent is killed with a task's directory there; another starts in its place
  // (the first executor stays, as a killed agent's removes nothing).
  std::filesystem::create_directories(root / "3-0-1" / "checkpoints");
  std::ofstream(root / "3-0-1" / "mine") << "left";
  ExecutorOptions o{dir_.string(), "n1", "s1", false, 2, nullptr, nullptr};
  o.task_uid_base = 200'000;
  auto restarted = std::make_unique<Executor>(std::move(o), [](model::TaskUpdate) {});
  EXPECT_EQ(restarted->tasks_root(), root);
  EXPECT_TRUE(std::filesystem::is_empty(root));
  restarted.reset();
  EXPECT_FALSE(std::filesystem::exists(root));  // stopped, it removes its own
}

TEST_F(ExecutorTest, PythonScriptsForkFromAWarmInterpreterAsTheirTenantsUserInTheirTaskDirectory) {
  const bool root = geteuid() == 0;
  if (root) Reset(nullptr, nullptr, nullptr, nullptr, 200'000);
  std::filesystem::create_directories(dir_);
  const std::string script = (dir_ / "task.py").string();
  std::ofstream(script) << "import os, time\n"
                           "print(os.getuid(), os.getcwd() == os.environ['HOME'], os.environ['MERIDIAN_TASK_INDEX'],\n"
                           "      os.environ.get('MERIDIAN_TOKEN'), open(os.environ['MERIDIAN_INPUTS'] + '/0').read())\n"
                           "if os.environ['MERIDIAN_TASK_INDEX'] == '2':\n"
                           "    time.sleep(30)\n";
  chmod(dir_.c_str(), 0755);
  chmod(script.c_str(), 0644);
  setenv("MERIDIAN_TOKEN", "mrd_agent_secret", 1);
  std::vector<model::TaskAssignment> tasks;
  for (uint32_t i = 0; i < 3; ++i) {
    tasks.push_back(Task(i, {"/usr/bin/python3", script}));
    tasks.back().tenant = "team-a";
    tasks.back().inputs = {"in" + std::to_string(i)};
    ASSERT_TRUE(exec_->Start(tasks.back()));
  }
  const int uid = root ? TaskUid(200'000, "team-a") : static_cast<int>(geteuid());
  for (uint32_t i = 0; i < 2; ++i) {
    model::TaskUpdate u = Final(tasks[i].key);
    EXPECT_EQ(u.kind, model::UpdateKind::kSucceeded) << u.reason << u.stderr_tail;
    EXPECT_EQ(u.output, fmt::format("{} True {} None in{}\n", uid, i, i));
  }
  // A cancel reaches a warm task as it reaches any.
  exec_->Cancel(tasks[2].key);
  model::TaskUpdate c = Final(tasks[2].key);
  unsetenv("MERIDIAN_TOKEN");
  EXPECT_EQ(c.kind, model::UpdateKind::kCancelled);
  EXPECT_EQ(c.reason, "killed on cancel");
  EXPECT_EQ(exec_->warm_python_starts(), 3);
}

TEST_F(ExecutorTest, WithoutTaskUsersCommandsRunAsTheAgentWithoutCoreDumps) {
  model::TaskAssignment a = Task(0, {"sh", "-c", "id -u; ulimit -c"});
  ASSERT_TRUE(exec_->Start(a));
  model::TaskUpdate u = Final(a.key);
  EXPECT_EQ(u.kind, model::UpdateKind::kSucceeded) << u.reason;
  EXPECT_EQ(u.output, fmt::format("{}\n0\n", geteuid()));
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

TEST_F(ExecutorTest, ADaemonACommandLeftIsKilledWithItWhereCgroupsCanBeUsed) {
  if (!CgroupTree::Open("meridian-exec-probe").ok()) GTEST_SKIP() << "cgroup v2 is not usable here";
  CgroupTree::Open("meridian-exec-probe")->Remove();
  // The daemon leaves the task's process group and session: only its cgroup holds it.
  model::TaskAssignment a = Task(7, {"sh", "-c",
                                     "setsid sleep 300 >/dev/null 2>&1 & d=$!; "
                                     "while [ \"$(cut -d' ' -f6 /proc/$d/stat)\" = \"$(cut -d' ' -f6 /proc/$$/stat)\" ]; "
                                     "do sleep 0.01; done; echo $d"});
  ASSERT_TRUE(exec_->Start(a));
  model::TaskUpdate u = Final(a.key);
  ASSERT_EQ(u.kind, model::UpdateKind::kSucceeded) << u.reason;
  const int daemon = std::stoi(u.output);
  bool gone = false;
  for (int i = 0; i < 200 && !gone; ++i) {
    gone = !ProcessRunning(daemon, "sleep");
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(gone) << "daemon " << daemon << " outlived its task";
  if (!gone) kill(daemon, SIGKILL);
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

TEST_F(ExecutorTest, StdoutPastWhatATaskMayReturnFailsTheTaskAndIsNeverCut) {
  // Without an object store a task returns at most 1 MiB. Once, a command writing more
  // succeeded with its output silently cut to 1,048,576 bytes.
  model::TaskAssignment exact = Task(10, {"sh", "-c", "head -c 1048576 /dev/zero"});
  ASSERT_TRUE(exec_->Start(exact));
  model::TaskUpdate ok = Final(exact.key);
  EXPECT_EQ(ok.kind, model::UpdateKind::kSucceeded) << ok.reason;
  EXPECT_EQ(ok.output.size(), 1048576u);
  model::TaskAssignment over = Task(11, {"sh", "-c", "head -c 1048577 /dev/zero"});
  ASSERT_TRUE(exec_->Start(over));
  model::TaskUpdate f = Final(over.key);
  EXPECT_EQ(f.kind, model::UpdateKind::kFailed);
  EXPECT_NE(f.reason.find("wrote more than 1 MiB to stdout; a task returns at most that"), std::string::npos)
      << f.reason;
  EXPECT_TRUE(f.output.empty());
}

TEST_F(ExecutorTest, ALargeOutputBecomesAnObjectAndTheReportCarriesItsStart) {
  std::mutex stored_mu;
  std::vector<size_t> stored;
  Reset(nullptr, [&](const std::string& output) -> StatusOr<model::HeldObject> {
    std::lock_guard<std::mutex> lock(stored_mu);
    stored.push_back(output.size());
    return model::HeldObject{std::string(32, 'e'), static_cast<int64_t>(output.size())};
  });
  model::TaskAssignment big = Task(12, {"sh", "-c", "head -c 2097152 /dev/zero | tr '\\0' x"});
  ASSERT_TRUE(exec_->Start(big));
  model::TaskUpdate u = Final(big.key);
  EXPECT_EQ(u.kind, model::UpdateKind::kSucceeded) << u.reason;
  EXPECT_EQ(u.output, std::string(model::kOutputPreviewBytes, 'x'));
  EXPECT_EQ(u.output_object.size, 2097152);
  std::lock_guard<std::mutex> lock(stored_mu);
  EXPECT_EQ(stored, std::vector<size_t>{2097152});
}

// A command leaves checkpoints as $MERIDIAN_CHECKPOINT_DIR/checkpoint: each new one is
// kept as an object and reported with the running attempt, the one it replaces is
// released, a link put in its place is not followed, and the last one is collected
// when the command ends. The next attempt given a checkpoint finds it at
// $MERIDIAN_CHECKPOINT (not among its inputs).
TEST_F(ExecutorTest, ACommandsCheckpointsAreKeptAsObjectsAndTheNextAttemptGetsOne) {
  std::mutex m;
  std::vector<std::string> released;
  release_ = [&](const std::string& id) {
    std::lock_guard<std::mutex> lock(m);
    released.push_back(id);
  };
  interval_us_ = 20'000;
  Reset(
      [](const model::ObjectLocation& o, const std::atomic<bool>&, std::vector<std::string>*) -> StatusOr<FetchedInput> {
        if (o.id == "id-gone") return NotFoundError("n2 has no object id-gone");
        auto keep = std::make_shared<std::string>("state at step 7");
        return FetchedInput{keep, *keep, model::InputTransfer{o.id, "s2", "s1", 15, 0}};
      },
      [](const std::string& bytes) -> StatusOr<model::HeldObject> {
        return model::HeldObject{"id-" + bytes, static_cast<int64_t>(bytes.size())};
      });
  const std::string put = "printf %s \"$1\" > \"$MERIDIAN_CHECKPOINT_DIR/.p\" && mv \"$MERIDIAN_CHECKPOINT_DIR/.p\" "
                          "\"$MERIDIAN_CHECKPOINT_DIR/checkpoint\"";
  model::TaskAssignment a = Task(
      30, {"sh", "-c",
           "put() { " + put + "; }; put one; sleep 0.3; put twotwo; sleep 0.3; "
           "ln -s /etc/hostname \"$MERIDIAN_CHECKPOINT_DIR/x\" && mv -f \"$MERIDIAN_CHECKPOINT_DIR/x\" "
           "\"$MERIDIAN_CHECKPOINT_DIR/checkpoint\"; sleep 0.3; put three; echo ${MERIDIAN_CHECKPOINT:-none}"});
  ASSERT_TRUE(exec_->Start(a));
  model::TaskUpdate f = Final(a.key);
  EXPECT_EQ(f.kind, model::UpdateKind::kSucceeded) << f.reason;
  EXPECT_EQ(f.output, "none\n");
  std::vector<model::HeldObject> kept;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const model::TaskUpdate& u : updates_) {
      if (u.key == a.key && !u.checkpoint.id.empty()) {
        EXPECT_EQ(u.kind, model::UpdateKind::kRunning);
        kept.push_back(u.checkpoint);
      }
    }
  }
  EXPECT_EQ(kept, (std::vector<model::HeldObject>{{"id-one", 3}, {"id-twotwo", 6}, {"id-three", 5}}));
  {
    std::lock_guard<std::mutex> lock(m);
    EXPECT_EQ(released, (std::vector<std::string>{"id-one", "id-twotwo"}));
  }

  model::TaskAssignment next = Task(31, {"sh", "-c", "cat \"$MERIDIAN_CHECKPOINT\"; echo \" $MERIDIAN_INPUT_COUNT\""});
  next.checkpoint = model::ObjectLocation{"id-seven", "checkpoint of t31", 15, {model::ObjectReplica{2, "n2", "s2", "x:1"}}};
  ASSERT_TRUE(exec_->Start(next));
  model::TaskUpdate g = Final(next.key);
  EXPECT_EQ(g.kind, model::UpdateKind::kSucceeded) << g.reason;
  EXPECT_EQ(g.output, "state at step 7 0\n");
  // A checkpoint that cannot be fetched is done without: the command starts afresh.
  model::TaskAssignment fresh = Task(32, {"sh", "-c", "echo ${MERIDIAN_CHECKPOINT:-none}; ls $HOME"});
  fresh.checkpoint = model::ObjectLocation{"id-gone", "checkpoint of t32", 15, {model::ObjectReplica{2, "n2", "s2", "x:1"}}};
  ASSERT_TRUE(exec_->Start(fresh));
  model::TaskUpdate h = Final(fresh.key);
  EXPECT_EQ(h.kind, model::UpdateKind::kSucceeded) << h.reason;
  EXPECT_EQ(h.output, "none\ncheckpoints\ninputs\n");
}

TEST_F(ExecutorTest, InputObjectsAreFetchedSeveralAtOnceAndALostOneStopsTheAttemptWithoutFailingIt) {
  std::mutex m;
  std::condition_variable all_in;
  int inside = 0, most = 0;
  Reset(
      [&](const model::ObjectLocation& o, const std::atomic<bool>&, std::vector<std::string>* damaged)
          -> StatusOr<FetchedInput> {
        std::unique_lock<std::mutex> lock(m);
        most = std::max(most, ++inside);
        // Each fetch waits until all eight are under way (or 5 s): one at a time would never get there.
        all_in.notify_all();
        all_in.wait_for(lock, std::chrono::seconds(5), [&] { return most == 8; });
        --inside;
        if (o.id == "bad") {
          damaged->push_back("n9");
          return DataLossError("its copy on n9 is damaged");
        }
        auto keep = std::make_shared<std::string>(o.id);
        return FetchedInput{keep, *keep, model::InputTransfer{o.id, "s2", "s1", 2, 0}};
      },
      nullptr);
  model::TaskAssignment a = Task(13, {}, "wordcount");
  for (int i = 0; i < 8; ++i) a.input_objects.push_back(model::ObjectLocation{"w" + std::to_string(i), "", 2, {}});
  ASSERT_TRUE(exec_->Start(a));
  model::TaskUpdate u = Final(a.key);
  EXPECT_EQ(u.kind, model::UpdateKind::kSucceeded) << u.reason;
  EXPECT_EQ(most, 8);
  EXPECT_EQ(u.transfers.size(), 8u);
  most = 0;
  model::TaskAssignment b = Task(14, {}, "wordcount");
  for (int i = 0; i < 7; ++i) b.input_objects.push_back(model::ObjectLocation{"w" + std::to_string(i), "", 2, {}});
  b.input_objects.push_back(model::ObjectLocation{"bad", "shard", 2, {}});
  ASSERT_TRUE(exec_->Start(b));
  model::TaskUpdate lost = Final(b.key);
  EXPECT_EQ(lost.kind, model::UpdateKind::kCancelled);
  EXPECT_EQ(lost.reason, "input lost: input shard: its copy on n9 is damaged");
  ASSERT_EQ(lost.lost_inputs.size(), 1u);
  EXPECT_EQ(lost.lost_inputs[0].object_id, "bad");
  EXPECT_EQ(lost.lost_inputs[0].damaged_nodes, std::vector<std::string>{"n9"});
}

TEST_F(ExecutorTest, InputsFetchedTogetherAreNotFetchedAgainOneByOne) {
  std::mutex m;
  std::vector<std::string> alone;
  size_t asked_together = 0;
  auto one = [](const std::string& id) {
    auto keep = std::make_shared<std::string>(id);
    return FetchedInput{keep, *keep, model::InputTransfer{id, "s2", "s1", 2, 0}};
  };
  Reset(
      [&](const model::ObjectLocation& o, const std::atomic<bool>&, std::vector<std::string>*) -> StatusOr<FetchedInput> {
        std::lock_guard<std::mutex> lock(m);
        alone.push_back(o.id);
        return one(o.id);
      },
      nullptr,
      [&](const std::vector<const model::ObjectLocation*>& objects, const std::atomic<bool>&) {
        // Every other one comes in the batch; the rest are left to `fetch`.
        asked_together = objects.size();
        std::vector<std::optional<FetchedInput>> out(objects.size());
        for (size_t i = 0; i < objects.size(); i += 2) out[i] = one(objects[i]->id);
        return out;
      });
  model::TaskAssignment a = Task(15, {}, "wordcount");
  for (int i = 0; i < 6; ++i) a.input_objects.push_back(model::ObjectLocation{"w" + std::to_string(i), "", 2, {}});
  ASSERT_TRUE(exec_->Start(a));
  model::TaskUpdate u = Final(a.key);
  EXPECT_EQ(u.kind, model::UpdateKind::kSucceeded) << u.reason;
  EXPECT_EQ(asked_together, 6u);
  std::sort(alone.begin(), alone.end());
  EXPECT_EQ(alone, (std::vector<std::string>{"w1", "w3", "w5"}));
  EXPECT_EQ(u.transfers.size(), 6u);
}

TEST_F(ExecutorTest, InputsThatCameInlineFromOtherSitesArePacedByTheirLinks) {
  std::map<std::string, int64_t> paced;
  int calls = 0;
  Reset(nullptr, nullptr, nullptr, [&](const std::map<std::string, int64_t>& bytes, const std::atomic<bool>&) {
    paced = bytes;
    ++calls;
  });
  // Three dependencies' outputs, whole in the assignment: two made at s2, one here.
  model::TaskAssignment a = Task(16, {}, "sum");
  a.inputs = {"12", "345", "6"};
  for (const char* site : {"s2", "s2", "s1"}) {
    model::ObjectLocation made;
    made.replicas.push_back(model::ObjectReplica{0, "n", site, ""});
    a.dep_objects.push_back(made);
  }
  ASSERT_TRUE(exec_->Start(a));
  model::TaskUpdate u = Final(a.key);
  EXPECT_EQ(u.kind, model::UpdateKind::kSucceeded) << u.reason;
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(paced, (std::map<std::string, int64_t>{{"s2", 5}}));
}

}  // namespace
}  // namespace meridian::agent
