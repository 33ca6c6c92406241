#include "cli/bench_cluster.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "cli/commands.h"
#include "client/client.h"

namespace meridian::cli {
namespace fs = std::filesystem;

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

std::string OneSiteFleet(int agents) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  return "sites:\n  - {name: local, kind: dc, provider: onprem, region: local}\n" +
         fmt::format("nodes:\n  - {{name: bench, site: local, count: {}, cpu: {}, memory: 8GiB}}\n", agents, cores);
}

std::string NoopJob(const std::string& name, int64_t tasks) {
  return fmt::format("name: {}\ntasks:\n  - {{name: noop, kernel: noop, count: {}, resources: {{cpu: 10m}}}}\n", name,
                     tasks);
}

StatusOr<model::JobSummary> RunJob(client::Client& c, const std::string& spec, const std::string& name,
                                   const std::function<void(const rpc::SubmitResult&)>& accepted) {
  return c.SubmitAndWatch(spec, name, accepted, [](const model::JobSummary&) { return true; });
}

StatusOr<std::unique_ptr<BenchCluster>> BenchCluster::Start(const std::string& fleet_yaml, bool real_gpus,
                                                            bool insecure) {
  std::unique_ptr<BenchCluster> c(new BenchCluster());
  MERIDIAN_ASSIGN_OR_RETURN(c->dir_, TempDir::Make("meridian-bench"));
  const fs::path fleet = fs::path(c->dir_->path()) / "fleet.yaml";
  std::ofstream(fleet) << fleet_yaml;
  UpOptions up;
  up.fleet = fleet.string();
  up.dir = c->dir_->path() + "/cluster";
  up.quiet = true;
  up.real_gpus = real_gpus;
  up.insecure = insecure;
  up.gateways = "none";  // benchmarks of tasks: no service to route
  std::ostringstream up_log;
  MERIDIAN_RETURN_IF_ERROR(RunUp(up, up_log));
  MERIDIAN_ASSIGN_OR_RETURN(c->address_, ResolveCoordinator(c->target()));
  return c;
}

ClusterTarget BenchCluster::target() const { return ClusterTarget{"", dir_->path() + "/cluster"}; }

StatusOr<std::unique_ptr<client::Client>> BenchCluster::Connect(int64_t timeout_us) const {
  return ConnectClient(target(), timeout_us);
}

int BenchCluster::coordinator_pid() const {
  std::ifstream in(fs::path(dir_->path()) / "cluster" / "pids" / "coordinator.pid");
  int pid = 0;
  in >> pid;
  return pid;
}

BenchCluster::~BenchCluster() {
  if (!dir_) return;
  std::ostringstream ignored;
  RunDown(DownOptions{dir_->path() + "/cluster"}, ignored).IgnoreError();
}

}  // namespace meridian::cli
