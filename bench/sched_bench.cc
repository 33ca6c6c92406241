#include "bench/sched_bench.h"

#include <algorithm>
#include <string>

#include "common/units.h"
#include "model/fleet.h"
#include "model/throughput.h"
#include "model/work.h"
#include "sched/filters.h"
#include "sched/pool.h"
#include "sched/schedule.h"

namespace meridian::bench {
namespace {

struct GpuKind {
  const char* type;
  int64_t price_micro_usd_per_hour;  // per 8-GPU node, catalog-like
  double rate;
};
constexpr GpuKind kKinds[] = {
    {"H100", 55'040'000, 740}, {"A100", 21'957'000, 234}, {"L4", 5'900'000, 90}, {"T4", 4'350'000, 49}};
constexpr int kSites = 8;

// N nodes of 8 GPUs over 8 sites in a full mesh; 2 prices per type (on-demand and spot).
model::Fleet MakeFleet(int64_t n) {
  model::Fleet f;
  for (int s = 0; s < kSites; ++s) {
    f.sites.push_back(model::Site{SiteId(static_cast<uint32_t>(s)), "site-" + std::to_string(s),
                                  model::SiteKind::kCloud, "bench", "region-" + std::to_string(s), 90'000});
  }
  for (int a = 0; a < kSites; ++a) {
    for (int b = a + 1; b < kSites; ++b) {
      f.links.push_back(model::Link{SiteId(static_cast<uint32_t>(a)), SiteId(static_cast<uint32_t>(b)),
                                    (10 + 10 * (b - a)) * kMillisecondUs, 10 * kGbps, 20'000, 20'000});
    }
  }
  f.nodes.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const GpuKind& k = kKinds[i % 4];
    model::Node node;
    node.id = NodeId(static_cast<uint32_t>(i));
    node.name = "node-" + std::to_string(i);
    node.site = SiteId(static_cast<uint32_t>((i / 4) % kSites));
    node.cpu_milli = 96'000;
    node.memory_bytes = 768 * kGiB;
    node.spot = (i / (4 * kSites)) % 2 == 1;
    node.price_micro_usd_per_hour = node.spot ? k.price_micro_usd_per_hour / 3 : k.price_micro_usd_per_hour;
    for (int d = 0; d < 8; ++d) node.devices.push_back(model::Device{k.type, d, 40 * kGiB, false, 1.0});
    f.nodes.push_back(std::move(node));
  }
  return f;
}

// Single-device tasks of mixed kinds and objectives; a fifth read a 1 GiB input.
model::Job MakeJob(int64_t tasks, const model::Fleet& fleet) {
  model::Job job;
  job.name = "bench";
  job.tasks.reserve(static_cast<size_t>(tasks));
  for (int64_t i = 0; i < tasks; ++i) {
    model::Task t;
    t.id = TaskId(static_cast<uint32_t>(i));
    t.name = "t" + std::to_string(i);
    t.kernel = "noop";
    t.resources.device_count = 1;
    t.resources.cpu_milli = 4'000;
    t.resources.memory_bytes = 16 * kGiB;
    if (i % 3 == 0) t.resources.accelerator_any_of = {"A100", "H100"};
    // A device-independent estimate keeps every task placeable now; with a work
    // kind, `fastest` would rightly hold tasks back for the faster busy GPUs.
    t.duration_us = (60 + i % 17) * kSecondUs;
    if (i % 5 == 0) {
      t.inputs.push_back(model::ObjectRef{"in" + std::to_string(i), kGiB,
                                          {SiteId(static_cast<uint32_t>(i % fleet.sites.size()))}, {}});
    }
    job.tasks.push_back(std::move(t));
  }
  return job;
}

sched::Snapshot MakeSnapshot(const model::Fleet& fleet, const model::ThroughputTable& tt,
                             const model::Job& job, int64_t tasks) {
  sched::Snapshot s;
  s.fleet = &fleet;
  s.throughput = &tt;
  s.free = sched::ResourceLedger(fleet);
  s.jobs.push_back(sched::JobState::Submitted(job, 0));
  for (int64_t i = 0; i < tasks; ++i) {
    const model::Task& t = job.tasks[static_cast<size_t>(i)];
    s.queue.push_back(sched::PendingTask{0, t.id, t.inputs, i});
  }
  return s;
}

double Percentile(std::vector<int64_t> v, double q) {
  if (v.empty()) return 0;
  size_t k = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<long>(k), v.end());
  return static_cast<double>(v[k]);
}

// The baseline: every task looks at every node, filters it, scores the ones that
// fit (finish time, as `fastest`), and takes the best.
void RunBaseline(const sched::Snapshot& s, Env& env, SchedBenchResult* r) {
  sched::ResourceLedger free = s.free;
  const model::Fleet& fleet = *s.fleet;
  std::vector<int64_t> lat;
  int64_t placed = 0;
  std::vector<int32_t> devices;
  MonotonicTime start = env.clock().Now();
  for (const sched::PendingTask& p : s.queue) {
    MonotonicTime t0 = env.clock().Now();
    const model::Task& task = s.task(p);
    std::vector<sched::SiteInputs> per_site = sched::EstimateInputsPerSite(fleet, p.inputs);
    int64_t best_finish = INT64_MAX;
    std::optional<size_t> best;
    for (size_t n = 0; n < fleet.nodes.size(); ++n) {
      const model::Node& node = fleet.nodes[n];
      const auto& any = task.resources.accelerator_any_of;
      if (!any.empty() && std::find(any.begin(), any.end(), node.accelerator_type()) == any.end()) continue;
      if (!sched::FitsNow(task.resources, free.free(node.id), &devices)) continue;
      int64_t finish = per_site[node.site.value()].transfer_us + task.duration_us;
      if (finish < best_finish) {
        best_finish = finish;
        best = n;
      }
    }
    if (best) {
      const model::Node& node = fleet.nodes[*best];
      sched::FitsNow(task.resources, free.free(node.id), &devices);
      free.Take(sched::Allocation{node.id, task.resources.cpu_milli, task.resources.memory_bytes, devices, 1000});
      ++placed;
    }
    lat.push_back(env.clock().Now().us - t0.us);
  }
  double secs = static_cast<double>(env.clock().Now().us - start.us) / 1e6;
  r->baseline_tasks = static_cast<int64_t>(s.queue.size());
  r->baseline_placements_per_second = secs > 0 ? static_cast<double>(placed) / secs : 0;
  r->baseline_p50_us = Percentile(lat, 0.50);
  r->baseline_p99_us = Percentile(lat, 0.99);
}

}  // namespace

StatusOr<std::vector<SchedBenchResult>> RunSchedBench(const SchedBenchOptions& options, Env& env) {
  model::ThroughputTable tt;
  for (const GpuKind& k : kKinds) tt.Set(k.type, "gemm", k.rate);
  std::vector<SchedBenchResult> out;
  for (int64_t n : options.nodes) {
    if (n <= 0 || n > 1'000'000) return InvalidArgumentError("--nodes: each size must be from 1 to 1000000");
    model::Fleet fleet = MakeFleet(n);
    int64_t tasks = options.tasks > 0 ? options.tasks : std::min<int64_t>(8 * n, 100'000);
    model::Job job = MakeJob(std::max(tasks, options.baseline_tasks), fleet);
    sched::Snapshot snap = MakeSnapshot(fleet, tt, job, tasks);

    SchedBenchResult r;
    r.nodes = n;
    r.pools = static_cast<int64_t>(sched::PoolIndex::Build(fleet).pools.size());
    r.tasks = tasks;
    std::vector<int64_t> lat;
    lat.reserve(static_cast<size_t>(tasks));
    sched::Policy policy;
    MonotonicTime last = env.clock().Now();
    policy.on_decision = [&](size_t) {
      MonotonicTime now = env.clock().Now();
      lat.push_back(now.us - last.us);
      last = now;
    };
    Random rng(options.seed);
    MonotonicTime start = env.clock().Now();
    last = start;
    sched::Plan plan = sched::Schedule(snap, policy, rng);
    r.seconds = static_cast<double>(env.clock().Now().us - start.us) / 1e6;
    r.placed = static_cast<int64_t>(plan.placements.size());
    r.placements_per_second = r.seconds > 0 ? static_cast<double>(r.placed) / r.seconds : 0;
    r.p50_us = Percentile(lat, 0.50);
    r.p99_us = Percentile(lat, 0.99);

    sched::Snapshot base = MakeSnapshot(fleet, tt, job, std::min(tasks, options.baseline_tasks));
    RunBaseline(base, env, &r);
    out.push_back(r);
  }
  return out;
}

}  // namespace meridian::bench
