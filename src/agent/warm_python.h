// Warm Python interpreters: an agent's Python tasks (commands `python SCRIPT.py
// ARGS...`, which is what a remote function's task is) fork from an interpreter that
// was started once, with cloudpickle already imported, instead of starting one each.
// That saves what starting costs (about 50 ms of this machine's cores a task) and
// changes nothing a task can tell: each child joins its task's cgroup before it runs
// any of the script, gets the task's limits, streams, directory, environment and
// arguments, and exits as `python SCRIPT` would. RunProcess watches it as its own
// (ProcessLauncher), so output bounds, timeouts and kills are the same.
//
// An interpreter serves one key: the program, the user and group the tasks run as,
// and the environment an interpreter reads as it starts (PYTHON*, LANG, LC_*, TZ,
// PATH). Tasks of one tenant share the interpreter's start-up state, its hash seed
// included; tenants never share one, as they run as different users. It runs as the
// tasks' user from its first instruction (never root with a tenant's environment).
// The script's own imports still run in each task.
//
// What the interpreter says is not trusted: a pid it reports is used only when it is
// its own child of the right user, and every message it sends is bounded.
//
// Thread-safety: all methods may be called from any thread.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "common/status.h"
#include "common/subprocess.h"

namespace meridian::agent {

struct WarmPythonOptions {
  // Interpreters kept at most; past it the one used least recently with no task
  // running goes (and with all busy, a new key's task starts cold).
  int max_interpreters = 8;
  // Imported by each interpreter as it starts (one that is missing is skipped): what
  // a remote function's worker imports.
  std::vector<std::string> preload = {"cloudpickle", "base64", "mmap", "pickle", "__future__"};
  // Where interpreters' own stderr goes (appended); their tasks' goes to the task.
  std::string log_path;
  // How long an interpreter may take to start before its tasks start cold; after a
  // failed start, this many of the key's tasks (its own included) start cold before the
  // next try.
  int64_t start_timeout_us = 10'000'000;
  int cold_after_failure = 64;
};

class WarmPython {
 public:
  explicit WarmPython(WarmPythonOptions options);
  // Ends every interpreter (and what still runs in them).
  ~WarmPython();
  WarmPython(const WarmPython&) = delete;
  WarmPython& operator=(const WarmPython&) = delete;

  // A launcher that starts `p` in a warm interpreter, or none when `p` is not a
  // Python script that one can start exactly as `python SCRIPT` would (or no
  // interpreter could be started): then it runs cold.
  std::shared_ptr<const ProcessLauncher> LauncherFor(const ProcessOptions& p);

  // Tasks started in a warm interpreter, interpreters started, and starts that
  // failed, so far.
  int64_t warm_starts() const { return warm_starts_.load(); }
  int64_t interpreters_started() const { return interpreters_started_.load(); }
  int64_t start_failures() const { return start_failures_.load(); }

  // Whether `argv` runs a Python script: `python[N[.M]] SCRIPT.py ...` with no
  // interpreter option before the script.
  static bool IsPythonScript(const std::vector<std::string>& argv);

  class Interpreter;

 private:
  struct Key {
    std::string program;             // resolved
    int uid = -1;
    int gid = -1;
    std::vector<std::string> env;    // what an interpreter reads as it starts
    bool operator<(const Key& o) const {
      return std::tie(program, uid, gid, env) < std::tie(o.program, o.uid, o.gid, o.env);
    }
  };

  struct Slot {
    std::shared_ptr<Interpreter> interpreter;
    uint64_t last_used = 0;  // of uses_
  };

  const WarmPythonOptions options_;
  std::mutex mu_;  // held while an interpreter starts: one start at a time
  std::map<Key, Slot> interpreters_;                           // GUARDED_BY(mu_)
  // Keys whose interpreter failed to start: tasks left to start cold before the next try.
  std::map<Key, int> cold_left_;                               // GUARDED_BY(mu_)
  uint64_t uses_ = 0;                                          // GUARDED_BY(mu_)
  std::atomic<int64_t> warm_starts_{0};
  std::atomic<int64_t> interpreters_started_{0};
  std::atomic<int64_t> start_failures_{0};
};

}  // namespace meridian::agent
