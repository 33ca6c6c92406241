// `meridian gang mpirun` and `meridian gang rsh`: Open MPI launched by Meridian.
//
// Every member of a gang runs `meridian gang mpirun -- PROGRAM...`. Each listens on
// MASTER_PORT + 1 + RANK for one launch; rank 0 also runs `mpirun` over a host file
// of the gang's ranks ("rank0".."rankN-1", one slot each) with plm_rsh_agent set to
// `meridian gang rsh`, so mpirun starts its daemon (orted) in each member the way it
// would over ssh. A launch proves itself with the gang's secret (HMAC over the
// listener's nonce and the command); the listener runs the command with the member's
// environment and relays its output and exit status. See docs/training.md.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "agent/gang.h"
#include "cli/commands.h"
#include "common/logging.h"
#include "common/temp_dir.h"
#include "model/work.h"
#include "security/pki.h"
#include "security/ticket.h"

extern char** environ;

namespace meridian::cli {
namespace {

constexpr std::string_view kHello = "MGNG1";
constexpr size_t kNonceBytes = 32;
constexpr size_t kProofBytes = 32;
constexpr uint32_t kMaxCommandBytes = 64 << 10;
constexpr uint32_t kMaxFrameBytes = 1 << 20;
enum Frame : uint8_t { kOutput = 1, kExit = 2, kRefused = 3 };

}  // namespace

std::string Getenv(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

StatusOr<GangMember> ReadGangMember() {
  auto var = [](const char* name) -> StatusOr<std::string> {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') {
      return FailedPreconditionError(fmt::format(
          "{} is not set: meridian gang runs as the command of a gang's member (a task with replicas or gang)", name));
    }
    return std::string(v);
  };
  GangMember m;
  MERIDIAN_ASSIGN_OR_RETURN(std::string rank, var("RANK"));
  MERIDIAN_ASSIGN_OR_RETURN(std::string world, var("WORLD_SIZE"));
  MERIDIAN_ASSIGN_OR_RETURN(std::string port, var("MASTER_PORT"));
  MERIDIAN_ASSIGN_OR_RETURN(m.secret, var("MERIDIAN_GANG_SECRET"));
  MERIDIAN_ASSIGN_OR_RETURN(std::string peers, var("MERIDIAN_GANG_PEERS"));
  m.rank = static_cast<uint32_t>(std::strtoul(rank.c_str(), nullptr, 10));
  m.world = static_cast<uint32_t>(std::strtoul(world.c_str(), nullptr, 10));
  m.master_port = static_cast<int32_t>(std::strtol(port.c_str(), nullptr, 10));
  std::ifstream in(peers);
  if (!in) return NotFoundError(fmt::format("cannot read the gang's peers file {}", peers));
  std::string line;
  while (std::getline(in, line) && m.hosts.size() <= model::kMaxGangMembers) {
    std::istringstream fields(line);
    std::string r, node, site, host;
    if (fields >> r >> node >> site >> host) {
      m.hosts.push_back(host);
      m.sites.push_back(site);
    }
  }
  if (m.world == 0 || m.hosts.size() != m.world || m.rank >= m.world) {
    return FailedPreconditionError(fmt::format("the gang's peers file {} lists {} ranks; WORLD_SIZE is {}, RANK {}",
                                               peers, m.hosts.size(), m.world, m.rank));
  }
  if (m.master_port <= 0 || m.master_port + 1 + static_cast<int64_t>(m.world) > 65535) {
    return FailedPreconditionError(fmt::format("MASTER_PORT {} leaves no launch port for {} ranks", m.master_port, m.world));
  }
  m.meridian = Getenv("MERIDIAN_BIN");
  if (m.meridian.empty()) m.meridian = "meridian";
  return m;
}

namespace {

int32_t LaunchPort(const GangMember& m, uint32_t rank) { return m.master_port + 1 + static_cast<int32_t>(rank); }

bool ReadExactly(int fd, size_t n, std::string& out) {
  out.resize(n);
  size_t got = 0;
  while (got < n) {
    const ssize_t r = recv(fd, out.data() + got, n - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    got += static_cast<size_t>(r);
  }
  return true;
}

std::string BigEndian32(uint32_t v) {
  const char b[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
                     static_cast<char>(v)};
  return std::string(b, 4);
}

uint32_t FromBigEndian32(std::string_view b) {
  return (static_cast<uint32_t>(static_cast<uint8_t>(b[0])) << 24) |
         (static_cast<uint32_t>(static_cast<uint8_t>(b[1])) << 16) |
         (static_cast<uint32_t>(static_cast<uint8_t>(b[2])) << 8) | static_cast<uint32_t>(static_cast<uint8_t>(b[3]));
}

bool SendFrame(int fd, Frame type, std::string_view data) {
  return SendAll(fd, std::string(1, static_cast<char>(type)) + BigEndian32(static_cast<uint32_t>(data.size()))) &&
         SendAll(fd, data);
}

StatusOr<int> Listen(int32_t port) {
  StatusOr<int> fd = agent::ListenOnAllAddresses(port);
  if (!fd.ok()) {
    return UnavailableError(
        fmt::format("cannot listen for the gang's launch on port {}: {}", port, fd.status().message()));
  }
  return fd;
}

// Runs `command` with /bin/sh, its output relayed to `conn` as it comes; its exit
// status (128 + the signal for one that was killed).
int RunRelayed(int conn, const std::string& command) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return 127;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_adddup2(&actions, out[1], 2);
  std::vector<char*> argv = {const_cast<char*>("/bin/sh"), const_cast<char*>("-c"),
                             const_cast<char*>(command.c_str()), nullptr};
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, "/bin/sh", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  if (spawned != 0) {
    close(out[0]);
    SendFrame(conn, kOutput, fmt::format("meridian gang: cannot start /bin/sh: {}\n", strerror(spawned)));
    return 127;
  }
  char buf[16 << 10];
  for (;;) {
    const ssize_t n = read(out[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    SendFrame(conn, kOutput, std::string_view(buf, static_cast<size_t>(n)));  // a gone client: keep draining
    // And into this member's own log, where a daemon's complaint is found when the
    // launcher (rank 0's mpirun) is gone with its gang.
    std::fwrite(buf, 1, static_cast<size_t>(n), stderr);
  }
  close(out[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Waits on `listen_fd` for one launch proven with the member's secret, runs it and
// returns its exit status. Connections that cannot prove themselves are refused, and
// the wait goes on, until `deadline` or `stop`.
StatusOr<int> ServeOneLaunch(int listen_fd, const GangMember& m, std::chrono::steady_clock::time_point deadline,
                             const std::atomic<bool>& stop) {
  while (!stop.load()) {
    if (std::chrono::steady_clock::now() >= deadline) {
      return DeadlineExceededError(fmt::format(
          "rank {} was never launched (no mpirun from rank 0 reached port {})", m.rank, LaunchPort(m, m.rank)));
    }
    pollfd p{listen_fd, POLLIN, 0};
    if (poll(&p, 1, 200) <= 0) continue;
    sockaddr_storage peer{};
    socklen_t peer_len = sizeof(peer);
    const int conn = accept4(listen_fd, reinterpret_cast<sockaddr*>(&peer), &peer_len, SOCK_CLOEXEC);
    if (conn < 0) continue;
    const timeval timeout{10, 0};  // a peer that stalls the handshake is dropped
    setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    StatusOr<std::string> nonce = security::RandomHex(kNonceBytes / 2);
    std::string proof, length, command;
    const bool read = nonce.ok() && SendAll(conn, std::string(kHello) + *nonce) &&
                      ReadExactly(conn, kProofBytes, proof) && ReadExactly(conn, 4, length) &&
                      FromBigEndian32(length) <= kMaxCommandBytes &&
                      ReadExactly(conn, FromBigEndian32(length), command);
    if (!read || !security::ConstantTimeEquals(proof, security::GangLaunchProof(m.secret, *nonce, command))) {
      SendFrame(conn, kRefused, "not a launch from this gang (no proof of its secret)");
      close(conn);
      std::fprintf(stderr, "meridian gang: refused a launch that did not prove the gang's secret\n");
      continue;
    }
    const int code = RunRelayed(conn, command);
    SendFrame(conn, kExit, BigEndian32(static_cast<uint32_t>(code)));
    close(conn);
    return code;
  }
  return CancelledError("stopped");
}

StatusOr<int> Connect(const std::string& host, int32_t port, std::chrono::steady_clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    return UnavailableError(fmt::format("cannot resolve {}: {}", host, gai_strerror(rc)));
  }
  std::string last = "no address";
  // The member may not listen yet (members start together, not at the same instant).
  for (int backoff_ms = 50;; backoff_ms = std::min(backoff_ms * 2, 1000)) {
    for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
      const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
        freeaddrinfo(found);
        return fd;
      }
      last = strerror(errno);
      close(fd);
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
  }
  freeaddrinfo(found);
  return UnavailableError(fmt::format("cannot reach {} port {}: {}", host, port, last));
}

}  // namespace

Status RunGangRsh(const GangRshOptions& options, int* exit_code) {
  MERIDIAN_ASSIGN_OR_RETURN(GangMember m, ReadGangMember());
  // ssh's way: the remote command is its arguments joined by spaces, for a shell.
  std::string command;
  for (const std::string& a : options.command) command += (command.empty() ? "" : " ") + a;
  if (command.empty()) return InvalidArgumentError("no command to launch");
  if (command.size() > kMaxCommandBytes) {
    return InvalidArgumentError(fmt::format("a launched command is at most {} bytes", kMaxCommandBytes));
  }
  uint32_t rank = 0;
  if (options.host.rfind("rank", 0) != 0 ||
      std::sscanf(options.host.c_str() + 4, "%u", &rank) != 1 || fmt::format("rank{}", rank) != options.host ||
      rank >= m.world) {
    return InvalidArgumentError(
        fmt::format("'{}' is not a rank of this gang (rank0 to rank{})", options.host, m.world - 1));
  }
  MERIDIAN_ASSIGN_OR_RETURN(
      int fd, Connect(m.hosts[rank], LaunchPort(m, rank), std::chrono::steady_clock::now() + std::chrono::seconds(60)));
  const timeval timeout{30, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  std::string hello;
  if (!ReadExactly(fd, kHello.size() + kNonceBytes, hello) || hello.rfind(kHello, 0) != 0) {
    close(fd);
    return UnavailableError(fmt::format("{} did not answer as a gang member", options.host));
  }
  const std::string nonce = hello.substr(kHello.size());
  if (!SendAll(fd, security::GangLaunchProof(m.secret, nonce, command) +
                        BigEndian32(static_cast<uint32_t>(command.size())) + command)) {
    close(fd);
    return UnavailableError(fmt::format("{} closed the connection", options.host));
  }
  // The launched program runs as long as the job: no read timeout from here on.
  const timeval forever{0, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &forever, sizeof(forever));
  for (;;) {
    std::string head, body;
    if (!ReadExactly(fd, 5, head)) break;
    const uint32_t n = FromBigEndian32(std::string_view(head).substr(1));
    if (n > kMaxFrameBytes || !ReadExactly(fd, n, body)) break;
    switch (static_cast<Frame>(head[0])) {
      case kOutput:
        std::fwrite(body.data(), 1, body.size(), stdout);
        std::fflush(stdout);
        break;
      case kExit:
        close(fd);
        *exit_code = body.size() == 4 ? static_cast<int>(FromBigEndian32(body)) : 1;
        return OkStatus();
      case kRefused:
        close(fd);
        return PermissionDeniedError(fmt::format("{} refused the launch: {}", options.host, body));
      default:
        close(fd);
        return DataLossError(fmt::format("{} sent an unknown frame", options.host));
    }
  }
  close(fd);
  return UnavailableError(fmt::format("the launch on {} ended without an exit status", options.host));
}

Status RunGangMpirun(const GangMpirunOptions& options, int* exit_code) {
  if (options.command.empty()) return InvalidArgumentError("give the MPI program after --");
  MERIDIAN_ASSIGN_OR_RETURN(GangMember m, ReadGangMember());
  // Open MPI 4.1's PMIx shared-memory store reports a spurious error ("PMIX ERROR: ...
  // dstore_base.c") into the program's output when several daemons share a host, as a
  // local cluster's members do; its hash store does not. For mpirun and the daemons.
  setenv("PMIX_MCA_gds", "hash", 0);
  // Open MPI's daemons make their session directories under TMPDIR
  // (ompi.HOST.UID/jf.JOB/...), and two daemons of one job that create that tree at
  // once on one host race: one fails with "mkdir ... File exists" and the gang fails.
  // Each member's daemon gets a TMPDIR of its own, removed when the launch is over.
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<TempDir> tmp, TempDir::Make("meridian-mpi"));
  setenv("TMPDIR", tmp->path().c_str(), 1);
  MERIDIAN_ASSIGN_OR_RETURN(int listen_fd, Listen(LaunchPort(m, m.rank)));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(options.wait_us);
  std::atomic<bool> stop{false};
  if (m.rank != 0) {
    StatusOr<int> code = ServeOneLaunch(listen_fd, m, deadline, stop);
    close(listen_fd);
    if (!code.ok()) return code.status();
    *exit_code = *code;
    return OkStatus();
  }
  // Rank 0: its own launch is served beside mpirun, which launches every rank.
  StatusOr<int> served = CancelledError("not launched");
  std::thread serve([&] { served = ServeOneLaunch(listen_fd, m, deadline, stop); });
  const std::string hostfile = "meridian-gang-hosts";
  {
    std::ofstream out(hostfile);
    for (uint32_t r = 0; r < m.world; ++r) out << "rank" << r << " slots=1\n";
  }
  std::vector<std::string> args = {"mpirun", "--hostfile", hostfile, "-np", std::to_string(m.world), "--mca",
                                   "plm_rsh_agent", m.meridian + " gang rsh", "--mca", "plm_rsh_no_tree_spawn", "1",
                                   // Each daemon stays the child of its member's launch (not
                                   // daemonized away), so the member runs as long as it does.
                                   "--mca", "orte_leave_session_attached", "1"};
  if (geteuid() == 0) args.push_back("--allow-run-as-root");
  for (const std::string& a : options.mpirun_args) args.push_back(a);
  args.insert(args.end(), options.command.begin(), options.command.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, options.mpirun.c_str(), nullptr, nullptr, argv.data(), environ);
  int status = 0;
  if (spawned == 0) {
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  stop = true;
  serve.join();
  close(listen_fd);
  if (spawned != 0) return NotFoundError(fmt::format("cannot start {}: {}", options.mpirun, strerror(spawned)));
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return OkStatus();
}

}  // namespace meridian::cli
