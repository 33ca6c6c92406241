#include "agent/warm_python.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "agent/warm_python_source.h"  // kWarmPythonSource, generated from warm_python.py
#include "common/logging.h"
#include "common/net.h"

namespace meridian::agent {
namespace {

// The longest line an interpreter sends ("started SEQ PID", "exited PID STATUS").
constexpr size_t kMaxLineBytes = 80;

// What an interpreter reads from its environment as it starts: a warm one must have
// started with the same.
bool ReadAtStart(const std::string& entry) {
  for (const char* prefix : {"PYTHON", "LANG=", "LC_", "TZ=", "PATH="}) {
    if (entry.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

// Whether process `pid` is a child of `parent` whose uids (real, effective, saved,
// file system) are all `uid` (-1: any), by one read of /proc/PID/status.
bool ChildOfAs(int pid, pid_t parent, int uid) {
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  bool parent_ok = false, uid_ok = false;
  std::string line;
  while (std::getline(in, line) && !(parent_ok && uid_ok)) {
    std::istringstream fields(line);
    std::string name;
    fields >> name;
    std::vector<long> values;
    for (long v; fields >> v;) values.push_back(v);
    if (name == "PPid:") parent_ok = values.size() == 1 && values[0] == parent;
    if (name == "Uid:") {
      uid_ok = !values.empty() && (uid < 0 || std::all_of(values.begin(), values.end(), [&](long u) { return u == uid; }));
    }
  }
  return parent_ok && uid_ok;
}

// A copy of `fd` numbered 10 or more (close-on-exec), so that the child's dup2 onto
// 0 to 3 never overwrites one it still needs.
int HighFd(int fd) {
  const int high = fcntl(fd, F_DUPFD_CLOEXEC, 10);
  close(fd);
  return high;
}

}  // namespace

// One interpreter and the tasks forked from it. Its reader thread takes in what the
// interpreter says; Spawn and Wait wait on it.
class WarmPython::Interpreter {
 public:
  static StatusOr<std::shared_ptr<Interpreter>> Start(const Key& key, const WarmPythonOptions& options);
  ~Interpreter();

  StatusOr<int> Spawn(const ProcessOptions& o, int stdout_fd, int stderr_fd, int cgroup_procs);
  int Wait(int pid);
  bool alive() {
    std::lock_guard<std::mutex> lock(mu_);
    return !dead_;
  }
  int tasks() {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int>(live_.size());
  }

 private:
  Interpreter(int fd, pid_t pid, int uid) : fd_(fd), pid_(pid), uid_(uid) {}
  void Read();
  // Takes one line; false when it is not one the protocol has.
  bool Take(const std::string& line);

  const int fd_;
  const pid_t pid_;
  const int uid_;
  std::thread reader_;
  std::mutex send_mu_;  // one request on the socket at a time
  std::mutex mu_;
  std::condition_variable cv_;
  bool ready_ = false;                 // GUARDED_BY(mu_)
  bool dead_ = false;                  // GUARDED_BY(mu_)
  uint64_t next_seq_ = 1;              // GUARDED_BY(mu_)
  std::map<uint64_t, int> started_;    // GUARDED_BY(mu_); request → pid
  std::map<int, int> exited_;          // GUARDED_BY(mu_); pid → wait status
  std::set<int> live_;                 // GUARDED_BY(mu_); started, not yet waited for
};

StatusOr<std::shared_ptr<WarmPython::Interpreter>> WarmPython::Interpreter::Start(const Key& key,
                                                                                 const WarmPythonOptions& options) {
  const std::string& program = key.program;
  const int uid = key.uid, gid = key.gid;
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    return UnavailableError(fmt::format("cannot make a socket pair: {}", std::strerror(errno)));
  }
  const int ours = pair[0];
  const int theirs = HighFd(pair[1]);
  const int devnull = HighFd(open("/dev/null", O_RDWR | O_CLOEXEC));
  int log = options.log_path.empty() ? -1
                                     : open(options.log_path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  log = log >= 0 ? HighFd(log) : -1;
  // Everything the child needs, made before the fork: it may only make system calls.
  std::vector<std::string> args = {program, "-c", kWarmPythonSource, std::to_string(uid), std::to_string(gid)};
  args.insert(args.end(), options.preload.begin(), options.preload.end());
  std::vector<std::string> envs = key.env;
  envs.push_back("HOME=/nonexistent");
  std::vector<char*> argv, envp;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (std::string& e : envs) envp.push_back(e.data());
  envp.push_back(nullptr);
  sigset_t all, caller;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &caller);
  const pid_t pid = fork();
  if (pid == 0) {
    setsid();
    signal(SIGPIPE, SIG_DFL);
    dup2(devnull, 0);
    dup2(devnull, 1);
    dup2(log >= 0 ? log : devnull, 2);
    dup2(theirs, 3);
    // Its user before it runs anything: it reads an environment the tasks chose.
    // Raw system calls: only this thread's credentials change.
    if (gid >= 0 && (syscall(SYS_setgroups, 0, nullptr) != 0 || syscall(SYS_setgid, gid) != 0)) _exit(126);
    if (uid >= 0 && syscall(SYS_setuid, uid) != 0) _exit(126);
    // Somewhere that user may be (the agent's directory may be closed to it).
    if (chdir("/") != 0) _exit(126);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execve(program.c_str(), argv.data(), envp.data());
    _exit(127);
  }
  const int fork_errno = errno;
  pthread_sigmask(SIG_SETMASK, &caller, nullptr);
  for (int fd : {theirs, devnull, log}) {
    if (fd >= 0) close(fd);
  }
  if (pid < 0) {
    close(ours);
    return UnavailableError(fmt::format("cannot start {}: {}", program, std::strerror(fork_errno)));
  }
  std::shared_ptr<Interpreter> in(new Interpreter(ours, pid, uid));
  in->reader_ = std::thread([raw = in.get()] { raw->Read(); });
  std::unique_lock<std::mutex> lock(in->mu_);
  const bool ready = in->cv_.wait_for(lock, std::chrono::microseconds(options.start_timeout_us),
                                      [&] { return in->ready_ || in->dead_; });
  if (!ready || in->dead_) {
    lock.unlock();
    return UnavailableError(fmt::format("{} did not start as a warm interpreter ({})", program,
                                        ready ? "it exited" : "it took too long"));
  }
  return in;
}

WarmPython::Interpreter::~Interpreter() {
  // What still runs in it dies with it (each child's parent-death signal).
  kill(pid_, SIGKILL);
  shutdown(fd_, SHUT_RDWR);
  if (reader_.joinable()) reader_.join();
  close(fd_);
  while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
}

void WarmPython::Interpreter::Read() {
  std::string pending;
  char buf[4096];
  bool ok = true;
  while (ok) {
    const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buf, static_cast<size_t>(n));
    size_t start = 0;
    for (size_t nl; ok && (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
      ok = nl - start <= kMaxLineBytes && Take(pending.substr(start, nl - start));
    }
    pending.erase(0, start);
    ok = ok && pending.size() <= kMaxLineBytes;
  }
  if (!ok) {
    MERIDIAN_LOG_WARN("warm Python interpreter {} sent what it should not; it is ended", pid_);
    kill(pid_, SIGKILL);
  }
  std::lock_guard<std::mutex> lock(mu_);
  dead_ = true;
  cv_.notify_all();
}

bool WarmPython::Interpreter::Take(const std::string& line) {
  std::istringstream in(line);
  std::string word;
  in >> word;
  std::lock_guard<std::mutex> lock(mu_);
  if (word == "ready" && !ready_) {
    ready_ = true;
  } else if (word == "started") {
    uint64_t seq = 0;
    int pid = 0;
    if (!(in >> seq >> pid) || seq == 0 || seq >= next_seq_ || pid <= 1 || started_.count(seq) > 0) return false;
    started_[seq] = pid;
    live_.insert(pid);
  } else if (word == "exited") {
    int pid = 0, status = 0;
    if (!(in >> pid >> status)) return false;
    if (live_.count(pid) > 0) exited_[pid] = status;  // else one Spawn gave up on
  } else {
    return false;
  }
  std::string rest;
  if (in >> rest) return false;
  cv_.notify_all();
  return true;
}

StatusOr<int> WarmPython::Interpreter::Spawn(const ProcessOptions& o, int stdout_fd, int stderr_fd,
                                            int cgroup_procs) {
  int go[2];
  if (pipe2(go, O_CLOEXEC) != 0) return UnavailableError(fmt::format("cannot make a pipe: {}", std::strerror(errno)));
  std::string body = o.cwd;
  auto field = [&](const std::string& s) {
    body.push_back('\0');
    body += s;
  };
  field(std::to_string(o.argv.size()));
  for (const std::string& a : o.argv) field(a);
  field(std::to_string(o.env.size()));
  for (const std::string& e : o.env) field(e);
  field(std::to_string(o.rlimits.size()));
  for (const auto& [resource, limit] : o.rlimits) field(fmt::format("{} {}", resource, limit));
  uint64_t seq = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (dead_) {
      close(go[0]);
      close(go[1]);
      return UnavailableError("the warm interpreter has exited");
    }
    seq = next_seq_++;
  }
  // The header carries the task's stdout, stderr and go pipe.
  uint64_t header[2] = {body.size(), seq};
  bool sent = false;
  {
    std::lock_guard<std::mutex> lock(send_mu_);
    const int fds[3] = {stdout_fd, stderr_fd, go[0]};
    const ssize_t n = SendWithDescriptors(fd_, header, sizeof(header), fds);
    sent = n == static_cast<ssize_t>(sizeof(header)) && SendAll(fd_, body);
  }
  close(go[0]);
  int pid = -1;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (sent) cv_.wait(lock, [&] { return dead_ || started_.count(seq) > 0; });
    if (auto it = started_.find(seq); it != started_.end()) {
      pid = it->second;
      started_.erase(it);
    }
  }
  // Only its own child, of the tasks' user, is let go (and moved into the cgroup).
  const bool its_own = pid > 0 && ChildOfAs(pid, pid_, uid_);
  bool placed = its_own;
  if (its_own && cgroup_procs >= 0) {
    const std::string text = std::to_string(pid);
    placed = write(cgroup_procs, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  }
  if (placed) placed = write(go[1], "g", 1) == 1;
  close(go[1]);  // without "g", the child exits at once
  if (!placed) {
    if (its_own) {
      kill(-pid, SIGKILL);
      Wait(pid);
    } else if (pid > 0) {
      // Not one to signal or wait for: it may be another's process (or one gone already).
      std::lock_guard<std::mutex> lock(mu_);
      live_.erase(pid);
      exited_.erase(pid);
    }
    return UnavailableError(pid <= 0 ? "the warm interpreter did not start the task"
                                     : fmt::format("the warm interpreter's child {} could not be placed", pid));
  }
  return pid;
}

int WarmPython::Interpreter::Wait(int pid) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return dead_ || exited_.count(pid) > 0; });
  live_.erase(pid);
  auto it = exited_.find(pid);
  if (it == exited_.end()) return SIGKILL;  // it died with its interpreter (as signalled by SIGKILL)
  const int status = it->second;
  exited_.erase(it);
  return status;
}

WarmPython::WarmPython(WarmPythonOptions options) : options_(std::move(options)) {}

WarmPython::~WarmPython() {
  std::lock_guard<std::mutex> lock(mu_);
  interpreters_.clear();
}

bool WarmPython::IsPythonScript(const std::vector<std::string>& argv) {
  if (argv.size() < 2) return false;
  const std::string base = std::filesystem::path(argv[0]).filename().string();
  if (base.rfind("python", 0) != 0) return false;
  for (size_t i = 6; i < base.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(base[i])) && base[i] != '.') return false;
  }
  const std::string& script = argv[1];
  return !script.empty() && script[0] != '-' && script.size() > 3 && script.compare(script.size() - 3, 3, ".py") == 0;
}

std::shared_ptr<const ProcessLauncher> WarmPython::LauncherFor(const ProcessOptions& p) {
  if (!IsPythonScript(p.argv)) return nullptr;
  auto has_nul = [](const std::string& s) { return s.find('\0') != std::string::npos; };
  if (has_nul(p.cwd) || std::any_of(p.argv.begin(), p.argv.end(), has_nul) ||
      std::any_of(p.env.begin(), p.env.end(), has_nul)) {
    return nullptr;
  }
  Key key;
  key.program = FindProgram(p.argv[0]);
  if (key.program.empty() || access(key.program.c_str(), X_OK) != 0) return nullptr;
  key.uid = p.uid;
  key.gid = p.gid;
  for (const std::string& e : p.env) {
    if (ReadAtStart(e)) key.env.push_back(e);
  }
  std::sort(key.env.begin(), key.env.end());
  std::shared_ptr<Interpreter> in;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = interpreters_.find(key);
    if (it != interpreters_.end() && !it->second.interpreter->alive()) {
      interpreters_.erase(it);
      it = interpreters_.end();
    }
    if (it == interpreters_.end()) {
      if (auto failed = cold_left_.find(key); failed != cold_left_.end()) {
        if (--failed->second > 0) return nullptr;
        cold_left_.erase(failed);
      }
      while (static_cast<int>(interpreters_.size()) >= options_.max_interpreters) {
        // The idle one used least recently goes; with none idle, this task runs cold.
        auto victim = interpreters_.end();
        for (auto i = interpreters_.begin(); i != interpreters_.end(); ++i) {
          const bool older = victim == interpreters_.end() || i->second.last_used < victim->second.last_used;
          if (i->second.interpreter->tasks() == 0 && older) victim = i;
        }
        if (victim == interpreters_.end()) return nullptr;
        interpreters_.erase(victim);
      }
      StatusOr<std::shared_ptr<Interpreter>> started = Interpreter::Start(key, options_);
      if (!started.ok()) {
        MERIDIAN_LOG_WARN("Python tasks start cold: {}", started.status().message());
        cold_left_[key] = options_.cold_after_failure;
        ++start_failures_;
        return nullptr;
      }
      ++interpreters_started_;
      it = interpreters_.emplace(key, Slot{std::move(*started)}).first;
    }
    it->second.last_used = ++uses_;
    in = it->second.interpreter;
  }
  auto launcher = std::make_shared<ProcessLauncher>();
  launcher->start = [this, in](const ProcessOptions& o, int stdout_fd, int stderr_fd, int cgroup_procs) {
    StatusOr<int> pid = in->Spawn(o, stdout_fd, stderr_fd, cgroup_procs);
    if (pid.ok()) ++warm_starts_;
    return pid;
  };
  launcher->wait = [in](int pid) { return in->Wait(pid); };
  return launcher;
}

}  // namespace meridian::agent
