// A throwaway local cluster for the benchmarks that measure a running Meridian
// (bench tasks, bench gemm): a temporary directory, a fleet file in it, `meridian up`,
// and `down` plus removal however the benchmark ends.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "common/status.h"
#include "common/temp_dir.h"
#include "model/run_state.h"
#include "rpc/api.h"

namespace meridian::client {
class Client;
}

namespace meridian::cli {

// The value at quantile `p` (0..1) of `v`, nearest rank; 0 for none.
double Percentile(std::vector<double> v, double p);

// A fleet of `agents` nodes at one site, each with this machine's cores.
std::string OneSiteFleet(int agents);
// A job named `name` of `tasks` no-op tasks of 10 milli-cores each (a 2-core node
// takes 200 at once).
std::string NoopJob(const std::string& name, int64_t tasks);
// Submits a job and follows it to its end in one call (SubmitAndWatch); `accepted`,
// when given, is called once the job is stored.
StatusOr<model::JobSummary> RunJob(client::Client& c, const std::string& spec, const std::string& name,
                                   const std::function<void(const rpc::SubmitResult&)>& accepted = nullptr);

class BenchCluster {
 public:
  // Starts a cluster of `fleet_yaml` (the fleet file's text) under a new directory in
  // /tmp; with real_gpus the agents use this machine's CUDA GPUs; with insecure, no TLS
  // and no tokens.
  static StatusOr<std::unique_ptr<BenchCluster>> Start(const std::string& fleet_yaml, bool real_gpus,
                                                       bool insecure = false);
  ~BenchCluster();

  const std::string& address() const { return address_; }
  // A client of the cluster, with its admin's credentials.
  StatusOr<std::unique_ptr<client::Client>> Connect(int64_t timeout_us) const;
  // The coordinator process's pid (0 if its pid file cannot be read).
  int coordinator_pid() const;
  // How the CLI's commands reach this cluster (its directory).
  ClusterTarget target() const;
  // A scratch directory removed with the cluster.
  std::string scratch_dir() const { return dir_->path(); }

 private:
  std::unique_ptr<TempDir> dir_;  // removed after the destructor's `down`
  std::string address_;
};

}  // namespace meridian::cli
