// A local cluster of real processes for process-level tests: `meridian up` on a
// fleet file in a temporary directory, a client to talk to it, and the means to
// kill and restart its parts. `meridian down` and the directory go with it.
#pragma once

#include <signal.h>
#include <sys/stat.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "client/client.h"
#include "common/subprocess.h"

namespace meridian::testing {

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

inline std::string MeridianBinary() {
  const char* bin = std::getenv("MERIDIAN_BIN");
  return bin ? bin : "meridian";
}

inline std::string SourceDir() {
  const char* dir = std::getenv("MERIDIAN_SOURCE_DIR");
  return dir ? dir : ".";
}

// This test process's own leak check ignores gRPC's TLS objects too (see
// tests/lsan.supp). LeakSanitizer calls this hook by name; each test binary has one
// source file that includes this header.
extern "C" __attribute__((used, visibility("default"))) const char* __lsan_default_suppressions() {
  return "leak:CRYPTO_zalloc\nleak:CRYPTO_strndup\nleak:CRYPTO_strdup\nleak:OPENSSL_sk_deep_copy\nleak:libcrypto.so\n";
}

// Runs `meridian args...` and waits for it (at most two minutes).
inline CommandResult Meridian(const std::vector<std::string>& args) {
  ProcessOptions p;
  p.argv = {MeridianBinary()};
  p.argv.insert(p.argv.end(), args.begin(), args.end());
  p.env = CurrentEnvironment();
  // The processes it starts (and those `up` starts) check leaks with tests/lsan.supp,
  // without listing the suppressions that matched on stderr: tests count its lines.
  p.env.push_back("LSAN_OPTIONS=print_suppressions=0:suppressions=" +
                  std::filesystem::absolute(SourceDir() + "/tests/lsan.supp").string());
  p.timeout_us = 120'000'000;
  p.max_stdout_head = 16 << 20;
  std::atomic<bool> stop{false};
  StatusOr<ProcessResult> r = RunProcess(p, stop);
  if (!r.ok()) return {-1, "", r.status().ToString()};
  return {r->timed_out ? -2 : r->exit_code, r->stdout_head, r->stderr_tail};
}

// A file's whole text (empty if it cannot be read).
inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Polls `done` every 50 ms until it holds or `timeout_s` passes.
inline bool WaitFor(const std::function<bool()>& done, double timeout_s) {
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return done();
}

class LocalCluster {
 public:
  static constexpr size_t kLogTailLines = 15;
  static constexpr size_t kLogReportLines = 120;

  explicit LocalCluster(const std::string& fleet) : fleet_(fleet) {
    char tmpl[] = "/tmp/meridian-test-XXXXXX";  // mkdtemp replaces the Xs
    dir_ = mkdtemp(tmpl);
    // Commands run as their tenant's user (when the tests run as root): they must be
    // able to reach their task directories under it.
    chmod(dir_.c_str(), 0711);
  }
  ~LocalCluster() {
    Meridian({"down", "--dir", dir_});
    // A failed test keeps its cluster's logs and state to read, and prints what the
    // logs end with: CI keeps only the test's output.
    if (::testing::Test::HasFailure()) {
      PrintLogEnds();
      std::fprintf(stderr, "the cluster's logs and state are kept in %s\n", dir_.c_str());
      return;
    }
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  const std::string& dir() const { return dir_; }

  // For each log of the cluster, a sanitizer's report from its first line (a process
  // that `halt_on_error` ended leaves one), else the log's last lines.
  void PrintLogEnds() const {
    std::error_code ec;
    std::vector<std::filesystem::path> logs;
    for (const auto& entry : std::filesystem::directory_iterator(dir_ + "/logs", ec)) logs.push_back(entry.path());
    std::sort(logs.begin(), logs.end());
    for (const std::filesystem::path& log : logs) {
      std::vector<std::string> lines;
      std::ifstream in(log);
      for (std::string line; std::getline(in, line);) lines.push_back(std::move(line));
      size_t from = lines.size() > kLogTailLines ? lines.size() - kLogTailLines : 0;
      for (size_t i = 0; i < lines.size(); ++i) {
        if (lines[i].find("WARNING: ThreadSanitizer") != std::string::npos ||
            lines[i].find("ERROR: AddressSanitizer") != std::string::npos ||
            lines[i].find("ERROR: LeakSanitizer") != std::string::npos) {
          from = i;
          break;
        }
      }
      const size_t to = std::min(lines.size(), from + kLogReportLines);
      std::fprintf(stderr, "--- %s (lines %zu to %zu of %zu)\n", log.filename().c_str(), from + 1, to, lines.size());
      for (size_t i = from; i < to; ++i) std::fprintf(stderr, "%s\n", lines[i].c_str());
    }
  }

  // More arguments for `meridian up` (e.g. {"--coordinators", "2"}).
  void AddUpArgs(const std::vector<std::string>& args) { up_args_.insert(up_args_.end(), args.begin(), args.end()); }
  // The coordinator's heartbeat timeout (`up --heartbeat-timeout`), 5s unless set.
  void SetHeartbeatTimeout(const std::string& timeout) { heartbeat_timeout_ = timeout; }

  // Starts whatever is not running; true once every node is registered.
  bool Up() {
    // Generous for a loaded CI machine running sanitized builds side by side: a node
    // taken for dead by mistake would run a task twice and fail the exactly-once checks.
    // No site gateways (they route services; under the sanitizers each one's watch costs
    // the coordinator more than these tests should share): tests/site_gateway_test.sh.
    std::vector<std::string> args = {"up", "--fleet", fleet_, "--dir", dir_, "--heartbeat-timeout", heartbeat_timeout_,
                                     "--gateways", "none"};
    args.insert(args.end(), up_args_.begin(), up_args_.end());
    CommandResult r = Meridian(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    if (r.exit_code != 0) return false;
    std::ifstream in(dir_ + "/coordinator.addr");
    std::getline(in, address_);
    client_ = NewClient(address_);
    return client_ != nullptr;
  }

  // A client of the coordinator at `address` (this cluster's, or a proxy in front of
  // it) with the cluster's admin credentials.
  std::unique_ptr<client::Client> NewClient(const std::string& address) const {
    StatusOr<rpc::ChannelSecurity> creds = client::LoadClusterCredentials(dir_);
    EXPECT_TRUE(creds.ok()) << creds.status().ToString();
    if (!creds.ok()) return nullptr;
    return std::make_unique<client::Client>(address, *creds);
  }

  client::Client& client() { return *client_; }
  const std::string& address() const { return address_; }

  int Pid(const std::string& component) const {
    std::ifstream in(dir_ + "/pids/" + component + ".pid");
    int pid = 0;
    in >> pid;
    return pid;
  }
  void Kill9(const std::string& component) const {
    int pid = Pid(component);
    ASSERT_GT(pid, 0) << component;
    ASSERT_EQ(kill(pid, SIGKILL), 0) << component;
    WaitFor([&] { return !ProcessRunning(pid, dir_); }, 10);
  }

  // A path tasks may write to (whatever user they run as), in a directory of the cluster's.
  std::string SharedPath(const std::string& name) const {
    const std::string shared = dir_ + "/shared";
    mkdir(shared.c_str(), 0777);
    chmod(shared.c_str(), 0777);
    return shared + "/" + name;
  }

  // Writes `text` to a file in the cluster's directory and returns its path.
  std::string WriteFile(const std::string& name, const std::string& text) const {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }

  // Puts dataset `name` at `site`: `shards` files of `bytes` each, the i-th all of
  // the letter 'a' + i. True when `meridian data put` succeeded.
  bool PutLetterShards(const std::string& name, const std::string& site, int shards, size_t bytes) const {
    const std::string dir = dir_ + "/" + name;
    std::filesystem::create_directories(dir);
    for (int i = 0; i < shards; ++i) {
      std::ofstream(dir + "/" + std::to_string(i) + ".txt") << std::string(bytes, static_cast<char>('a' + i));
    }
    CommandResult put = Meridian({"data", "put", dir, "--name", name, "--site", site, "--dir", dir_});
    EXPECT_EQ(put.exit_code, 0) << put.err;
    return put.exit_code == 0;
  }

  // Submits the spec and waits for the job to end.
  StatusOr<model::JobView> RunJob(const std::string& spec, const std::string& name = "job.yaml") {
    StatusOr<model::JobSummary> s = client_->SubmitAndWatch(spec, name, nullptr, [](const model::JobSummary&) { return true; });
    if (!s.ok()) return s.status();
    return client_->GetJob(s->job.id, true);
  }

 private:
  std::string fleet_;
  std::vector<std::string> up_args_;
  std::string heartbeat_timeout_ = "5s";
  std::string dir_;
  std::string address_;
  std::unique_ptr<client::Client> client_;
};

}  // namespace meridian::testing
