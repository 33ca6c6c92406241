// meridian bench allreduce: Meridian's all-reduce (src/collective/) among --ranks
// ranks over loopback, in plain TCP and in TLS, against Open MPI's MPI_Allreduce
// (mpirun over its TCP transport, mpi4py) on the same sizes in the same run; then
// 2 sites x 2 ranks over an emulated 80 ms / 1 Gbit/s link, hierarchical against a
// flat ring.
//
// Each figure is the best of --iterations timed runs, each from a barrier of every
// rank to the last rank's finish. Bus bandwidth is NCCL's: size / time x 2(n-1)/n,
// what each rank's link carried.
#include <algorithm>
#include <barrier>
#include <chrono>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "collective/communicator.h"
#include "common/subprocess.h"
#include "common/temp_dir.h"
#include "common/units.h"
#include "security/pki.h"

namespace meridian::cli {
namespace {

constexpr int64_t kHour = int64_t{3600} * 1'000'000;

// The baseline: one MPI_Allreduce of float32 in place, best of `iterations`, each
// from a barrier to the slowest rank's end. Prints "seconds first-element".
constexpr std::string_view kMpiProgram = R"(import sys, time
import numpy as np
from mpi4py import MPI
comm = MPI.COMM_WORLD
count, iterations = int(sys.argv[1]) // 4, int(sys.argv[2])
a = np.ones(count, dtype=np.float32)
comm.Allreduce(MPI.IN_PLACE, a, op=MPI.SUM)
best = float("inf")
for _ in range(iterations):
    a[:] = 1
    comm.Barrier()
    t = time.perf_counter()
    comm.Allreduce(MPI.IN_PLACE, a, op=MPI.SUM)
    best = min(best, comm.allreduce(time.perf_counter() - t, op=MPI.MAX))
if comm.rank == 0:
    print(best, float(a[0]), float(a[-1]))
)";

double BusBandwidth(int64_t bytes, int ranks, double seconds) {
  return static_cast<double>(bytes) / seconds * 2.0 * (ranks - 1) / ranks / 1e9;
}

struct Run {
  std::vector<std::string> sites;  // by rank
  collective::Algorithm algorithm = collective::Algorithm::kRing;
  std::map<std::pair<std::string, std::string>, objects::LinkShape> links;
  std::vector<std::shared_ptr<const security::TlsContext>> tls;  // by rank; empty: plain TCP
  bool shared_memory = false;  // TCP unless told
};

// The best time of `iterations` all-reduces of `bytes` of float32 (ones) among the
// ranks of `run`, as threads of this process on loopback; checks every result.
StatusOr<double> TimeAllReduce(const Run& run, int64_t bytes, int iterations) {
  const int n = static_cast<int>(run.sites.size());
  collective::CommunicatorOptions base;
  base.links = run.links;
  base.timeout_us = 300'000'000;
  base.shared_memory = run.shared_memory;
  MERIDIAN_ASSIGN_OR_RETURN(base.secret, security::RandomHex(16));
  std::vector<std::unique_ptr<TcpListener>> listeners;
  for (int r = 0; r < n; ++r) {
    MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<TcpListener> l, TcpListener::Listen("127.0.0.1", 0));
    base.ranks.push_back({fmt::format("127.0.0.1:{}", l->port()), run.sites[r]});
    listeners.push_back(std::move(l));
  }
  std::vector<std::unique_ptr<collective::Communicator>> comms;
  for (int r = 0; r < n; ++r) {
    collective::CommunicatorOptions o = base;
    o.rank = r;
    if (!run.tls.empty()) o.tls = run.tls[r];
    MERIDIAN_ASSIGN_OR_RETURN(auto c, collective::Communicator::Create(std::move(listeners[r]), std::move(o)));
    comms.push_back(std::move(c));
  }
  const size_t count = static_cast<size_t>(bytes) / sizeof(float);
  std::vector<std::vector<float>> data(n, std::vector<float>(count));
  std::vector<Status> status(n);
  std::vector<double> times;
  using Clock = std::chrono::steady_clock;
  Clock::time_point start;
  std::barrier sync(n, [&]() noexcept { start = Clock::now(); });
  std::barrier done(n, [&]() noexcept { times.push_back(std::chrono::duration<double>(Clock::now() - start).count()); });
  std::vector<std::thread> threads;
  // One untimed run first: connections are made on first use.
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      for (int i = 0; i <= iterations; ++i) {
        std::fill(data[r].begin(), data[r].end(), 1.0f);
        sync.arrive_and_wait();
        Status s = comms[r]->AllReduce(data[r], collective::ReduceOp::kSum, run.algorithm);
        if (!s.ok() && status[r].ok()) status[r] = s;
        done.arrive_and_wait();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const Status& s : status) MERIDIAN_RETURN_IF_ERROR(s);
  for (int r = 0; r < n; ++r) {
    if (comms[r]->shared_memory_connections() != (run.shared_memory ? 1 : 0)) {
      return InternalError(fmt::format("rank {} made {} shared-memory connections", r,
                                       comms[r]->shared_memory_connections()));
    }
    const float want = static_cast<float>(n);
    if (std::any_of(data[r].begin(), data[r].end(), [&](float v) { return v != want; })) {
      return InternalError(fmt::format("rank {}'s all-reduce is wrong", r));
    }
  }
  return *std::min_element(times.begin() + 1, times.end());
}

// Open MPI's figure: mpirun over its TCP transport on loopback, or its shared-memory
// one (vader, copying through a segment as ours does), `ranks` processes.
StatusOr<double> TimeOpenMpi(int ranks, int64_t bytes, int iterations, bool shared_memory) {
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<TempDir> dir, TempDir::Make("meridian-bench-mpi"));
  const std::string program = dir->path() + "/allreduce.py";
  std::ofstream(program) << kMpiProgram;
  ProcessOptions p;
  p.argv = {"mpirun", "-np", std::to_string(ranks), "--oversubscribe", "--mca", "pml", "ob1", "--mca", "btl"};
  if (shared_memory) {
    for (const char* a : {"vader,self", "--mca", "btl_vader_single_copy_mechanism", "none"}) p.argv.push_back(a);
  } else {
    for (const char* a : {"tcp,self", "--mca", "btl_tcp_if_include", "lo"}) p.argv.push_back(a);
  }
  if (geteuid() == 0) p.argv.push_back("--allow-run-as-root");
  for (const std::string& a : {std::string("/usr/bin/python3"), program, std::to_string(bytes), std::to_string(iterations)}) {
    p.argv.push_back(a);
  }
  p.env = CurrentEnvironment();
  p.env.push_back("TMPDIR=" + dir->path());
  p.env.push_back("PMIX_MCA_gds=hash");
  p.timeout_us = 600'000'000;
  std::atomic<bool> stop{false};
  MERIDIAN_ASSIGN_OR_RETURN(ProcessResult r, RunProcess(p, stop));
  double seconds = 0, first = 0, last = 0;
  if (r.exit_code != 0 || std::sscanf(r.stdout_head.c_str(), "%lf %lf %lf", &seconds, &first, &last) != 3) {
    return UnavailableError(fmt::format("mpirun (Open MPI and python3-mpi4py) exited {}: {}", r.exit_code,
                                        r.stderr_tail.substr(0, 400)));
  }
  if (first != ranks || last != ranks) return InternalError("Open MPI's all-reduce is wrong");
  return seconds;
}

}  // namespace

Status RunBenchAllReduce(const BenchAllReduceOptions& options, std::ostream& out) {
  if (options.ranks < 2 || options.ranks > 64) return InvalidArgumentError("--ranks is 2 to 64");
  if (options.bytes < 1024 || options.bytes > (int64_t{4} << 30) || options.bytes % 4 != 0) {
    return InvalidArgumentError("--bytes is 1 KiB to 4 GiB, a multiple of 4 (float32 elements)");
  }
  if (options.iterations < 1 || options.iterations > 1000) return InvalidArgumentError("--iterations is 1 to 1000");
  const int n = options.ranks;

  // 1. Meridian's ring on one site, plain TCP (as Open MPI's) and TLS (as the cluster's).
  Run plain;
  plain.sites.assign(n, "local");
  MERIDIAN_ASSIGN_OR_RETURN(double plain_s, TimeAllReduce(plain, options.bytes, options.iterations));
  Run tls = plain;
  MERIDIAN_ASSIGN_OR_RETURN(security::KeyPair ca, security::MakeCa("bench-ca", kHour));
  for (int r = 0; r < n; ++r) {
    MERIDIAN_ASSIGN_OR_RETURN(security::KeyPair k,
                              security::Issue(ca, {fmt::format("node:rank{}", r), {"127.0.0.1"}, kHour, true}));
    MERIDIAN_ASSIGN_OR_RETURN(auto c, security::TlsContext::Create({ca.cert_pem, k.cert_pem, k.key_pem}));
    tls.tls.push_back(std::move(c));
  }
  MERIDIAN_ASSIGN_OR_RETURN(double tls_s, TimeAllReduce(tls, options.bytes, options.iterations));

  // 2. Open MPI on the same sizes.
  StatusOr<double> mpi_s = TimeOpenMpi(n, options.bytes, options.iterations, false);

  // 3. Ranks of one host through shared memory, against Open MPI's shared memory.
  Run shm = plain;
  shm.shared_memory = true;
  MERIDIAN_ASSIGN_OR_RETURN(double shm_s, TimeAllReduce(shm, options.bytes, options.iterations));
  StatusOr<double> mpi_shm_s = TimeOpenMpi(n, options.bytes, options.iterations, true);

  // 4. Two sites of two ranks over an emulated WAN link: flat ring against hierarchical.
  Run wan;
  wan.sites = {"site-a", "site-a", "site-b", "site-b"};
  wan.links[{"site-a", "site-b"}] = objects::LinkShape{.rtt_us = options.wan_rtt_us, .bandwidth_bps = options.wan_bps};
  const int wan_iterations = std::min(options.iterations, 2);
  wan.algorithm = collective::Algorithm::kRing;
  MERIDIAN_ASSIGN_OR_RETURN(double flat_s, TimeAllReduce(wan, options.bytes, wan_iterations));
  wan.algorithm = collective::Algorithm::kHierarchical;
  MERIDIAN_ASSIGN_OR_RETURN(double hier_s, TimeAllReduce(wan, options.bytes, wan_iterations));

  const double plain_bw = BusBandwidth(options.bytes, n, plain_s);
  const double tls_bw = BusBandwidth(options.bytes, n, tls_s);
  const double mpi_bw = mpi_s.ok() ? BusBandwidth(options.bytes, n, *mpi_s) : 0;
  const double shm_bw = BusBandwidth(options.bytes, n, shm_s);
  const double mpi_shm_bw = mpi_shm_s.ok() ? BusBandwidth(options.bytes, n, *mpi_shm_s) : 0;
  if (options.json) {
    nlohmann::json j;
    j["ranks"] = n;
    j["bytes"] = options.bytes;
    j["iterations"] = options.iterations;
    j["meridian_seconds"] = plain_s;
    j["meridian_busbw_gbs"] = plain_bw;
    j["meridian_tls_seconds"] = tls_s;
    j["meridian_tls_busbw_gbs"] = tls_bw;
    j["openmpi_seconds"] = mpi_s.ok() ? nlohmann::json(*mpi_s) : nlohmann::json();
    j["openmpi_busbw_gbs"] = mpi_s.ok() ? nlohmann::json(mpi_bw) : nlohmann::json();
    j["openmpi_error"] = mpi_s.ok() ? nlohmann::json() : nlohmann::json(std::string(mpi_s.status().message()));
    j["ratio"] = mpi_s.ok() ? nlohmann::json(plain_bw / mpi_bw) : nlohmann::json();
    j["tls_ratio"] = mpi_s.ok() ? nlohmann::json(tls_bw / mpi_bw) : nlohmann::json();
    j["meridian_shm_seconds"] = shm_s;
    j["meridian_shm_busbw_gbs"] = shm_bw;
    j["openmpi_shm_seconds"] = mpi_shm_s.ok() ? nlohmann::json(*mpi_shm_s) : nlohmann::json();
    j["openmpi_shm_busbw_gbs"] = mpi_shm_s.ok() ? nlohmann::json(mpi_shm_bw) : nlohmann::json();
    j["openmpi_shm_error"] =
        mpi_shm_s.ok() ? nlohmann::json() : nlohmann::json(std::string(mpi_shm_s.status().message()));
    j["shm_ratio"] = mpi_shm_s.ok() ? nlohmann::json(shm_bw / mpi_shm_bw) : nlohmann::json();
    j["wan_rtt_ms"] = static_cast<double>(options.wan_rtt_us) / 1000;
    j["wan_gbps"] = static_cast<double>(options.wan_bps) / 1e9;
    j["flat_ring_seconds"] = flat_s;
    j["hierarchical_seconds"] = hier_s;
    j["hierarchical_ratio"] = flat_s / hier_s;
    out << j.dump(2) << "\n";
    return OkStatus();
  }
  out << fmt::format("all-reduce of {} (float32 sum), {} ranks on loopback, best of {}:\n", FormatBytes(options.bytes),
                     n, options.iterations);
  out << fmt::format("  Meridian, plain TCP  {:8.1f} ms  bus bandwidth {:.2f} GB/s\n", plain_s * 1e3, plain_bw);
  out << fmt::format("  Meridian, TLS        {:8.1f} ms  bus bandwidth {:.2f} GB/s\n", tls_s * 1e3, tls_bw);
  if (mpi_s.ok()) {
    out << fmt::format("  Open MPI, TCP        {:8.1f} ms  bus bandwidth {:.2f} GB/s\n", *mpi_s * 1e3, mpi_bw);
    out << fmt::format("  ratio (Meridian plain TCP / Open MPI TCP) {:.2f}; with TLS {:.2f}\n", plain_bw / mpi_bw,
                       tls_bw / mpi_bw);
  } else {
    out << "  Open MPI: not measured: " << mpi_s.status().message() << "\n";
  }
  out << fmt::format("  Meridian, shared memory {:8.1f} ms  bus bandwidth {:.2f} GB/s\n", shm_s * 1e3, shm_bw);
  if (mpi_shm_s.ok()) {
    out << fmt::format("  Open MPI, shared memory {:8.1f} ms  bus bandwidth {:.2f} GB/s\n", *mpi_shm_s * 1e3,
                       mpi_shm_bw);
    out << fmt::format("  shm_ratio (Meridian / Open MPI, shared memory) {:.2f}\n", shm_bw / mpi_shm_bw);
  } else {
    out << "  Open MPI, shared memory: not measured: " << mpi_shm_s.status().message() << "\n";
  }
  out << fmt::format("2 sites x 2 ranks over an emulated {:.0f} ms / {:.1f} Gbit/s link, best of {}:\n",
                     static_cast<double>(options.wan_rtt_us) / 1000, static_cast<double>(options.wan_bps) / 1e9,
                     wan_iterations);
  out << fmt::format("  flat ring     {:8.1f} ms\n  hierarchical  {:8.1f} ms  (hierarchical_ratio {:.2f})\n",
                     flat_s * 1e3, hier_s * 1e3, flat_s / hier_s);
  return OkStatus();
}

}  // namespace meridian::cli
