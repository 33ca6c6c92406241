// meridian bench retention: the memory a coordinator needs to hold a finished job of
// many tasks, the memory a client needs to read all of it back (`job get --json`),
// and the time to delete it, on a local cluster of real processes it starts itself.
// The baseline is the same coordinator measured idle, before the job, in this run.

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/bench_cluster.h"
#include "cli/commands.h"
#include "client/client.h"
#include "common/subprocess.h"

namespace meridian::cli {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
double Mib(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

// Tasks in the file `job get --json` wrote: each starts a line "    {".
StatusOr<int64_t> CountTasksInJson(const std::string& path, int64_t* bytes) {
  std::ifstream in(path);
  if (!in) return UnavailableError(fmt::format("cannot read {}", path));
  int64_t tasks = 0;
  *bytes = 0;
  std::string line;
  while (std::getline(in, line)) {
    *bytes += static_cast<int64_t>(line.size()) + 1;
    if (line == "    {") ++tasks;
  }
  return tasks;
}

}  // namespace

Status RunBenchRetention(const BenchRetentionOptions& o, std::ostream& out) {
  if (o.agents < 1 || o.agents > 16) return InvalidArgumentError("--agents: expected 1 to 16");
  if (o.tasks < 1 || o.tasks > 10'000'000) return InvalidArgumentError("--tasks: expected 1 to 10000000");
  const std::string fleet = OneSiteFleet(o.agents);
  const std::string spec = NoopJob(fmt::format("retention-{}", o.tasks), o.tasks);
  const std::string one = NoopJob("warm-up", 1);
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<BenchCluster> cluster, BenchCluster::Start(fleet, false));
  const int pid = cluster->coordinator_pid();
  if (pid <= 0) return InternalError("cannot read the bench cluster's coordinator pid");
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<client::Client> connected, cluster->Connect(600'000'000));
  client::Client& c = *connected;
  auto done = [](const model::JobSummary&) { return true; };

  // Baseline: the coordinator with its agents registered and one small job behind it.
  MERIDIAN_ASSIGN_OR_RETURN(rpc::SubmitResult warm, c.Submit(one, "warm-up.yaml"));
  MERIDIAN_RETURN_IF_ERROR(c.Watch(warm.job_id, done).status());
  MERIDIAN_ASSIGN_OR_RETURN(ProcessMemory idle, ReadProcessMemory(pid));

  const Clock::time_point t0 = Clock::now();
  MERIDIAN_ASSIGN_OR_RETURN(rpc::SubmitResult job, c.Submit(spec, "retention.yaml"));
  MERIDIAN_ASSIGN_OR_RETURN(model::JobSummary end, c.Watch(job.job_id, done));
  const double run_s = Seconds(Clock::now() - t0);
  if (end.job.status != model::JobStatus::kSucceeded || end.succeeded != o.tasks) {
    return InternalError(fmt::format("the benchmark job {} with {} of {} tasks: {}", model::JobStatusName(end.job.status),
                                     end.succeeded, o.tasks, end.job.reason));
  }
  // The job is finished once its last result is committed; it is compacted in the
  // same call. A moment for the heartbeat that carried it to return.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  MERIDIAN_ASSIGN_OR_RETURN(ProcessMemory held, ReadProcessMemory(pid));

  // A client reading every task back, as a user's `job get --json` does.
  const std::string json_path = cluster->scratch_dir() + "/job.json";
  const Clock::time_point t1 = Clock::now();
  MERIDIAN_ASSIGN_OR_RETURN(ChildUsage get,
                            RunAndMeasure({SelfExecutable(), "job", "get", std::to_string(job.job_id), "--json",
                                           "--coordinator", cluster->address()},
                                          json_path));
  const double get_s = Seconds(Clock::now() - t1);
  if (get.exit_code != 0) return InternalError(fmt::format("job get --json exited {}; see {}", get.exit_code, json_path));
  int64_t json_bytes = 0;
  MERIDIAN_ASSIGN_OR_RETURN(int64_t listed, CountTasksInJson(json_path, &json_bytes));
  if (listed != o.tasks) {
    return InternalError(fmt::format("job get --json listed {} tasks of {}", listed, o.tasks));
  }
  std::error_code ec;
  std::filesystem::remove(json_path, ec);
  MERIDIAN_ASSIGN_OR_RETURN(ProcessMemory after_get, ReadProcessMemory(pid));

  const Clock::time_point t2 = Clock::now();
  MERIDIAN_RETURN_IF_ERROR(c.Delete(job.job_id).status());
  const double delete_s = Seconds(Clock::now() - t2);
  MERIDIAN_ASSIGN_OR_RETURN(ProcessMemory after_delete, ReadProcessMemory(pid));
  if (c.GetJob(job.job_id, false).status().code() != StatusCode::kNotFound) {
    return InternalError(fmt::format("job {} is still there after deleting it", job.job_id));
  }

  const double per_task = static_cast<double>(held.rss_bytes - idle.rss_bytes) / static_cast<double>(o.tasks);
  nlohmann::json j = {
      {"benchmark", "retention"},
      {"agents", o.agents},
      {"tasks", o.tasks},
      {"run_seconds", run_s},
      {"tasks_per_second", static_cast<double>(o.tasks) / run_s},
      {"coordinator_rss_mib", Mib(held.rss_bytes)},
      {"coordinator_peak_rss_mib", Mib(held.peak_rss_bytes)},
      {"coordinator_rss_after_job_get_mib", Mib(after_get.rss_bytes)},
      {"coordinator_rss_after_delete_mib", Mib(after_delete.rss_bytes)},
      {"bytes_per_finished_task", per_task},
      {"job_get_json_peak_rss_mib", Mib(get.peak_rss_bytes)},
      {"job_get_json_seconds", get_s},
      {"job_get_json_bytes", json_bytes},
      {"delete_seconds", delete_s},
      {"bar_coordinator_rss_mib", 300},
      {"baseline", {{"name", "the same coordinator, idle before the job"}, {"coordinator_rss_mib", Mib(idle.rss_bytes)}}}};
  if (o.json) {
    out << j.dump(2) << '\n';
    return OkStatus();
  }
  out << fmt::format("meridian bench retention: one job of {} no-op tasks on {} agents (local cluster, SQLite WAL)\n",
                     o.tasks, o.agents);
  out << fmt::format("  ran in             {:>9.2f} s     ({:.0f} tasks/s)\n", run_s, static_cast<double>(o.tasks) / run_s);
  out << fmt::format("  coordinator RSS    {:>9.1f} MiB   holding the finished job ({:.0f} bytes a task over idle; "
                     "bar: under 300 MiB)\n",
                     Mib(held.rss_bytes), per_task);
  out << fmt::format("                     {:>9.1f} MiB   at most while it ran (VmHWM)\n", Mib(held.peak_rss_bytes));
  out << fmt::format("                     {:>9.1f} MiB   after `job get --json` read it all\n", Mib(after_get.rss_bytes));
  out << fmt::format("                     {:>9.1f} MiB   after `job delete`\n", Mib(after_delete.rss_bytes));
  out << fmt::format("  job get --json     {:>9.1f} MiB   client peak RSS, {:.2f} s, {:.0f} MiB of JSON\n",
                     Mib(get.peak_rss_bytes), get_s, Mib(json_bytes));
  out << fmt::format("  job delete         {:>9.2f} s\n", delete_s);
  out << fmt::format("  baseline: the same coordinator idle before the job: {:.1f} MiB\n", Mib(idle.rss_bytes));
  return OkStatus();
}

}  // namespace meridian::cli
