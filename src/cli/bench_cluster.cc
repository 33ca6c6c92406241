#include "cli/bench_cluster.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/commands.h"

namespace meridian::cli {
namespace fs = std::filesystem;

StatusOr<std::unique_ptr<BenchCluster>> BenchCluster::Start(const std::string& fleet_yaml, bool real_gpus) {
  char tmpl[] = "/tmp/meridian-bench-XXXXXX";  // mkdtemp replaces the Xs with a unique name
  if (mkdtemp(tmpl) == nullptr) return UnavailableError("cannot create a temporary directory");
  std::unique_ptr<BenchCluster> c(new BenchCluster());
  c->dir_ = tmpl;
  const fs::path fleet = fs::path(c->dir_) / "fleet.yaml";
  std::ofstream(fleet) << fleet_yaml;
  UpOptions up{fleet.string(), c->dir_ + "/cluster", "2s", 64, true};
  up.real_gpus = real_gpus;
  std::ostringstream up_log;
  MERIDIAN_RETURN_IF_ERROR(RunUp(up, up_log));
  MERIDIAN_ASSIGN_OR_RETURN(c->address_, ResolveCoordinator(ClusterTarget{"", c->dir_ + "/cluster"}));
  return c;
}

BenchCluster::~BenchCluster() {
  std::ostringstream ignored;
  RunDown(DownOptions{dir_ + "/cluster"}, ignored).IgnoreError();
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

}  // namespace meridian::cli
