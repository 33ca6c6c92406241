// meridian bench scale: a coordinator process with N simulated agents connected
// (rpc::SimAgents, in a few processes, each agent its own gRPC connection): task
// throughput, the coordinator's CPU with every agent idle, the round trip of one task,
// heartbeat lag, memory. The baseline, in the same run, is the same measurement with
// two agents.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/bench_cluster.h"
#include "cli/commands.h"
#include "client/client.h"
#include "common/subprocess.h"
#include "common/temp_dir.h"
#include "rpc/sim_agents.h"

namespace meridian::cli {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;

// Agents per simulated-agent process.
constexpr int kAgentsPerProcess = 1250;

nlohmann::json Quantiles(const std::vector<double>& v) {
  return {{"p50", Percentile(v, 0.5)}, {"p99", Percentile(v, 0.99)}};
}

// CPU seconds a process has used (user and system), from /proc/PID/stat.
StatusOr<double> CpuSeconds(int pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return NotFoundError(fmt::format("process {} is gone", pid));
  std::istringstream fields(stat.substr(close + 2));
  std::string f;
  // Fields 3.. after the command; utime and stime are fields 14 and 15.
  for (int i = 3; i < 14; ++i) fields >> f;
  long long utime = 0, stime = 0;
  fields >> utime >> stime;
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// The processes of one measurement; all are ended however it ends.
class Processes {
 public:
  ~Processes() {
    for (int pid : pids_) {
      if (!ChildExited(pid)) kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
  void Add(int pid) { pids_.push_back(pid); }
  // SIGTERM, then waits up to `wait_s` for it to exit (SIGKILL after).
  static void End(int pid, double wait_s) {
    kill(pid, SIGTERM);
    for (int i = 0; i < static_cast<int>(wait_s * 100) && !ChildExited(pid); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!ChildExited(pid)) kill(pid, SIGKILL);
  }

 private:
  std::vector<int> pids_;
};

struct ScaleFigures {
  int agents = 0;
  int processes = 0;
  double connect_s = 0;
  double heartbeat_interval_s = 0;  // the longest the coordinator gave the agents
  double idle_window_s = 0;         // how long the idle CPU was measured
  double idle_cpu_fraction = 0;
  double busy_cpu_fraction = 0;
  double total_s = 0, throughput = 0;
  double rss_mib = 0, peak_rss_mib = 0;
  std::vector<double> round_trip_us, placement_us;
  rpc::SimAgentsStats agent_stats;
  // The throughput job and the round trips again, with clients listing jobs beside
  // them (--readers).
  struct UnderReads {
    int readers = 0;
    int history = 0;  // finished jobs the coordinator held for them to list
    double total_s = 0, throughput = 0;
    std::vector<double> round_trip_us;
    double seconds = 0;  // how long they read
    std::vector<double> list_all_us, list_live_us;
    int64_t errors = 0;

    nlohmann::json Json() const {
      return {{"readers", readers},
              {"history_jobs", history},
              {"tasks_per_second", throughput},
              {"seconds", total_s},
              {"round_trip_p50_ms", Percentile(round_trip_us, 0.5) / 1000},
              {"round_trip_us", Quantiles(round_trip_us)},
              {"reads_per_second", static_cast<double>(list_all_us.size() + list_live_us.size()) / seconds},
              {"list_all_us", Quantiles(list_all_us)},
              {"list_live_us", Quantiles(list_live_us)},
              {"read_errors", errors}};
    }
  };
  std::optional<UnderReads> reads;

  nlohmann::json Json() const {
    std::vector<double> lag(agent_stats.heartbeat_lag_us.begin(), agent_stats.heartbeat_lag_us.end());
    std::vector<double> idle(agent_stats.idle_heartbeat_us.begin(), agent_stats.idle_heartbeat_us.end());
    return {{"agents", agents},
            {"agent_processes", processes},
            {"connect_seconds", connect_s},
            {"tasks_per_second", throughput},
            {"seconds", total_s},
            {"coordinator_cpu_idle_fraction", idle_cpu_fraction},
            {"idle_seconds", idle_window_s},
            {"heartbeat_interval_seconds", heartbeat_interval_s},
            {"coordinator_cpu_busy_fraction", busy_cpu_fraction},
            {"coordinator_rss_mib", rss_mib},
            {"coordinator_peak_rss_mib", peak_rss_mib},
            {"round_trip_p50_ms", Percentile(round_trip_us, 0.5) / 1000},
            {"round_trip_us", Quantiles(round_trip_us)},
            {"placement_us", Quantiles(placement_us)},
            {"heartbeat_lag_us", Quantiles(lag)},
            {"idle_heartbeat_us", Quantiles(idle)},
            {"tasks_done", agent_stats.tasks_done},
            {"heartbeats", agent_stats.heartbeats},
            {"heartbeat_errors", agent_stats.heartbeat_errors},
            {"reregistered", agent_stats.reregistered},
            {"stream_ends", agent_stats.stream_ends},
            {"with_readers", reads ? reads->Json() : nlohmann::json()}};
  }
};

// Clients that list jobs in a loop until stopped, each on its own connection: every
// job (`meridian jobs --limit 0`), then the newest 20 unfinished (the dashboard's view),
// and again.
class ReadLoad {
 public:
  static StatusOr<std::unique_ptr<ReadLoad>> Start(const std::string& address, int readers) {
    std::unique_ptr<ReadLoad> load(new ReadLoad());
    std::vector<std::unique_ptr<client::Client>> clients;
    for (int i = 0; i < readers; ++i) {
      MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<client::Client> c,
                                ConnectClient(ClusterTarget{address, "", "", "", true}, 60'000'000));
      clients.push_back(std::move(c));
    }
    load->start_ = Clock::now();
    for (std::unique_ptr<client::Client>& c : clients) {
      ReadLoad* raw = load.get();
      Reader& r = *load->readers_.emplace_back(std::make_unique<Reader>());
      r.client = std::move(c);
      r.thread = std::thread([raw, &r] { raw->Run(r); });
    }
    return load;
  }
  ~ReadLoad() { Stop(nullptr); }

  // Stops the readers and adds what they measured to `into` (if given).
  void Stop(ScaleFigures::UnderReads* into) {
    stop_.store(true);
    for (std::unique_ptr<Reader>& r : readers_) {
      if (r->thread.joinable()) r->thread.join();
    }
    if (into == nullptr) return;
    into->seconds = std::chrono::duration<double>(Clock::now() - start_).count();
    for (const std::unique_ptr<Reader>& r : readers_) {
      into->list_all_us.insert(into->list_all_us.end(), r->all_us.begin(), r->all_us.end());
      into->list_live_us.insert(into->list_live_us.end(), r->live_us.begin(), r->live_us.end());
      into->errors += r->errors;
    }
  }

 private:
  struct Reader {
    std::unique_ptr<client::Client> client;
    std::thread thread;
    std::vector<double> all_us, live_us;
    int64_t errors = 0;
  };
  ReadLoad() = default;

  void Run(Reader& r) {
    while (!stop_.load(std::memory_order_relaxed)) {
      for (bool live : {false, true}) {
        const Clock::time_point a = Clock::now();
        StatusOr<std::vector<model::JobSummary>> jobs = r.client->ListJobs(live ? 20 : 0, "", live);
        const double us = std::chrono::duration<double, std::micro>(Clock::now() - a).count();
        if (!jobs.ok()) {
          ++r.errors;
          continue;
        }
        (live ? r.live_us : r.all_us).push_back(us);
      }
    }
  }

  std::atomic<bool> stop_{false};
  Clock::time_point start_;
  std::vector<std::unique_ptr<Reader>> readers_;
};

StatusOr<rpc::SimAgentsStats> ReadAgentStats(const fs::path& path) {
  MERIDIAN_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(path));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) return InternalError(fmt::format("{}: not JSON", path.string()));
  rpc::SimAgentsStats s;
  s.agents = j.value("agents", 0);
  s.tasks_done = j.value("tasks_done", int64_t{0});
  s.batches = j.value("batches", int64_t{0});
  s.heartbeats = j.value("heartbeats", int64_t{0});
  s.heartbeat_errors = j.value("heartbeat_errors", int64_t{0});
  s.reregistered = j.value("reregistered", int64_t{0});
  s.stream_ends = j.value("stream_ends", int64_t{0});
  s.idle_heartbeat_us = j.value("idle_heartbeat_us", std::vector<int64_t>{});
  s.heartbeat_lag_us = j.value("heartbeat_lag_us", std::vector<int64_t>{});
  return s;
}

// Waits until `path` exists (a process is ready), the process exits, or the time is up.
Status AwaitFile(const fs::path& path, int pid, double timeout_s, const fs::path& log, const std::string& what) {
  const Clock::time_point end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                    std::chrono::duration<double>(timeout_s));
  while (Clock::now() < end) {
    if (fs::exists(path)) return OkStatus();
    if (ChildExited(pid)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return UnavailableError(fmt::format("{} did not start within {:.0f} s; its log ({}) ends:{}", what, timeout_s,
                                      log.string(), LogTail(log, 5)));
}

// One job of `tasks` no-op tasks, submission to the last result: its seconds.
StatusOr<double> TimeNoopJob(client::Client& c, const std::string& name, int64_t tasks) {
  const Clock::time_point t0 = Clock::now();
  MERIDIAN_ASSIGN_OR_RETURN(model::JobSummary done, RunJob(c, NoopJob(name, tasks), "noop.yaml"));
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  if (done.job.status != model::JobStatus::kSucceeded) {
    return InternalError(fmt::format("the benchmark job {}: {}", model::JobStatusName(done.job.status), done.job.reason));
  }
  return seconds;
}

StatusOr<ScaleFigures> Measure(const BenchScaleOptions& o, int agents) {
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<TempDir> dir, TempDir::Make("meridian-bench-scale"));
  const fs::path root = dir->path();
  const std::string self = SelfExecutable();
  // The nodes the simulated agents are (sim-0, sim-1, ...), as rpc::SimAgents declares them.
  std::ofstream(root / "fleet.yaml") << fmt::format(
      "sites:\n  - {{name: local, kind: dc, provider: onprem, region: local}}\n"
      "nodes:\n  - {{name: sim, site: local, count: {}, cpu: 2, memory: 8GiB}}\n",
      std::max(agents, 2));
  Processes procs;
  const fs::path coord_log = root / "coordinator.log";
  MERIDIAN_ASSIGN_OR_RETURN(
      int coord, SpawnDetached({self, "--log-level", "warn", "coordinator", "--state-dir", (root / "state").string(),
                                "--listen", "127.0.0.1:0", "--fleet", (root / "fleet.yaml").string(), "--addr-file",
                                (root / "addr").string(), "--insecure"},
                               coord_log.string()));
  procs.Add(coord);
  MERIDIAN_RETURN_IF_ERROR(AwaitFile(root / "addr", coord, 30, coord_log, "the coordinator"));
  MERIDIAN_ASSIGN_OR_RETURN(std::string address, ReadSmallFile(root / "addr"));

  ScaleFigures f;
  f.agents = agents;
  f.processes = o.processes > 0 ? o.processes : std::clamp((agents + kAgentsPerProcess - 1) / kAgentsPerProcess, 1, 8);
  f.processes = std::min(f.processes, agents);
  const Clock::time_point connect_start = Clock::now();
  std::vector<int> agent_pids;
  for (int p = 0, first = 0; p < f.processes; ++p) {
    const int count = agents / f.processes + (p < agents % f.processes ? 1 : 0);
    const fs::path log = root / fmt::format("agents-{}.log", p);
    MERIDIAN_ASSIGN_OR_RETURN(
        int pid, SpawnDetached({self, "--log-level", "warn", "bench", "scale-agents", "--coordinator", address,
                                "--first", std::to_string(first), "--count", std::to_string(count), "--ready-file",
                                (root / fmt::format("ready-{}", p)).string(), "--stats-file",
                                (root / fmt::format("stats-{}.json", p)).string()},
                               log.string()));
    procs.Add(pid);
    agent_pids.push_back(pid);
    first += count;
  }
  for (int p = 0; p < f.processes; ++p) {
    MERIDIAN_RETURN_IF_ERROR(AwaitFile(root / fmt::format("ready-{}", p), agent_pids[p], 60 + agents * 0.05,
                                       root / fmt::format("agents-{}.log", p), "a process of simulated agents"));
  }
  f.connect_s = std::chrono::duration<double>(Clock::now() - connect_start).count();
  // The heartbeat interval the coordinator gives this many agents: the idle CPU is
  // measured over one whole interval at least, so every agent heartbeats once in it.
  for (int p = 0; p < f.processes; ++p) {
    MERIDIAN_ASSIGN_OR_RETURN(std::string ready, ReadSmallFile(root / fmt::format("ready-{}", p)));
    std::istringstream in(ready);
    int64_t count = 0, interval_us = 0;
    in >> count >> interval_us;
    f.heartbeat_interval_s = std::max(f.heartbeat_interval_s, static_cast<double>(interval_us) / 1e6);
  }
  f.idle_window_s = std::max(o.idle_seconds, f.heartbeat_interval_s);

  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<client::Client> c,
                            ConnectClient(ClusterTarget{address, "", "", "", true}, 60'000'000));
  const std::string one = NoopJob("round-trip", 1);
  for (int i = 0; i < 20; ++i) {  // warm up: connections, the first scheduling passes
    MERIDIAN_RETURN_IF_ERROR(RunJob(*c, one, "one.yaml").status());
  }
  if (o.readers > 0) {  // finished jobs, for the readers to list
    for (int i = 0; i < o.history; ++i) MERIDIAN_RETURN_IF_ERROR(RunJob(*c, one, "history.yaml").status());
  }

  // Every agent connected and idle: the coordinator's share of one core.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  {
    MERIDIAN_ASSIGN_OR_RETURN(double cpu0, CpuSeconds(coord));
    const Clock::time_point t0 = Clock::now();
    std::this_thread::sleep_for(std::chrono::duration<double>(f.idle_window_s));
    MERIDIAN_ASSIGN_OR_RETURN(double cpu1, CpuSeconds(coord));
    f.idle_cpu_fraction = (cpu1 - cpu0) / std::chrono::duration<double>(Clock::now() - t0).count();
  }

  // Throughput: one job of N no-op tasks, submission to the last result.
  {
    MERIDIAN_ASSIGN_OR_RETURN(double cpu0, CpuSeconds(coord));
    MERIDIAN_ASSIGN_OR_RETURN(f.total_s, TimeNoopJob(*c, "noop", o.tasks));
    MERIDIAN_ASSIGN_OR_RETURN(double cpu1, CpuSeconds(coord));
    f.busy_cpu_fraction = (cpu1 - cpu0) / f.total_s;
    f.throughput = static_cast<double>(o.tasks) / f.total_s;
  }

  // Round trip: one task at a time, submission until the client sees it done; and
  // placement, from the job's submission to its task's assignment.
  for (int i = 0; i < o.latency_samples; ++i) {
    const Clock::time_point a = Clock::now();
    MERIDIAN_ASSIGN_OR_RETURN(model::JobSummary r, RunJob(*c, one, "one.yaml"));
    f.round_trip_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - a).count());
    MERIDIAN_ASSIGN_OR_RETURN(model::JobView v, c->GetJob(r.job.id, true));
    f.placement_us.push_back(static_cast<double>(v.tasks.front().record.started_us - v.summary.job.submitted_us));
  }

  // The same again, with clients listing jobs meanwhile.
  if (o.readers > 0) {
    ScaleFigures::UnderReads& u = f.reads.emplace();
    u.readers = o.readers;
    u.history = o.history;
    MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<ReadLoad> load, ReadLoad::Start(address, o.readers));
    MERIDIAN_ASSIGN_OR_RETURN(u.total_s, TimeNoopJob(*c, "noop-read", o.tasks));
    u.throughput = static_cast<double>(o.tasks) / u.total_s;
    for (int i = 0; i < o.latency_samples; ++i) {
      const Clock::time_point a = Clock::now();
      MERIDIAN_RETURN_IF_ERROR(RunJob(*c, one, "one.yaml").status());
      u.round_trip_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - a).count());
    }
    load->Stop(&u);
  }
  MERIDIAN_ASSIGN_OR_RETURN(ProcessMemory mem, ReadProcessMemory(coord));
  f.rss_mib = static_cast<double>(mem.rss_bytes) / (1 << 20);
  f.peak_rss_mib = static_cast<double>(mem.peak_rss_bytes) / (1 << 20);

  for (int p = 0; p < f.processes; ++p) {
    Processes::End(agent_pids[p], 60);
    MERIDIAN_ASSIGN_OR_RETURN(rpc::SimAgentsStats s, ReadAgentStats(root / fmt::format("stats-{}.json", p)));
    f.agent_stats.Add(s);
  }
  Processes::End(coord, 10);
  return f;
}

void Print(const ScaleFigures& f, std::ostream& out) {
  std::vector<double> lag(f.agent_stats.heartbeat_lag_us.begin(), f.agent_stats.heartbeat_lag_us.end());
  std::vector<double> idle(f.agent_stats.idle_heartbeat_us.begin(), f.agent_stats.idle_heartbeat_us.end());
  out << fmt::format("  {} agents in {} process{}, all connected and registered in {:.1f} s\n", f.agents,
                     f.processes, f.processes == 1 ? "" : "es", f.connect_s);
  out << fmt::format("  throughput        {:>9.0f} tasks/s   ({:.2f} s; coordinator CPU {:.0f}% of a core meanwhile)\n",
                     f.throughput, f.total_s, 100 * f.busy_cpu_fraction);
  out << fmt::format("  coordinator idle  {:>9.1f}% of a core with every agent connected and idle ({:.1f} s; "
                     "agents heartbeat every {:.1f} s)\n",
                     100 * f.idle_cpu_fraction, f.idle_window_s, f.heartbeat_interval_s);
  out << fmt::format("  round trip        p50 {:>6.0f} us   p99 {:>6.0f} us   (submit -> client sees it done)\n",
                     Percentile(f.round_trip_us, 0.5), Percentile(f.round_trip_us, 0.99));
  out << fmt::format("  placement         p50 {:>6.0f} us   p99 {:>6.0f} us   (submitted -> assigned)\n",
                     Percentile(f.placement_us, 0.5), Percentile(f.placement_us, 0.99));
  out << fmt::format("  heartbeat lag     p50 {:>6.0f} us   p99 {:>6.0f} us   (due -> answered; idle call p50 {:.0f} us; "
                     "{} heartbeats, {} failed)\n",
                     Percentile(lag, 0.5), Percentile(lag, 0.99), Percentile(idle, 0.5), f.agent_stats.heartbeats,
                     f.agent_stats.heartbeat_errors);
  out << fmt::format("  coordinator RSS   {:>9.1f} MiB (peak {:.1f} MiB)\n", f.rss_mib, f.peak_rss_mib);
  if (f.reads) {
    const ScaleFigures::UnderReads& u = *f.reads;
    out << fmt::format("  with {} clients listing jobs meanwhile ({} finished jobs held; {:.0f} lists/s, {} failed):\n",
                       u.readers, u.history,
                       static_cast<double>(u.list_all_us.size() + u.list_live_us.size()) / u.seconds, u.errors);
    out << fmt::format("    throughput      {:>9.0f} tasks/s   ({:.2f} s)\n", u.throughput, u.total_s);
    out << fmt::format("    round trip      p50 {:>6.0f} us   p99 {:>6.0f} us\n", Percentile(u.round_trip_us, 0.5),
                       Percentile(u.round_trip_us, 0.99));
    out << fmt::format("    list all jobs   p50 {:>6.0f} us   p99 {:>6.0f} us;  newest 20 unfinished p50 {:.0f} us   "
                       "p99 {:.0f} us\n",
                       Percentile(u.list_all_us, 0.5), Percentile(u.list_all_us, 0.99),
                       Percentile(u.list_live_us, 0.5), Percentile(u.list_live_us, 0.99));
  }
  if (f.agent_stats.reregistered > 0 || f.agent_stats.stream_ends > 0) {
    out << fmt::format("  agents asked to register again: {}; assignment streams that ended: {}\n",
                       f.agent_stats.reregistered, f.agent_stats.stream_ends);
  }
}

sigset_t TerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

}  // namespace

Status RunBenchScale(const BenchScaleOptions& o, std::ostream& out) {
  if (o.agents < 1 || o.agents > 20'000) return InvalidArgumentError("--agents: expected 1 to 20000");
  if (o.tasks < 1 || o.tasks > 10'000'000) return InvalidArgumentError("--tasks: expected 1 to 10000000");
  if (o.processes < 0 || o.processes > 64) return InvalidArgumentError("--processes: expected 0 (automatic) to 64");
  if (o.latency_samples < 1) return InvalidArgumentError("--samples: expected at least 1");
  if (!(o.idle_seconds > 0 && o.idle_seconds <= 600)) return InvalidArgumentError("--idle-seconds: expected (0, 600]");
  if (o.readers < 0 || o.readers > 64) return InvalidArgumentError("--readers: expected 0 (none) to 64");
  if (o.history < 0 || o.history > 100'000) return InvalidArgumentError("--history: expected 0 to 100000");
  constexpr int kBaselineAgents = 2;
  std::optional<ScaleFigures> baseline;
  if (o.agents != kBaselineAgents) {
    MERIDIAN_ASSIGN_OR_RETURN(ScaleFigures b, Measure(o, kBaselineAgents));
    baseline = std::move(b);
  }
  MERIDIAN_ASSIGN_OR_RETURN(ScaleFigures f, Measure(o, o.agents));
  if (o.json) {
    nlohmann::json j = f.Json();
    j["tasks"] = o.tasks;
    j["tls"] = false;
    j["baseline"] = baseline ? baseline->Json() : f.Json();
    j["throughput_ratio_to_baseline"] = f.throughput / (baseline ? baseline->throughput : f.throughput);
    if (f.reads) {
      j["tasks_per_second_with_readers"] = f.reads->throughput;
      j["round_trip_p50_ms_with_readers"] = Percentile(f.reads->round_trip_us, 0.5) / 1000;
    }
    out << j.dump(2) << '\n';
    return OkStatus();
  }
  out << fmt::format(
      "meridian bench scale: {} no-op tasks, a coordinator (plaintext gRPC over loopback, SQLite WAL) and simulated "
      "agents, each its own connection\n",
      o.tasks);
  out << fmt::format("with {} agents:\n", f.agents);
  Print(f, out);
  if (baseline) {
    out << fmt::format("baseline, the same run with {} agents:\n", baseline->agents);
    Print(*baseline, out);
    out << fmt::format("  -> with {} agents: throughput x{:.2f} of the baseline's\n", f.agents,
                       f.throughput / baseline->throughput);
  }
  return OkStatus();
}

Status RunBenchScaleAgents(const BenchScaleAgentsOptions& o) {
  // Blocked here, so in every thread gRPC starts: only sigwait below takes them.
  const sigset_t signals = TerminationSignals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  rpc::SimAgentsOptions options;
  options.coordinator = o.coordinator;
  options.first = o.first;
  options.count = o.count;
  StatusOr<std::unique_ptr<rpc::SimAgents>> sim = rpc::SimAgents::Start(options);
  if (!sim.ok()) return sim.status();
  MERIDIAN_RETURN_IF_ERROR(
      WriteFileAtomically(o.ready_file, fmt::format("{} {}\n", o.count, (*sim)->heartbeat_interval_us())));
  int sig = 0;
  sigwait(&signals, &sig);
  rpc::SimAgentsStats s = (*sim)->Stop();
  nlohmann::json j = {{"agents", s.agents},
                      {"tasks_done", s.tasks_done},
                      {"batches", s.batches},
                      {"heartbeats", s.heartbeats},
                      {"heartbeat_errors", s.heartbeat_errors},
                      {"reregistered", s.reregistered},
                      {"stream_ends", s.stream_ends},
                      {"idle_heartbeat_us", s.idle_heartbeat_us},
                      {"heartbeat_lag_us", s.heartbeat_lag_us}};
  return WriteFileAtomically(o.stats_file, j.dump());
}

}  // namespace meridian::cli
