#include "cli/bench_cluster.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/commands.h"

namespace meridian::cli {
namespace fs = std::filesystem;

StatusOr<std::unique_ptr<BenchCluster>> BenchCluster::Start(const std::string& fleet_yaml, bool real_gpus) {
  std::unique_ptr<BenchCluster> c(new BenchCluster());
  MERIDIAN_ASSIGN_OR_RETURN(c->dir_, TempDir::Make("meridian-bench"));
  const fs::path fleet = fs::path(c->dir_->path()) / "fleet.yaml";
  std::ofstream(fleet) << fleet_yaml;
  UpOptions up;
  up.fleet = fleet.string();
  up.dir = c->dir_->path() + "/cluster";
  up.quiet = true;
  up.real_gpus = real_gpus;
  std::ostringstream up_log;
  MERIDIAN_RETURN_IF_ERROR(RunUp(up, up_log));
  MERIDIAN_ASSIGN_OR_RETURN(c->address_, ResolveCoordinator(ClusterTarget{"", c->dir_->path() + "/cluster"}));
  return c;
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
