// meridian bench transfer: one object of --bytes moved between two object stores over
// loopback by the transfer layer agents use (objects/transfer.h), in plain TCP and in
// TLS with certificates of a cluster CA made for the run, against iperf3 measured on
// the same loopback in the same run.
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include <fmt/format.h>
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


// iperf3, one stream of `bytes` to a one-off server on loopback: bits per second.
StatusOr<double> Iperf3(int64_t bytes) {
  int port = 0;
  {
    MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<TcpListener> probe, TcpListener::Listen("127.0.0.1", 0));
    port = probe->port();
  }
  std::atomic<bool> stop{false};
  ProcessOptions server;
  server.argv = {"iperf3", "-s", "-B", "127.0.0.1", "-p", std::to_string(port)};
  server.env = CurrentEnvironment();
  server.timeout_us = 120'000'000;
  StatusOr<ProcessResult> server_result = InternalError("not run");
  std::thread t([&] { server_result = RunProcess(server, stop); });
  // Wait for it to listen.
  bool up = false;
  for (int i = 0; i < 100 && !up; ++i) {
    up = TcpStream::Connect("127.0.0.1", port, 100'000).ok();
    if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ProcessOptions client;
  client.argv = {"iperf3", "-c", "127.0.0.1", "-p", std::to_string(port), "-n", std::to_string(bytes), "-J"};
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
  nlohmann::json j = nlohmann::json::parse(r->stdout_head, nullptr, false);
  if (j.is_discarded() || !j.contains("end")) return InternalError("iperf3 printed no result");
  return j["end"]["sum_received"]["bits_per_second"].get<double>();
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

}  // namespace

Status RunBenchTransfer(const BenchTransferOptions& o, std::ostream& out) {
  if (o.bytes < 1 || o.bytes > (int64_t{64} << 30)) return InvalidArgumentError("--bytes: expected 1 to 64 GiB");
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

  // The object: distinct 8-byte words, so nothing compresses or repeats.
  std::string data(static_cast<size_t>(o.bytes), '\0');
  for (size_t i = 0; i + 8 <= data.size(); i += 8) {
    uint64_t v = i * 0x9E3779B97F4A7C15ull;
    std::memcpy(data.data() + i, &v, 8);
  }
  MERIDIAN_ASSIGN_OR_RETURN(objects::ObjectId id, a->Put(data));
  data = std::string();
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
