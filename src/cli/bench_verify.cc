// meridian bench verify: how many Ed25519 signatures per second the chain-verify
// kernel checks on a local cluster of one-core agents, beside libsodium verifying the
// same transactions in this process, on one core and on all cores, in the same run.
//
//   one core     crypto_sign_verify_detached over every transaction, one thread;
//   all cores    the same on one thread per hardware thread;
//   cluster      the chain put as a dataset on `agents` agents declared with one core
//                each, and a job of chain-verify over every shard, then a merge:
//                from submission until the client sees the job end, including the
//                hashing (ids, Merkle roots, links) the baselines skip.
//
// The chain holds a few forged and tampered transactions, and every run's report must
// be exactly the one the generator expects: a fast wrong answer fails the bench.
#include <chrono>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sodium.h>

#include "cli/bench_cluster.h"
#include "cli/commands.h"
#include "client/client.h"
#include "common/parallel.h"
#include "workloads/chain/generate.h"

namespace meridian::cli {
namespace {
namespace kc = kernels::chain;
using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Verifies every transaction of blocks [first, end); returns how many verified.
uint64_t VerifyBlocks(const std::vector<std::string>& blocks, size_t first, size_t end) {
  uint64_t good = 0;
  for (size_t b = first; b < end; ++b) {
    const auto* p = reinterpret_cast<const uint8_t*>(blocks[b].data());
    const size_t count = (blocks[b].size() - kc::kHeaderBytes) / kc::kTxBytes;
    for (size_t i = 0; i < count; ++i) {
      const uint8_t* tx = p + kc::kHeaderBytes + i * kc::kTxBytes;
      good += crypto_sign_verify_detached(tx + kc::kTxBodyBytes, tx, kc::kTxBodyBytes, tx) == 0;
    }
  }
  return good;
}

// The best of `repeat` timings of fn, which returns the count it verified.
StatusOr<double> Best(int repeat, uint64_t want, const std::function<uint64_t()>& fn) {
  double best = 0;
  for (int r = 0; r < repeat; ++r) {
    Clock::time_point t0 = Clock::now();
    const uint64_t got = fn();
    const double s = Since(t0);
    if (got != want) return InternalError(fmt::format("{} signatures verified where {} should", got, want));
    if (best == 0 || s < best) best = s;
  }
  return best;
}

std::string VerifyJob(const std::string& name) {
  return fmt::format(
      "name: {}\ntasks:\n"
      "  - {{name: verify, kernel: chain-verify, map: {{over: dataset://chain}}, resources: {{cpu: 1}}}}\n"
      "  - {{name: report, kernel: chain-verify, reduce: verify, resources: {{cpu: 1}}}}\n",
      name);
}

// One run of the job: the seconds from submission to its end, and the report.
StatusOr<double> RunOnCluster(client::Client& c, const std::string& name, std::string* report) {
  Clock::time_point t0 = Clock::now();
  uint64_t id = 0;
  MERIDIAN_ASSIGN_OR_RETURN(model::JobSummary done,
                            RunJob(c, VerifyJob(name), name + ".yaml", [&](const rpc::SubmitResult& r) { id = r.job_id; }));
  const double seconds = Since(t0);
  if (done.job.status != model::JobStatus::kSucceeded) {
    return InternalError(fmt::format("the verify job {}: {}", model::JobStatusName(done.job.status), done.job.reason));
  }
  MERIDIAN_ASSIGN_OR_RETURN(model::JobView v, c.GetJob(id, true));
  for (const model::TaskView& t : v.tasks) {
    if (t.name != "report") continue;
    if (model::OutputWholeInline(t.record.output, t.record.output_object)) {
      *report = t.record.output;
    } else {
      MERIDIAN_ASSIGN_OR_RETURN(*report, FetchObjectBytes(c, t.record.output_object, "", nullptr, JobOutput{id, t.name}));
    }
    return seconds;
  }
  return InternalError("the verify job has no task 'report'");
}

}  // namespace

Status RunBenchVerify(const BenchVerifyOptions& o, std::ostream& out) {
  if (o.agents < 1 || o.agents > 64) return InvalidArgumentError("--agents: expected 1 to 64");
  if (o.repeat < 1 || o.repeat > 10) return InvalidArgumentError("--repeat: expected 1 to 10");
  const int64_t shards = o.shards > 0 ? o.shards : std::min<int64_t>(o.blocks, 4 * o.agents);
  workloads::chain::GenerateOptions g;
  g.seed = 2026;
  g.blocks = o.blocks;
  g.transactions_per_block = o.transactions_per_block;
  g.accounts = 10'000;
  g.forged = 5;
  g.tampered = 2;
  Clock::time_point t0 = Clock::now();
  MERIDIAN_ASSIGN_OR_RETURN(workloads::chain::GeneratedChain chain, workloads::chain::Generate(g));
  const double generate_s = Since(t0);
  const uint64_t signatures = chain.transactions;
  const uint64_t good = signatures - static_cast<uint64_t>(g.forged + g.tampered);

  // The baselines: libsodium in this process.
  MERIDIAN_ASSIGN_OR_RETURN(double one_core_s,
                            Best(o.repeat, good, [&] { return VerifyBlocks(chain.blocks, 0, chain.blocks.size()); }));
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  MERIDIAN_ASSIGN_OR_RETURN(double all_cores_s, Best(o.repeat, good, [&] {
                              std::atomic<uint64_t> total{0};
                              ParallelFor(chain.blocks.size(), threads,
                                          [&](size_t b) { total += VerifyBlocks(chain.blocks, b, b + 1); });
                              return total.load();
                            }));

  // The cluster: one-core agents, the chain as a dataset, the job `repeat` times.
  const std::string fleet = fmt::format(
      "sites:\n  - {{name: local, kind: dc, provider: onprem, region: local}}\n"
      "nodes:\n  - {{name: verify, site: local, count: {}, cpu: 1, memory: 4GiB}}\n",
      o.agents);
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<BenchCluster> cluster, BenchCluster::Start(fleet, false));
  const std::string dir = cluster->scratch_dir() + "/chain";
  MERIDIAN_RETURN_IF_ERROR(workloads::chain::WriteShards(chain, dir, shards, {}).status());
  DataPutOptions put;
  put.target = cluster->target();
  put.path = dir;
  put.name = "chain";
  std::ostringstream put_log;
  MERIDIAN_RETURN_IF_ERROR(RunDataPut(put, put_log));
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<client::Client> connected, cluster->Connect(600'000'000));
  const std::string want = workloads::chain::ExpectedReport(chain);
  std::vector<double> runs;
  for (int r = 0; r < o.repeat; ++r) {
    std::string report;
    MERIDIAN_ASSIGN_OR_RETURN(double s, RunOnCluster(*connected, fmt::format("verify-{}", r), &report));
    if (report != want) {
      return InternalError(fmt::format("run {}: the cluster reported\n{}where the chain holds\n{}", r, report, want));
    }
    runs.push_back(s);
  }
  const double cluster_s = *std::min_element(runs.begin(), runs.end());

  const double n = static_cast<double>(signatures);
  const double one_core = n / one_core_s, all_cores = n / all_cores_s, on_cluster = n / cluster_s;
  nlohmann::json j = {{"benchmark", "verify"},
                      {"signatures", signatures},
                      {"blocks", o.blocks},
                      {"transactions_per_block", o.transactions_per_block},
                      {"bad_transactions", g.forged + g.tampered},
                      {"generate_seconds", generate_s},
                      {"one_core", {{"seconds", one_core_s}, {"signatures_per_second", one_core}}},
                      {"all_cores", {{"threads", threads}, {"seconds", all_cores_s}, {"signatures_per_second", all_cores}}},
                      {"cluster",
                       {{"agents", o.agents},
                        {"cores", o.agents},
                        {"shards", shards},
                        {"seconds", cluster_s},
                        {"runs_seconds", runs},
                        {"signatures_per_second", on_cluster}}},
                      {"ratio", on_cluster / one_core},
                      {"ratio_to_all_cores", on_cluster / all_cores},
                      {"report_matches", true}};
  if (o.json) {
    out << j.dump(2) << '\n';
    return OkStatus();
  }
  out << fmt::format("meridian bench verify: {} Ed25519 signatures ({} blocks of {}, {} bad), best of {}\n",
                     signatures, o.blocks, o.transactions_per_block, g.forged + g.tampered, o.repeat);
  out << fmt::format("  libsodium, one core          {:>9.0f} signatures/s  ({:.2f} s)\n", one_core, one_core_s);
  out << fmt::format("  libsodium, {} threads         {:>9.0f} signatures/s  ({:.2f} s)\n", threads, all_cores,
                     all_cores_s);
  out << fmt::format("  Meridian, {} one-core agents  {:>9.0f} signatures/s  ({:.2f} s, {} shards; runs {})\n", o.agents,
                     on_cluster, cluster_s, shards, fmt::join(runs, ", "));
  out << fmt::format("  ratio to one core: {:.2f}x; to all cores in one process: {:.2f}x; reports exact\n",
                     on_cluster / one_core, on_cluster / all_cores);
  return OkStatus();
}

}  // namespace meridian::cli
