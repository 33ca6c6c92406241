// meridian bench transfer: one object of --bytes moved between two object stores over
// loopback by the transfer layer agents use (objects/transfer.h), in plain TCP and in
// TLS with certificates of a cluster CA made for the run, against iperf3 measured on
// the same loopback in the same run.
#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "common/net.h"
#include "common/subprocess.h"
#include "common/temp_dir.h"
#include "common/units.h"
#include "objects/transfer.h"
#include "security/pki.h"
#include "security/ticket.h"

namespace meridian::cli {
namespace {


// iperf3, one stream of `bytes` from a one-off server on `host` (of this namespace)
// to a client run by `client_prefix` (e.g. in another namespace): bits per second.
StatusOr<double> Iperf3(int64_t bytes, const std::string& host = "127.0.0.1",
                        const std::vector<std::string>& client_prefix = {}) {
  int port = 0;
  {
    MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<TcpListener> probe, TcpListener::Listen(host, 0));
    port = probe->port();
  }
  std::atomic<bool> stop{false};
  ProcessOptions server;
  server.argv = {"iperf3", "-s", "-B", host, "-p", std::to_string(port)};
  server.env = CurrentEnvironment();
  server.timeout_us = 120'000'000;
  StatusOr<ProcessResult> server_result = InternalError("not run");
  std::thread t([&] { server_result = RunProcess(server, stop); });
  // Wait for it to listen.
  bool up = false;
  for (int i = 0; i < 100 && !up; ++i) {
    up = TcpStream::Connect(host, port, 100'000).ok();
    if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ProcessOptions client;
  // -R: the server sends, as a transfer server does to the node fetching.
  client.argv = client_prefix;
  for (const std::string& a : {std::string("iperf3"), std::string("-c"), host, std::string("-p"), std::to_string(port),
                               std::string("-n"), std::to_string(bytes), std::string("-R"), std::string("-J")}) {
    client.argv.push_back(a);
  }
  client.env = CurrentEnvironment();
  client.timeout_us = 120'000'000;
  StatusOr<ProcessResult> r = up ? RunProcess(client, stop) : StatusOr<ProcessResult>(UnavailableError("no server"));
  stop = true;  // the server runs until killed
  t.join();
  if (!server_result.ok()) return server_result.status();
  MERIDIAN_RETURN_IF_ERROR(r.status());
  if (r->exit_code != 0) {
    return UnavailableError(fmt::format("iperf3 exited with {}: {}", r->exit_code, r->stdout_head.substr(0, 300)));
  }
  // Its JSON as it is: under load iperf3 once exited 0 with no end.sum_received, and
  // reading the rate regardless threw (the bench aborted, leaving its namespace).
  const nlohmann::json j = nlohmann::json::parse(r->stdout_head, nullptr, false);
  const nlohmann::json::json_pointer rate("/end/sum_received/bits_per_second");
  if (j.is_discarded() || !j.is_object() || !j.contains(rate) || !j[rate].is_number() || j[rate].get<double>() <= 0) {
    const std::string error = !j.is_discarded() && j.is_object() && j.contains("error") && j["error"].is_string()
                                  ? ": " + j["error"].get<std::string>().substr(0, 300)
                                  : "";
    return UnavailableError(fmt::format("iperf3 printed no received rate{}", error));
  }
  return j[rate].get<double>();
}

// Server and client TLS contexts of a CA made for this run.
StatusOr<std::pair<std::shared_ptr<const security::TlsContext>, std::shared_ptr<const security::TlsContext>>>
BenchTls() {
  constexpr int64_t kHour = int64_t{3600} * 1'000'000;
  MERIDIAN_ASSIGN_OR_RETURN(security::KeyPair ca, security::MakeCa("bench-ca", kHour));
  MERIDIAN_ASSIGN_OR_RETURN(security::KeyPair server, security::Issue(ca, {"node:server", {}, kHour, true}));
  MERIDIAN_ASSIGN_OR_RETURN(security::KeyPair client, security::Issue(ca, {"node:client", {}, kHour, true}));
  MERIDIAN_ASSIGN_OR_RETURN(auto s, security::TlsContext::Create({ca.cert_pem, server.cert_pem, server.key_pem}));
  MERIDIAN_ASSIGN_OR_RETURN(auto c, security::TlsContext::Create({ca.cert_pem, client.cert_pem, client.key_pem}));
  return std::make_pair(std::shared_ptr<const security::TlsContext>(s), std::shared_ptr<const security::TlsContext>(c));
}

// Puts the benchmark's object of `bytes` in `store`: distinct 8-byte words, so
// nothing compresses or repeats.
StatusOr<objects::ObjectId> PutBenchObject(objects::ObjectStore& store, int64_t bytes) {
  std::string data(static_cast<size_t>(bytes), '\0');
  for (size_t i = 0; i + 8 <= data.size(); i += 8) {
    uint64_t v = i * 0x9E3779B97F4A7C15ull;
    std::memcpy(data.data() + i, &v, 8);
  }
  return store.Put(data);
}

// Runs `argv` (ip, tc) to its end; its error output on failure.
Status Run(const std::vector<std::string>& argv) {
  ProcessOptions p;
  p.argv = argv;
  p.env = CurrentEnvironment();
  p.timeout_us = 10'000'000;
  std::atomic<bool> stop{false};
  MERIDIAN_ASSIGN_OR_RETURN(ProcessResult r, RunProcess(p, stop));
  if (r.exit_code != 0) {
    return UnavailableError(fmt::format("{} failed: {}", fmt::join(argv, " "), r.stderr_tail.substr(0, 300)));
  }
  return OkStatus();
}

// The name of a bench's namespace: "mbt" and the pid of the `meridian` that made it.
constexpr std::string_view kLinkPrefix = "mbt";

// Namespaces that earlier benches left (killed before their destructor ran) hold the
// same addresses, which would take this run's traffic: each whose process is gone is
// deleted, saying so on `err`. One whose process runs still as this program is another
// bench at work: FailedPrecondition, as two at once would take each other's traffic.
Status SweepLinksLeft(std::ostream& err) {
  namespace fs = std::filesystem;
  std::string own_comm;
  std::getline(std::ifstream("/proc/self/comm"), own_comm);
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator("/var/run/netns", ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() <= kLinkPrefix.size() || name.compare(0, kLinkPrefix.size(), kLinkPrefix) != 0 ||
        name.find_first_not_of("0123456789", kLinkPrefix.size()) != std::string::npos) {
      continue;
    }
    const std::string pid = name.substr(kLinkPrefix.size());
    std::string comm;
    std::getline(std::ifstream("/proc/" + pid + "/comm"), comm);
    if (!comm.empty() && comm == own_comm) {
      return FailedPreconditionError(fmt::format(
          "another bench transfer --netns runs (process {}, namespace {}): run one at a time, as they share the "
          "addresses 10.231.0.0/24 (if process {} is no bench, delete the namespace: ip netns del {})",
          pid, name, pid, name));
    }
    MERIDIAN_RETURN_IF_ERROR(Run({"ip", "netns", "del", name}));
    err << fmt::format("bench transfer: deleted namespace {}, left by an earlier run (process {} is gone)\n", name,
                       pid);
  }
  return OkStatus();
}

// A network namespace joined to this one by a veth pair, this end shaped by tc tbf:
// here 10.231.0.1, there 10.231.0.2. Deleted (with the pair) on destruction.
class ShapedLink {
 public:
  static constexpr const char* kHere = "10.231.0.1";
  static constexpr const char* kThere = "10.231.0.2";

  static StatusOr<std::unique_ptr<ShapedLink>> Make(int64_t rate_bps, std::ostream& err) {
    if (geteuid() != 0) {
      return FailedPreconditionError("--netns needs root: it makes a network namespace and a veth pair");
    }
    MERIDIAN_RETURN_IF_ERROR(SweepLinksLeft(err));
    auto link = std::unique_ptr<ShapedLink>(new ShapedLink(fmt::format("{}{}", kLinkPrefix, getpid())));
    const std::string& ns = link->ns_;
    const std::string dev = ns + "a";
    MERIDIAN_RETURN_IF_ERROR(Run({"ip", "netns", "add", ns}));
    link->made_ = true;
    // A burst of 10 ms at the rate (at least 64 KiB, a whole GSO packet), so that the
    // bucket never starves a sender at the full rate; 50 ms of queue.
    const int64_t burst = std::max<int64_t>(rate_bps / 8 / 100, 65536);
    for (const std::vector<std::string>& step : std::vector<std::vector<std::string>>{
             {"ip", "link", "add", dev, "type", "veth", "peer", "name", "eth0", "netns", ns},
             {"ip", "addr", "add", std::string(kHere) + "/24", "dev", dev},
             {"ip", "link", "set", dev, "up"},
             {"ip", "-n", ns, "addr", "add", std::string(kThere) + "/24", "dev", "eth0"},
             {"ip", "-n", ns, "link", "set", "eth0", "up"},
             {"ip", "-n", ns, "link", "set", "lo", "up"},
             {"tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", fmt::format("{}bit", rate_bps), "burst",
              std::to_string(burst), "latency", "50ms"}}) {
      MERIDIAN_RETURN_IF_ERROR(Run(step));
    }
    return link;
  }
  ~ShapedLink() {
    if (made_) (void)Run({"ip", "netns", "del", ns_});
  }
  const std::string& ns() const { return ns_; }

  // Moves the calling thread (and the threads it starts) into the namespace.
  Status Enter() const {
    const std::string path = "/var/run/netns/" + ns_;
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return UnavailableError(fmt::format("open {}: {}", path, std::strerror(errno)));
    const int rc = setns(fd, CLONE_NEWNET);
    const int err = errno;
    close(fd);
    if (rc != 0) return UnavailableError(fmt::format("setns {}: {}", ns_, std::strerror(err)));
    return OkStatus();
  }

 private:
  explicit ShapedLink(std::string ns) : ns_(std::move(ns)) {}
  std::string ns_;
  bool made_ = false;
};

// An object fetched across a ShapedLink, in TLS as agents fetch, against the rate the
// link is shaped to and iperf3 across the same link.
Status RunBenchTransferNetns(const BenchTransferOptions& o, std::ostream& out) {
  if (o.rate_bps < 1'000'000 || o.rate_bps > int64_t{40'000'000'000}) {
    return InvalidArgumentError("--rate: expected 1Mbps to 40Gbps");
  }
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<ShapedLink> link, ShapedLink::Make(o.rate_bps, std::cerr));
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<TempDir> dir, TempDir::Make("meridian-bench"));
  const int64_t capacity = o.bytes * 2 + (int64_t{64} << 20);
  MERIDIAN_ASSIGN_OR_RETURN(auto a, objects::ObjectStore::Open({capacity, dir->path() + "/a"}));
  MERIDIAN_ASSIGN_OR_RETURN(auto b, objects::ObjectStore::Open({capacity, dir->path() + "/b"}));
  MERIDIAN_ASSIGN_OR_RETURN(auto tls, BenchTls());
  MERIDIAN_ASSIGN_OR_RETURN(const std::string ticket_key, security::NewTicketKey());
  objects::TransferServerOptions so;
  so.host = ShapedLink::kHere;
  so.tls = tls.first;
  MERIDIAN_ASSIGN_OR_RETURN(auto server, objects::TransferServer::Start(*a, so));
  server->SetTicketKey(ticket_key);
  MERIDIAN_ASSIGN_OR_RETURN(objects::ObjectId id, PutBenchObject(*a, o.bytes));
  MERIDIAN_ASSIGN_OR_RETURN(objects::ObjectId small, a->Put("warm-up"));

  // The fetching side runs on a thread inside the namespace: its connections cross
  // the veth pair, and the shaped end sends.
  std::vector<double> seconds;
  Status fetched = OkStatus();
  std::thread client([&] {
    fetched = link->Enter();
    for (int rep = -1; rep < o.repeat && fetched.ok(); ++rep) {
      const objects::ObjectId& what = rep < 0 ? small : id;  // rep -1: the connection path, warm
      objects::FetchOptions fo{"", 1};
      fo.tls = tls.second;
      StatusOr<std::string> ticket = security::SignTicket(
          {security::TicketKind::kRead, "bench", security::UnixNowUs() + kHourUs, {what.Hex()}, 0}, ticket_key);
      if (!ticket.ok()) {
        fetched = ticket.status();
        break;
      }
      fo.ticket = *ticket;
      StatusOr<objects::FetchStats> f = objects::Fetch(server->address(), what, *b, fo);
      if (!f.ok()) {
        fetched = f.status();
        break;
      }
      b->Release(what);
      if (rep >= 0) seconds.push_back(f->seconds);
    }
  });
  client.join();
  MERIDIAN_RETURN_IF_ERROR(fetched);
  const double best = *std::min_element(seconds.begin(), seconds.end());
  const double rate = static_cast<double>(o.rate_bps);
  const double meridian_bps = static_cast<double>(o.bytes) * 8 / best;
  StatusOr<double> iperf = Iperf3(o.bytes, ShapedLink::kHere, {"ip", "netns", "exec", link->ns()});
  nlohmann::json runs = nlohmann::json::array();
  for (double s : seconds) runs.push_back({{"seconds", s}, {"gbit_per_s", static_cast<double>(o.bytes) * 8 / s / 1e9}});
  nlohmann::json j = {{"bytes", o.bytes},
                      {"netns", true},
                      {"configured_gbit_per_s", rate / 1e9},
                      {"runs", runs},
                      {"best_gbit_per_s", meridian_bps / 1e9},
                      {"share_of_configured", meridian_bps / rate},
                      {"iperf3_gbit_per_s", iperf.ok() ? nlohmann::json(*iperf / 1e9) : nlohmann::json()},
                      {"iperf3_share_of_configured", iperf.ok() ? nlohmann::json(*iperf / rate) : nlohmann::json()},
                      {"ratio_to_iperf3", iperf.ok() ? nlohmann::json(meridian_bps / *iperf) : nlohmann::json()}};
  if (!iperf.ok()) j["iperf3_error"] = iperf.status().message();
  if (o.json) {
    out << j.dump(2) << '\n';
    return OkStatus();
  }
  out << fmt::format("meridian bench transfer --netns: one {} object across a veth pair into a namespace, shaped by "
                     "tc tbf at {:.3f} Gbit/s\n(TLS 1.3 with both ends' certificates and a read ticket, as agents "
                     "fetch; one stream; payload bits over the fetch's time)\n",
                     FormatBytes(o.bytes), rate / 1e9);
  for (const auto& r : runs) {
    out << fmt::format("  {:>7.3f} s  {:>6.3f} Gbit/s\n", r["seconds"].get<double>(), r["gbit_per_s"].get<double>());
  }
  out << fmt::format("  best: {:.3f} Gbit/s = {:.1f}% of the configured rate (share_of_configured {:.3f})\n",
                     meridian_bps / 1e9, 100 * meridian_bps / rate, meridian_bps / rate);
  if (iperf.ok()) {
    out << fmt::format("  iperf3 across the same link, same bytes: {:.3f} Gbit/s = {:.1f}% of it; Meridian is {:.1f}% "
                       "of iperf3\n",
                       *iperf / 1e9, 100 * *iperf / rate, 100 * meridian_bps / *iperf);
  } else {
    out << fmt::format("  iperf3: not measured ({})\n", iperf.status().message());
  }
  return OkStatus();
}

}  // namespace

Status RunBenchTransfer(const BenchTransferOptions& o, std::ostream& out) {
  if (o.bytes < 1 || o.bytes > (int64_t{64} << 30)) return InvalidArgumentError("--bytes: expected 1 to 64 GiB");
  if (o.netns) return RunBenchTransferNetns(o, out);
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<TempDir> dir, TempDir::Make("meridian-bench"));
  const int64_t capacity = o.bytes * 2 + (int64_t{64} << 20);
  MERIDIAN_ASSIGN_OR_RETURN(auto a, objects::ObjectStore::Open({capacity, dir->path() + "/a"}));
  MERIDIAN_ASSIGN_OR_RETURN(auto b, objects::ObjectStore::Open({capacity, dir->path() + "/b"}));
  MERIDIAN_ASSIGN_OR_RETURN(auto server, objects::TransferServer::Start(*a, objects::TransferServerOptions{}));
  std::shared_ptr<const security::TlsContext> client_tls;
  std::unique_ptr<objects::TransferServer> tls_server;
  MERIDIAN_ASSIGN_OR_RETURN(const std::string ticket_key, security::NewTicketKey());
  if (!o.insecure_loopback) {
    MERIDIAN_ASSIGN_OR_RETURN(auto tls, BenchTls());
    objects::TransferServerOptions so;
    so.tls = tls.first;
    client_tls = tls.second;
    MERIDIAN_ASSIGN_OR_RETURN(tls_server, objects::TransferServer::Start(*a, so));
    tls_server->SetTicketKey(ticket_key);  // as an agent gets it from the coordinator
  }

  MERIDIAN_ASSIGN_OR_RETURN(objects::ObjectId id, PutBenchObject(*a, o.bytes));
  // Warm up the connection path and the allocator.
  MERIDIAN_ASSIGN_OR_RETURN(objects::ObjectId small, a->Put("warm-up"));
  MERIDIAN_RETURN_IF_ERROR(objects::Fetch(server->address(), small, *b).status());
  // The first fetch writes memory this process never touched. On a virtual machine
  // the hypervisor backs such memory on first touch, which can cost seconds per GiB
  // and says nothing about the transfer: one untimed fetch first, shown apart.
  MERIDIAN_ASSIGN_OR_RETURN(objects::FetchStats first, objects::Fetch(server->address(), id, *b));
  b->Release(id);

  nlohmann::json runs = nlohmann::json::array();
  double best_single = 0, tls_best_single = 0;
  // Plain and TLS runs alternate, so that both see the same machine.
  for (int streams : {1, 4}) {
    for (int rep = 0; rep < o.repeat; ++rep) {
      for (bool tls : {false, true}) {
        if (tls && !tls_server) continue;
        objects::FetchOptions fo{"", streams};
        if (tls) {
          // As an agent fetches a task's input: with the ticket its assignment carries.
          fo.tls = client_tls;
          MERIDIAN_ASSIGN_OR_RETURN(
              fo.ticket, security::SignTicket({security::TicketKind::kRead, "bench", security::UnixNowUs() + kHourUs,
                                               {id.Hex()}, 0},
                                              ticket_key));
        }
        MERIDIAN_ASSIGN_OR_RETURN(objects::FetchStats f,
                                  objects::Fetch((tls ? tls_server : server)->address(), id, *b, fo));
        b->Release(id);
        const double gbps = static_cast<double>(f.bytes) * 8 / f.seconds / 1e9;
        if (streams == 1) (tls ? tls_best_single : best_single) = std::max(tls ? tls_best_single : best_single, gbps);
        runs.push_back({{"streams", streams}, {"tls", tls}, {"seconds", f.seconds}, {"gbit_per_s", gbps}});
      }
    }
  }
  StatusOr<double> iperf = Iperf3(o.bytes);
  nlohmann::json j = {{"bytes", o.bytes},
                      {"first_fetch_seconds", first.seconds},
                      {"runs", runs},
                      {"best_single_stream_gbit_per_s", best_single},
                      {"iperf3_single_stream_gbit_per_s", iperf.ok() ? nlohmann::json(*iperf / 1e9) : nlohmann::json()},
                      {"ratio_to_iperf3", iperf.ok() ? nlohmann::json(best_single / (*iperf / 1e9)) : nlohmann::json()}};
  if (tls_server) {
    j["tls_best_single_stream_gbit_per_s"] = tls_best_single;
    j["tls_ratio"] = tls_best_single / best_single;
    j["tls_ratio_to_iperf3"] = iperf.ok() ? nlohmann::json(tls_best_single / (*iperf / 1e9)) : nlohmann::json();
  }
  if (!iperf.ok()) j["iperf3_error"] = iperf.status().message();
  if (o.json) {
    out << j.dump(2) << '\n';
    return OkStatus();
  }
  out << fmt::format("meridian bench transfer: one {} object between two object stores over loopback\n",
                     FormatBytes(o.bytes));
  out << "(chunks of 1 MiB with XXH3 checksums, verified against the object id at the end; plain TCP, and TLS 1.3\n"
         " with both ends' certificates checked, as a cluster runs by default)\n";
  out << fmt::format("  first fetch, into fresh memory (untimed warm-up): {:.3f} s\n", first.seconds);
  for (const auto& r : runs) {
    out << fmt::format("  {} stream{} {:5}  {:>7.3f} s  {:>6.2f} Gbit/s\n", r["streams"].get<int>(),
                       r["streams"].get<int>() == 1 ? " " : "s", r["tls"].get<bool>() ? "TLS" : "plain",
                       r["seconds"].get<double>(), r["gbit_per_s"].get<double>());
  }
  if (iperf.ok()) {
    out << fmt::format("  iperf3, one stream of the same bytes, same loopback: {:.2f} Gbit/s -> Meridian's best single "
                       "stream is {:.0f}% of it\n",
                       *iperf / 1e9, 100 * best_single / (*iperf / 1e9));
  } else {
    out << fmt::format("  iperf3: not measured ({})\n", iperf.status().message());
  }
  if (tls_server) {
    out << fmt::format("  TLS: best single stream {:.2f} Gbit/s, {:.0f}% of plain TCP's {:.2f} (tls_ratio {:.2f})",
                       tls_best_single, 100 * tls_best_single / best_single, best_single, tls_best_single / best_single);
    if (iperf.ok()) out << fmt::format("; {:.0f}% of iperf3", 100 * tls_best_single / (*iperf / 1e9));
    out << "\n";
  }
  return OkStatus();
}

}  // namespace meridian::cli
