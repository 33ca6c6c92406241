// Running a program as a child process: argv, environment, working directory,
// stdout and stderr captured with bounds, a timeout, and a kill from another thread.
// The child leads its own process group, so a kill reaches what it started too. It
// dies with the thread that started it (a parent-death signal), and, when asked, is
// recorded in a file while it runs, so that whoever finds the record after a crash
// can end its whole group (KillRecordedProcessGroups).
//
// Thread-safety: RunProcess may run on several threads at once; `stop` is read
// while it runs.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace meridian {

// Output a running child wrote (ProcessOptions::on_output).
struct OutputSoFar {
  std::string stdout_new;
  std::string stderr_new;
  int64_t stdout_bytes = 0;  // in all, up to the end of stdout_new
  int64_t stderr_bytes = 0;
};

struct ProcessOptions;

// Starts a child some other way than fork and exec (an agent's warm interpreter forks
// it), for RunProcess to watch as its own.
struct ProcessLauncher {
  // Starts `options`' program with the given stdout and stderr, its resource limits,
  // working directory and environment; before it runs any of the program's code, it
  // joins the cgroup whose cgroup.procs is open as `cgroup_procs` (-1: none). Returns
  // its pid, which leads a process group of its own.
  std::function<StatusOr<int>(const ProcessOptions& options, int stdout_fd, int stderr_fd, int cgroup_procs)> start;
  // Waits for that child to end and returns its wait status (as waitpid gives it).
  std::function<int(int pid)> wait;
};

struct ProcessOptions {
  std::vector<std::string> argv;  // argv[0] without '/' is looked up in PATH
  std::vector<std::string> env;   // "NAME=value"; the whole environment
  std::string cwd;                // empty: the caller's
  int64_t timeout_us = 0;         // 0: none
  // Stopped (`stop`, or the timeout): its process group gets SIGTERM first, and SIGKILL
  // only when it has not ended this long after; 0: SIGKILL at once. A server drains
  // its requests in between (a service's replica).
  int64_t stop_grace_us = 0;
  size_t max_stdout_head = 1 << 20;  // kept from the start of stdout
  size_t max_tail = 64 << 10;        // kept from the end of stdout and of stderr
  // Where to record the child while it runs ("pid start-time"); removed when it ends.
  // Empty: not recorded.
  std::string record_file;
  // A cgroup v2 directory to run the child in (see cgroup.h): made for it, and when
  // it ends (or is stopped) everything in it is killed and it is removed. Empty, or
  // one that cannot be made: its process group is what contains it.
  std::string cgroup;
  // The user and group the child runs as (the caller must be root to switch); -1:
  // the caller's. Supplementary groups are dropped with a switch.
  int uid = -1;
  int gid = -1;
  // Resource limits set in the child before exec: {RLIMIT_*, soft = hard limit}.
  std::vector<std::pair<int, int64_t>> rlimits = {};
  // cgroup v2 limits written to `cgroup` before the child joins it, where its
  // controllers are enabled (ProcessResult::limited says whether they were): bytes
  // of memory (memory.max), and CPU in milli-cores (cpu.max). 0: none.
  int64_t memory_max_bytes = 0;
  int64_t cpu_max_milli = 0;
  // Told of output while the child runs, at most every `output_interval_us` and only
  // when there is some: what came since the last call (at most max_tail bytes of each
  // stream: the newest) and how many bytes each stream has had in all, so a reader can
  // tell what it missed. Called on RunProcess's thread; the last bytes of all come in
  // the result, not here.
  std::function<void(const OutputSoFar&)> on_output;
  // Called every `output_interval_us` while the child runs, output or not (the agent
  // collects a task's checkpoints with it), on the thread that waits for the child.
  std::function<void()> on_interval;
  int64_t output_interval_us = 1'000'000;
  // Starts the child instead of fork and exec; none: fork and exec (uid and gid are
  // then the launcher's to honour).
  std::shared_ptr<const ProcessLauncher> launcher;
};

struct ProcessResult {
  int exit_code = 0;          // of a normal exit
  int signal = 0;             // that ended it, if one did
  bool timed_out = false;
  bool stopped = false;       // killed because `stop` was set
  bool stdout_truncated = false;
  bool in_cgroup = false;     // it ran in options.cgroup
  bool limited = false;       // options' cgroup limits were written
  std::string stdout_head;
  std::string stdout_tail;
  std::string stderr_tail;
  int64_t stdout_bytes = 0;   // what it wrote in all, of which the tails are the end
  int64_t stderr_bytes = 0;
};

// Starts the program and waits for it. An error only when it cannot be started
// (not found, not executable): the message names the program and why.
StatusOr<ProcessResult> RunProcess(const ProcessOptions& options, const std::atomic<bool>& stop);

// Ends the process groups recorded by RunProcess's record_file in `dir` whose leaders
// still run (the same process: pid and start time), and removes the records. For an
// agent that starts after a crash: what its previous incarnation ran must not go on.
// Returns how many groups it ended.
int KillRecordedProcessGroups(const std::string& dir);

// The current process's environment as "NAME=value" strings.
std::vector<std::string> CurrentEnvironment();

// Starts `argv` detached (new session, stdin from /dev/null, stdout and stderr to
// `log_path`, appended) and returns its pid without waiting.
StatusOr<int> SpawnDetached(const std::vector<std::string>& argv, const std::string& log_path);

// Where `name` is run from: itself when it holds a '/', else the first executable of
// that name in PATH; empty when there is none.
std::string FindProgram(const std::string& name);

// The path of the running executable.
std::string SelfExecutable();

// Whether our child `pid` has exited (reaping it if so).
bool ChildExited(int pid);

// Whether process `pid` exists and its command line contains `needle`. Racy for a
// child in the middle of exec; use ChildExited for those.
bool ProcessRunning(int pid, const std::string& needle);

// What a process holds in memory now, and the most it has held (VmRSS, VmHWM).
struct ProcessMemory {
  int64_t rss_bytes = 0;
  int64_t peak_rss_bytes = 0;
};
StatusOr<ProcessMemory> ReadProcessMemory(int pid);

// Runs `argv` with its stdout and stderr to `output_path` and waits; returns its exit
// status and the most memory it held (its peak resident set).
struct ChildUsage {
  int exit_code = 0;
  int64_t peak_rss_bytes = 0;
};
StatusOr<ChildUsage> RunAndMeasure(const std::vector<std::string>& argv, const std::string& output_path);

// Blocks SIGINT and SIGTERM in the calling thread and the threads it starts later;
// WaitForTerminationSignal then returns the first that arrives.
void BlockTerminationSignals();
int WaitForTerminationSignal();
// The same, giving up after `timeout_us`: 0 when none came.
int WaitForTerminationSignalFor(int64_t timeout_us);
// Sends this process SIGTERM: a thread that must stop it wakes the one waiting above.
void RaiseTerminationSignal();

// Makes a write to a connection its peer closed fail with EPIPE instead of killing
// the process with SIGPIPE (libraries such as OpenSSL write with plain write()).
// Process-wide and idempotent; child processes get the default back.
void IgnoreBrokenPipes();

// This process's soft limit on open files: what it had, and what it has now.
struct OpenFileLimit {
  uint64_t before = 0;
  uint64_t now = 0;
};
// Raises the soft limit on open files to the hard one (or, where that is unlimited, to
// the kernel's most, fs.nr_open): a server holds a descriptor per connection, and a
// soft limit of 1024 (common, for programs that still use select()) is soon spent.
// Processes RunProcess starts afterwards get the soft limit this one had before (a
// program using select() breaks past 1024); they may raise theirs as this did. Zeros
// when the limit cannot be read.
OpenFileLimit RaiseOpenFileLimit();
// The soft limit on open files now; 0 when it cannot be read, or is unlimited.
uint64_t CurrentOpenFileLimit();

}  // namespace meridian
