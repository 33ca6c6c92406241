// What Slurm gave a job on one of its nodes, read from `scontrol show job -d JOBID`,
// and the Meridian node an agent started inside that job registers: its CPUs and
// memory are the job's share of the machine, its devices the job's GPUs (GRES), its
// site the job's partition unless told otherwise (docs/deploy.md, "Under Slurm").
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "spec/fleet_spec.h"

namespace meridian::spec {

struct SlurmGres {
  std::string name;  // "gpu"
  std::string type;  // "a100"; empty when the request named none
  int32_t count = 0;
};

struct SlurmAllocation {
  std::string job_id;
  std::string partition;
  std::string node;
  int32_t cpus = 0;
  int64_t memory_bytes = 0;
  std::vector<SlurmGres> gres;
};

// The most output of scontrol read, and of hosts one hostlist may name.
inline constexpr size_t kMaxSlurmJobText = 1 << 20;
inline constexpr size_t kMaxSlurmHosts = 65536;

// This node's share of the job from `scontrol show job -d` (one line or several):
// the "Nodes=LIST CPU_IDs=.. Mem=.. GRES=.." group whose hostlist names `node`.
StatusOr<SlurmAllocation> ParseSlurmJob(std::string_view text, std::string_view node);

// "gpu[01-03,7],login" -> gpu01 gpu02 gpu03 gpu7 login. At most `max_hosts`.
StatusOr<std::vector<std::string>> ExpandHostlist(std::string_view list, size_t max_hosts = kMaxSlurmHosts);

struct SlurmNodeOptions {
  std::string site;  // empty: the partition's name
  // GRES type -> Meridian accelerator type ("a100-80g" -> "A100"); types not listed
  // are taken as they are when Meridian knows them ("a100" -> "A100").
  std::map<std::string, std::string> gpu_types;
  // The type of GPUs requested with no type ("gpu:2"); empty: none declared, the
  // agent takes what CUDA finds.
  std::string untyped_gpu;
};

// The node an agent in this allocation registers. `note` says what was left out.
StatusOr<NodeConfig> NodeFromSlurm(const SlurmAllocation& allocation, const SlurmNodeOptions& options,
                                   std::string* note);

// "a100=A100,t4=T4" -> map, for --gpu-types.
StatusOr<std::map<std::string, std::string>> ParseGpuTypeMap(std::string_view text);

}  // namespace meridian::spec
