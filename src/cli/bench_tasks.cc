// meridian bench tasks: end-to-end throughput of no-op tasks and the round trip of
// one task, on a local cluster of real processes over loopback that it starts and
// stops itself.

#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/bench_cluster.h"
#include "cli/commands.h"
#include "client/client.h"
#include "common/units.h"

namespace meridian::cli {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

namespace {

struct TaskFigures {
  double total_s = 0, submit_s = 0, throughput = 0;
  std::vector<double> client_us, cluster_us, submit_us;

  nlohmann::json Json() const {
    return {{"seconds", total_s},
            {"submit_seconds", submit_s},
            {"tasks_per_second", throughput},
            {"round_trip_us", {{"p50", Percentile(client_us, 0.5)}, {"p99", Percentile(client_us, 0.99)}}},
            {"submit_us", {{"p50", Percentile(submit_us, 0.5)}, {"p99", Percentile(submit_us, 0.99)}}},
            {"in_cluster_round_trip_us", {{"p50", Percentile(cluster_us, 0.5)}, {"p99", Percentile(cluster_us, 0.99)}}}};
  }
};

// Starts a cluster (TLS and tokens unless `insecure`), measures, stops it.
StatusOr<TaskFigures> Measure(const BenchTasksOptions& o, bool insecure) {
  const std::string fleet = OneSiteFleet(o.agents);
  const std::string spec = NoopJob(fmt::format("noop-{}", o.tasks), o.tasks);
  const std::string one = NoopJob("round-trip", 1);
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<BenchCluster> cluster, BenchCluster::Start(fleet, false, insecure));
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<client::Client> connected, cluster->Connect(60'000'000));
  client::Client& c = *connected;

  // Warm up: connections, the coordinator's first scheduling pass.
  for (int i = 0; i < 20; ++i) MERIDIAN_RETURN_IF_ERROR(RunJob(c, one, "one.yaml").status());

  // Throughput: submission of one job of N tasks to the last one's completion.
  TaskFigures f;
  Clock::time_point t0 = Clock::now();
  Clock::time_point t_ack;
  MERIDIAN_ASSIGN_OR_RETURN(model::JobSummary done,
                            RunJob(c, spec, "noop.yaml", [&](const rpc::SubmitResult&) { t_ack = Clock::now(); }));
  Clock::time_point t1 = Clock::now();
  if (done.job.status != model::JobStatus::kSucceeded) {
    return InternalError(fmt::format("the benchmark job {}: {}", model::JobStatusName(done.job.status), done.job.reason));
  }
  f.total_s = Seconds(t1 - t0);
  f.submit_s = Seconds(t_ack - t0);
  f.throughput = static_cast<double>(o.tasks) / f.total_s;

  // Round trip: one job of one task at a time, from submission until the client
  // sees it finished; and inside the cluster, from assignment to committed result.
  for (int i = 0; i < o.latency_samples; ++i) {
    Clock::time_point a = Clock::now();
    MERIDIAN_ASSIGN_OR_RETURN(model::JobSummary r, RunJob(c, one, "one.yaml", [&](const rpc::SubmitResult&) {
      f.submit_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - a).count());
    }));
    f.client_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - a).count());
    MERIDIAN_ASSIGN_OR_RETURN(model::JobView v, c.GetJob(r.job.id, true));
    const model::TaskRecord& t = v.tasks.front().record;
    f.cluster_us.push_back(static_cast<double>(t.finished_us - t.started_us));
  }
  return f;
}

void PrintFigures(const TaskFigures& f, std::ostream& out) {
  out << fmt::format("  throughput      {:>10.0f} tasks/s   ({:.2f} s from submission to the last result; submit took {:.2f} s)\n",
                     f.throughput, f.total_s, f.submit_s);
  out << fmt::format("  round trip      p50 {:>7.0f} us   p99 {:>7.0f} us   (submit -> client sees it done, {} samples)\n",
                     Percentile(f.client_us, 0.5), Percentile(f.client_us, 0.99), f.client_us.size());
  out << fmt::format("  submit          p50 {:>7.0f} us   p99 {:>7.0f} us   (until the job is durable and acknowledged)\n",
                     Percentile(f.submit_us, 0.5), Percentile(f.submit_us, 0.99));
  out << fmt::format("  in the cluster  p50 {:>7.0f} us   p99 {:>7.0f} us   (assigned -> result committed)\n",
                     Percentile(f.cluster_us, 0.5), Percentile(f.cluster_us, 0.99));
}

}  // namespace

Status RunBenchTasks(const BenchTasksOptions& o, std::ostream& out) {
  if (o.agents < 1 || o.agents > 16) return InvalidArgumentError("--agents: expected 1 to 16");
  if (o.tasks < 1 || o.tasks > 1'000'000) return InvalidArgumentError("--tasks: expected 1 to 1000000");
  // Plaintext first, then the same with TLS and tokens (as a cluster runs by default),
  // one cluster at a time so that neither slows the other.
  MERIDIAN_ASSIGN_OR_RETURN(TaskFigures plain, Measure(o, true));
  std::optional<TaskFigures> tls;
  if (!o.insecure_loopback) {
    MERIDIAN_ASSIGN_OR_RETURN(TaskFigures t, Measure(o, false));
    tls = std::move(t);
  }
  const TaskFigures& main = tls ? *tls : plain;

  // Dask distributed on this machine, 2 worker processes (the figures).
  constexpr double kDaskBest = 1600, kDaskDefault = 520, kDaskP50Us = 11'000;
  nlohmann::json j = main.Json();
  j["agents"] = o.agents;
  j["tasks"] = o.tasks;
  j["tls"] = tls.has_value();
  j["plain"] = plain.Json();
  if (tls) {
    j["tls_ratio"] = tls->throughput / plain.throughput;
    j["tls_round_trip_ratio"] = Percentile(tls->client_us, 0.5) / Percentile(plain.client_us, 0.5);
  }
  j["baseline"] = {{"dask_2_workers_best_tasks_per_second", kDaskBest},
                   {"dask_2_workers_default_tasks_per_second", kDaskDefault},
                   {"dask_p50_round_trip_us", kDaskP50Us}};
  if (o.json) {
    out << j.dump(2) << '\n';
    return OkStatus();
  }
  out << fmt::format("meridian bench tasks: {} no-op tasks on {} agents (local cluster, gRPC over loopback, SQLite WAL)\n",
                     o.tasks, o.agents);
  if (tls) {
    out << "with TLS, client certificates and tokens (the default):\n";
    PrintFigures(*tls, out);
  }
  out << "plaintext (--insecure):\n";
  PrintFigures(plain, out);
  if (tls) {
    out << fmt::format("  TLS costs: throughput x{:.2f} (tls_ratio), p50 round trip x{:.2f}\n",
                       tls->throughput / plain.throughput,
                       Percentile(tls->client_us, 0.5) / Percentile(plain.client_us, 0.5));
  }
  out << fmt::format("  baseline: Dask distributed, 2 worker processes, this machine: at best {:.0f} tasks/s "
                     "({:.0f} with default queueing), p50 round trip {:.0f} us -> {:.1f}x the best Dask throughput\n",
                     kDaskBest, kDaskDefault, kDaskP50Us, main.throughput / kDaskBest);
  return OkStatus();
}

}  // namespace meridian::cli
