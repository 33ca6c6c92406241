#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include <fmt/format.h>

#include "common/cgroup.h"
#include "common/logging.h"
#include "common/subprocess.h"

extern char** environ;

namespace meridian {
namespace {

// Appends to a bounded head and a rolling bounded tail.
struct Capture {
  size_t max_head = 0;
  size_t max_tail = 0;
  std::string head;
  std::string tail;
  bool truncated = false;
  int64_t total = 0;
  int64_t told = 0;  // of total, what on_output was given

  void Add(const char* data, size_t n) {
    total += static_cast<int64_t>(n);
    if (head.size() < max_head) {
      size_t take = std::min(n, max_head - head.size());
      head.append(data, take);
      truncated = truncated || take < n;
    } else if (max_head > 0 && n > 0) {
      truncated = true;
    }
    tail.append(data, n);
    if (tail.size() > 2 * max_tail) tail.erase(0, tail.size() - max_tail);
  }
  std::string Tail() const { return tail.size() > max_tail ? tail.substr(tail.size() - max_tail) : tail; }
  // What came since the last call: the newest max_tail bytes of it at most.
  std::string TakeNew() {
    const size_t n = static_cast<size_t>(std::min<int64_t>({total - told, static_cast<int64_t>(max_tail),
                                                            static_cast<int64_t>(tail.size())}));
    told = total;
    return tail.substr(tail.size() - n);
  }
};

std::string FindInPath(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= p.size()) {
    size_t colon = p.find(':', start);
    if (colon == std::string::npos) colon = p.size();
    std::string dir = p.substr(start, colon - start);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
    start = colon + 1;
  }
  return "";
}

std::vector<char*> CStrings(const std::vector<std::string>& v) {
  std::vector<char*> out;
  for (const std::string& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

int64_t NowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Field 22 of /proc/PID/stat: when the process started, in clock ticks since boot. With
// the pid it names one process for good (pids are reused, start times are not).
std::string StartTime(int pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t close = stat.rfind(')');  // the command name may hold spaces and parentheses
  if (close == std::string::npos) return "";
  std::istringstream rest(stat.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
    if (i == 22) return field;
  }
  return "";
}

}  // namespace

int KillRecordedProcessGroups(const std::string& dir) {
  int killed = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    std::ifstream in(entry.path());
    int pid = 0;
    std::string started;
    if (in >> pid >> started && pid > 1 && !started.empty() && StartTime(pid) == started) {
      if (kill(-pid, SIGKILL) == 0) ++killed;
    }
    in.close();
    std::filesystem::remove(entry.path(), ec);
  }
  return killed;
}

std::vector<std::string> CurrentEnvironment() {
  std::vector<std::string> out;
  for (char** e = environ; e && *e; ++e) out.emplace_back(*e);
  return out;
}

std::string FindProgram(const std::string& name) { return FindInPath(name); }

std::string SelfExecutable() {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.string();
}

// What the child of RunProcess needs, all made before it starts.
struct ChildSetup {
  const ProcessOptions& options;
  const char* program;
  char* const* argv;
  char* const* envp;
  int stdout_fd, stderr_fd, exec_error_fd, cgroup_procs;
  pid_t parent;
  rlimit open_files;  // rlim_cur 0: as ours
};

// The soft limit on open files this process had before RaiseOpenFileLimit raised it,
// for what it starts; 0 when it was not raised.
std::atomic<uint64_t> g_children_open_files{0};

// What a child's limit on open files is set to (ChildSetup::open_files).
rlimit ChildrenOpenFiles() {
  rlimit rl{0, 0};
  const uint64_t soft = g_children_open_files.load();
  if (soft == 0 || getrlimit(RLIMIT_NOFILE, &rl) != 0) return rlimit{0, 0};
  rl.rlim_cur = std::min(static_cast<rlim_t>(soft), rl.rlim_max);
  return rl;
}

// The child tells its parent why it could not run the program, and exits.
[[noreturn]] void ChildFails(const ChildSetup& c, int error) {
  ssize_t ignored = write(c.exec_error_fd, &error, sizeof(error));
  (void)ignored;
  _exit(127);
}

// The child's side of RunProcess, up to exec; it never returns. It shares the
// caller's memory (vfork): system calls only, nothing written but its own stack, and
// no signal handler of ours may run in it (all signals are blocked across the vfork,
// set to their default here, and unblocked just before exec).
[[noreturn]] __attribute__((noinline)) void ExecChild(const ChildSetup& c) {
  // If we die (SIGKILL too), so does it; and if we died before that was set, it goes at once.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != c.parent) _exit(127);
  setpgid(0, 0);
  for (int sig = 1; sig < NSIG; ++sig) {
    struct sigaction sa;
    if (sigaction(sig, nullptr, &sa) != 0) continue;  // one the C library keeps
    // Handlers go to the default; what is ignored stays so, but SIGPIPE (see IgnoreBrokenPipes).
    if (sa.sa_handler != SIG_DFL && (sa.sa_handler != SIG_IGN || sig == SIGPIPE)) {
      sa.sa_handler = SIG_DFL;
      sa.sa_flags = 0;
      sigaction(sig, &sa, nullptr);
    }
  }
  if (c.cgroup_procs >= 0) {
    ssize_t moved = write(c.cgroup_procs, "0", 1);  // if it cannot move, its process group still holds it
    (void)moved;
  }
  if (c.open_files.rlim_cur > 0) setrlimit(RLIMIT_NOFILE, &c.open_files);
  for (const auto& [resource, limit] : c.options.rlimits) {
    rlimit rl{static_cast<rlim_t>(limit), static_cast<rlim_t>(limit)};
    setrlimit(resource, &rl);
  }
  // Its user last: nothing above needs to be done as it. A switch that fails must
  // not run the program as us. Raw system calls: the C library's set*id would change
  // the credentials of our threads too (they share its memory); this child's alone are meant.
  const ProcessOptions& o = c.options;
  if (o.gid >= 0 && (syscall(SYS_setgroups, 0, nullptr) != 0 || syscall(SYS_setgid, o.gid) != 0)) ChildFails(c, errno);
  if (o.uid >= 0 && syscall(SYS_setuid, o.uid) != 0) ChildFails(c, errno);
  if (o.uid >= 0 || o.gid >= 0) {
    // A change of credentials clears the parent-death signal: set it again.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != c.parent) _exit(127);
  }
  int devnull = open("/dev/null", O_RDONLY);
  if (devnull >= 0) dup2(devnull, 0);
  dup2(c.stdout_fd, 1);
  dup2(c.stderr_fd, 2);
  if (!o.cwd.empty() && chdir(o.cwd.c_str()) != 0) ChildFails(c, errno);
  // The program starts with no signal blocked (our threads block SIGINT and SIGTERM).
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  execve(c.program, c.argv, c.envp);
  ChildFails(c, errno);
}

// vfork, not fork: fork copies the page tables of this (many-threaded, large)
// process and stalls its other threads while it does: an agent starting 160 tasks at
// once on a busy machine stopped heartbeating for over 5 s and was declared dead.
// Alone in a function of its own, so that nothing of the caller's lives across the
// vfork (the child runs in this frame until it calls ExecChild).
__attribute__((noinline)) pid_t VforkChild(const ChildSetup& c) {
  const ChildSetup* volatile setup = &c;  // read back from memory by the child
  const pid_t pid = vfork();
  if (pid == 0) ExecChild(*setup);
  return pid;
}

StatusOr<ProcessResult> RunProcess(const ProcessOptions& options, const std::atomic<bool>& stop) {
  if (options.argv.empty()) return InvalidArgumentError("an empty command");
  const bool launched = options.launcher != nullptr;
  std::string program = FindInPath(options.argv[0]);
  if (program.empty()) return NotFoundError(fmt::format("cannot run '{}': not found in PATH", options.argv[0]));
  int out_pipe[2], err_pipe[2], exec_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0 || pipe2(exec_pipe, O_CLOEXEC) != 0) {
    return UnavailableError(fmt::format("cannot create pipes: {}", std::strerror(errno)));
  }
  std::vector<char*> argv = CStrings(options.argv);
  std::vector<char*> envp = CStrings(options.env);
  // The child moves itself into its cgroup before exec: nothing it starts is outside.
  int cgroup_procs = -1;
  bool limited = false;
  if (!options.cgroup.empty() && (mkdir(options.cgroup.c_str(), 0755) == 0 || errno == EEXIST)) {
    cgroup_procs = open((options.cgroup + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
    // Limits before the child joins: it never runs unlimited.
    auto write_limit = [&](const char* file, const std::string& value) {
      std::ofstream f(options.cgroup + "/" + file);
      f << value;
      f.flush();
      return static_cast<bool>(f);
    };
    if (cgroup_procs >= 0 && (options.memory_max_bytes > 0 || options.cpu_max_milli > 0)) {
      limited = true;
      if (options.memory_max_bytes > 0) {
        limited &= std::filesystem::exists(options.cgroup + "/memory.max") &&
                   write_limit("memory.max", std::to_string(options.memory_max_bytes)) &&
                   write_limit("memory.swap.max", "0");
      }
      if (options.cpu_max_milli > 0) {
        // cpu.max: microseconds of CPU per 100 ms period.
        limited &= std::filesystem::exists(options.cgroup + "/cpu.max") &&
                   write_limit("cpu.max", fmt::format("{} 100000", std::max<int64_t>(1000, options.cpu_max_milli * 100)));
      }
    }
  }
  StatusOr<int> started = UnavailableError("not started");
  if (launched) {
    started = options.launcher->start(options, out_pipe[1], err_pipe[1], cgroup_procs);
  } else {
    sigset_t all_signals, caller_mask;
    sigfillset(&all_signals);
    pthread_sigmask(SIG_SETMASK, &all_signals, &caller_mask);
    const ChildSetup setup{options,     program.c_str(), argv.data(),  envp.data(),
                           out_pipe[1], err_pipe[1],     exec_pipe[1], cgroup_procs, getpid(),
                           ChildrenOpenFiles()};
    const pid_t forked = VforkChild(setup);
    const int vfork_errno = errno;
    pthread_sigmask(SIG_SETMASK, &caller_mask, nullptr);
    if (forked >= 0) setpgid(forked, forked);
    started = forked >= 0 ? StatusOr<int>(forked)
                          : UnavailableError(fmt::format("cannot start a process: {}", std::strerror(vfork_errno)));
  }
  if (!started.ok()) {
    for (int fd : {cgroup_procs, out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1], exec_pipe[0], exec_pipe[1]}) {
      if (fd >= 0) close(fd);
    }
    if (cgroup_procs >= 0) KillAndRemoveCgroup(options.cgroup);
    return started.status();
  }
  const pid_t pid = *started;
  if (cgroup_procs >= 0) close(cgroup_procs);
  close(out_pipe[1]);
  close(err_pipe[1]);
  close(exec_pipe[1]);
  // Whatever happens from here, everything the child started goes with its cgroup.
  struct CgroupEnd {
    std::string dir;  // empty: it runs in none
    ~CgroupEnd() {
      if (!dir.empty()) KillAndRemoveCgroup(dir);
    }
  } cgroup_end{cgroup_procs >= 0 ? options.cgroup : std::string()};
  int exec_errno = 0;
  ssize_t got = read(exec_pipe[0], &exec_errno, sizeof(exec_errno));
  close(exec_pipe[0]);
  if (got == static_cast<ssize_t>(sizeof(exec_errno))) {  // never for a launched child: the pipe is not its
    waitpid(pid, nullptr, 0);
    close(out_pipe[0]);
    close(err_pipe[0]);
    return FailedPreconditionError(fmt::format("cannot run '{}': {}", options.argv[0], std::strerror(exec_errno)));
  }

  if (!options.record_file.empty()) {
    // Written before we wait for it: a crash from here on leaves a record behind.
    std::ofstream(options.record_file, std::ios::trunc) << pid << ' ' << StartTime(pid) << '\n';
  }
  ProcessResult result;
  Capture out{options.max_stdout_head, options.max_tail, {}, {}, false};
  Capture err{0, options.max_tail, {}, {}, false};
  const int64_t deadline = options.timeout_us > 0 ? NowUs() + options.timeout_us : 0;
  bool killed = false;
  int64_t kill_at_us = 0;  // stopped: SIGKILL then, if it has not ended (SIGTERM before)
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  char buf[65536];
  int64_t next_told_us = NowUs() + options.output_interval_us;
  while (open_fds > 0) {
    if ((options.on_output || options.on_interval) && NowUs() >= next_told_us) {
      next_told_us = NowUs() + options.output_interval_us;
      if (options.on_output && (out.total > out.told || err.total > err.told)) {
        OutputSoFar so_far{out.TakeNew(), err.TakeNew(), out.total, err.total};
        options.on_output(so_far);
      }
      if (options.on_interval) options.on_interval();
    }
    if (!killed && kill_at_us == 0 && (stop.load() || (deadline > 0 && NowUs() >= deadline))) {
      result.stopped = stop.load();
      result.timed_out = !result.stopped;
      if (options.stop_grace_us > 0) kill(-pid, SIGTERM);
      kill_at_us = NowUs() + options.stop_grace_us;
    }
    if (!killed && kill_at_us != 0 && NowUs() >= kill_at_us) {
      kill(-pid, SIGKILL);
      if (!cgroup_end.dir.empty()) std::ofstream(cgroup_end.dir + "/cgroup.kill") << "1";
      killed = true;
    }
    int n = poll(fds, 2, 50);
    if (n < 0 && errno != EINTR) break;
    for (pollfd& f : fds) {
      if (f.fd < 0 || !(f.revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t r = read(f.fd, buf, sizeof(buf));
      if (r > 0) {
        (f.fd == out_pipe[0] ? out : err).Add(buf, static_cast<size_t>(r));
      } else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
        close(f.fd);
        f.fd = -1;
        --open_fds;
      }
    }
  }
  for (pollfd& f : fds) {
    if (f.fd >= 0) close(f.fd);
  }
  int status = 0;
  if (launched) {
    status = options.launcher->wait(pid);
  } else {
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  if (!killed) kill(-pid, SIGKILL);  // anything it left behind in its group
  if (!options.record_file.empty()) {
    std::error_code ec;
    std::filesystem::remove(options.record_file, ec);
  }
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  result.in_cgroup = !cgroup_end.dir.empty();
  result.limited = limited;
  result.stdout_head = std::move(out.head);
  result.stdout_truncated = out.truncated;
  result.stdout_tail = out.Tail();
  result.stderr_tail = err.Tail();
  result.stdout_bytes = out.total;
  result.stderr_bytes = err.total;
  return result;
}

bool ChildExited(int pid) {
  int status = 0;
  return waitpid(pid, &status, WNOHANG) == pid || (kill(pid, 0) != 0 && errno == ESRCH);
}

bool ProcessRunning(int pid, const std::string& needle) {
  if (pid <= 0 || kill(pid, 0) != 0) return false;
  int reaped = waitpid(pid, nullptr, WNOHANG);  // our own child that exited
  if (reaped == pid) return false;
  std::ifstream in(fmt::format("/proc/{}/cmdline", pid), std::ios::binary);
  std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string state;
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string ignored;
  stat >> ignored >> ignored >> state;
  if (state == "Z") return false;  // exited, not yet reaped by its parent
  return cmdline.find(needle) != std::string::npos;
}

void BlockTerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

void IgnoreBrokenPipes() { signal(SIGPIPE, SIG_IGN); }

OpenFileLimit RaiseOpenFileLimit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return {};
  OpenFileLimit out{rl.rlim_cur, rl.rlim_cur};
  rlim_t target = rl.rlim_max;
  if (target == RLIM_INFINITY) {
    // Linux refuses a limit past fs.nr_open.
    uint64_t nr_open = 0;
    std::ifstream in("/proc/sys/fs/nr_open");
    target = (in >> nr_open) && nr_open > 0 ? static_cast<rlim_t>(nr_open) : rlim_t{1} << 20;
  }
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < target) {
    rl.rlim_cur = target;
    if (setrlimit(RLIMIT_NOFILE, &rl) == 0) {
      out.now = target;
      uint64_t unset = 0;
      g_children_open_files.compare_exchange_strong(unset, out.before);
      MERIDIAN_LOG_INFO("open files: soft limit raised from {} to {}", out.before, out.now);
    } else {
      MERIDIAN_LOG_WARN("open files: soft limit stays {} (raising it to {}: {})", out.before, target, std::strerror(errno));
    }
  }
  return out;
}

uint64_t CurrentOpenFileLimit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return 0;
  return rl.rlim_cur;
}

int WaitForTerminationSignal() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  int sig = 0;
  sigwait(&set, &sig);
  return sig;
}

int WaitForTerminationSignalFor(int64_t timeout_us) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  timespec ts{static_cast<time_t>(timeout_us / 1'000'000), static_cast<long>((timeout_us % 1'000'000) * 1000)};
  const int sig = sigtimedwait(&set, nullptr, &ts);
  return sig > 0 ? sig : 0;
}

void RaiseTerminationSignal() { kill(getpid(), SIGTERM); }

StatusOr<int> SpawnDetached(const std::vector<std::string>& argv, const std::string& log_path) {
  if (argv.empty()) return InvalidArgumentError("an empty command");
  int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log < 0) return UnavailableError(fmt::format("cannot open {}: {}", log_path, std::strerror(errno)));
  std::vector<char*> args = CStrings(argv);
  pid_t pid = fork();
  if (pid < 0) {
    close(log);
    return UnavailableError(fmt::format("cannot fork: {}", std::strerror(errno)));
  }
  if (pid == 0) {
    setsid();
    signal(SIGPIPE, SIG_DFL);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    dup2(log, 1);
    dup2(log, 2);
    execv(args[0], args.data());
    _exit(127);
  }
  close(log);
  return static_cast<int>(pid);
}

StatusOr<ProcessMemory> ReadProcessMemory(int pid) {
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  if (!in) return NotFoundError(fmt::format("no process {}", pid));
  ProcessMemory m;
  std::string line;
  while (std::getline(in, line)) {
    int64_t kib = 0;
    if (std::sscanf(line.c_str(), "VmRSS: %ld kB", &kib) == 1) m.rss_bytes = kib << 10;
    if (std::sscanf(line.c_str(), "VmHWM: %ld kB", &kib) == 1) m.peak_rss_bytes = kib << 10;
  }
  if (m.rss_bytes == 0) return NotFoundError(fmt::format("process {} reports no resident memory", pid));
  return m;
}

StatusOr<ChildUsage> RunAndMeasure(const std::vector<std::string>& argv, const std::string& output_path) {
  MERIDIAN_ASSIGN_OR_RETURN(int pid, SpawnDetached(argv, output_path));
  int status = 0;
  struct rusage usage {};
  while (wait4(pid, &status, 0, &usage) < 0) {
    if (errno != EINTR) return UnavailableError(fmt::format("waiting for {}: {}", argv[0], std::strerror(errno)));
  }
  ChildUsage out;
  out.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  out.peak_rss_bytes = static_cast<int64_t>(usage.ru_maxrss) << 10;  // KiB on Linux
  return out;
}

}  // namespace meridian
