// Work: jobs, their tasks, what each task asks for, and the data it reads.
// Plain value types built and validated by src/spec/.
//
// Thread-safety: value types.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/ids.h"
#include "model/fleet.h"

namespace meridian::model {

enum class Objective { kFastest, kCheapest, kBalanced };

// What a gang does when one of its members fails or is lost while the others run:
// run the whole gang again (its members start together once more), or fail the job.
// What a gang does when a member stops (docs/training.md): runs again whole, fails
// its job, or (elastic) goes on while only that member is placed again.
enum class GangFailure { kRestart, kFail, kElastic };

// The most members a gang may have (each member's assignment lists them all).
inline constexpr size_t kMaxGangMembers = 4096;
std::string_view ObjectiveName(Objective objective);
std::optional<Objective> ParseObjective(std::string_view name);

// What one task needs from one node.
// Whether a task may run on spot (preemptible) nodes: never or only (filters), or
// rather on them or rather not (preferences: a task takes the other kind when no
// node of the kind it prefers has room now, rather than wait).
enum class SpotRule { kAny, kNever, kOnly, kPrefer, kAvoid };

struct ResourceRequest {
  // Acceptable accelerator types (canonical names). Empty with device_count > 0
  // means any accelerator type.
  std::vector<std::string> accelerator_any_of;
  // Devices wanted on one node; 0 runs on CPU cores only.
  int32_t device_count = 0;
  // Share of each device, in milli-devices: 1000 is a whole device, 250 a quarter.
  int32_t device_share_milli = 1000;
  // Capability: each device must have at least this much memory.
  int64_t min_device_memory_bytes = 0;
  int64_t cpu_milli = 1000;
  int64_t memory_bytes = 0;
  // Only nodes whose labels hold every one of these (key: value); empty: any node.
  std::map<std::string, std::string> node_labels;
  SpotRule spot = SpotRule::kAny;

  friend bool operator==(const ResourceRequest&, const ResourceRequest&) = default;
};

// A reference to an immutable object and where its replicas are.
struct ObjectRef {
  std::string name;
  int64_t size_bytes = 0;
  std::vector<SiteId> locations;
  // Where this data may be processed: site names, regions or region prefixes
  // ("eu" matches "eu-west-1"). Empty: anywhere.
  std::vector<std::string> residency;
  // The object in a cluster's store (32 hex digits); empty for one a spec only
  // declares (for planning and simulation).
  std::string object_id = {};
};

// A dataset is a list of shards, each an object.
struct Dataset {
  std::string name;
  std::vector<ObjectRef> shards;
};

// How much work a task is, in the unit of its kind in the throughput table.
struct WorkAmount {
  std::string kind;   // "resnet-50-b64", "gemm-fp16"
  double amount = 0;  // 500 (steps), 2e3 (TFLOP)
};

struct Task {
  TaskId id;                         // index in Job::tasks
  std::string name;                  // unique in its job
  std::string kernel;                // a built-in kernel, or
  std::vector<std::string> command;  // argv of a command
  std::optional<WorkAmount> work;    // time = amount / throughput(type, kind)
  int64_t duration_us = 0;           // else a device-independent estimate
  ResourceRequest resources;
  std::vector<ObjectRef> inputs;
  std::vector<TaskId> after;         // dependencies; their outputs are inputs too
  int64_t output_bytes = 0;          // estimated size of what it writes
  // Where its output may be processed (the residency of ObjectRef): what is
  // derived from data bound to places stays bound to them. The rules of its inputs
  // and its dependencies' outputs: one list when they agree, else the names of the
  // fleet's sites that satisfy every one. Empty: anywhere (or the job says
  // `output_residency: anywhere`).
  std::vector<std::string> output_residency;
  int32_t retries = 0;
  int64_t timeout_us = 0;            // 0: none
  int64_t stop_grace_us = 0;         // a command stopped: SIGTERM, SIGKILL this long after (0: at once)
  std::string gang;                  // tasks of one gang are placed all-or-nothing
  int32_t gang_id = -1;              // index in Job::gangs; -1: in no gang
  uint32_t gang_rank = 0;            // its rank (RANK) in the gang: members in task order
  // Parameters for the kernel (or MERIDIAN_ARG_* for a command), as written.
  std::map<std::string, std::string> args;
  // Environment variables a command runs with, as written (names checked by the
  // parser: not Meridian's own, HOME or CUDA_VISIBLE_DEVICES).
  std::map<std::string, std::string> env;
  uint32_t index = 0;                // copy number within its template (map, count, replicas)
  // A dataset its outputs become when the job succeeds: each copy's output one shard,
  // in copy order (a cluster's name, never used before). Empty: none.
  std::string output_dataset;
};

// Tasks that run together: placed all-or-nothing, started in one pass, and told of
// each other (ranks, world size, the rank-0 address) as distributed frameworks expect.
struct Gang {
  std::string name;
  std::vector<TaskId> members;  // in rank order (task order)
};

struct Job {
  JobId id;
  std::string name;
  std::string tenant = "default";
  int32_t priority = 0;              // higher runs first under the priority order
  Objective objective = Objective::kFastest;
  std::optional<int64_t> deadline_us;       // relative to submission
  std::optional<int64_t> budget_micro_usd;  // for the whole job
  std::vector<std::string> allowed_regions; // site names, regions or prefixes; empty: any
  // Where a task may run as well once it has waited `fallback_after_us` in the queue
  // (since it last joined it) without a node of allowed_regions taking it: the spec's
  // `fallback` (regions, after). Empty: nowhere else.
  std::vector<std::string> fallback_regions;
  int64_t fallback_after_us = 0;
  // The bounds of fallback_after_us (a job's `fallback.after`, a service's
  // `fallback_after`): 1 s to 7 days.
  static constexpr int64_t kMinFallbackAfterUs = 1'000'000;
  static constexpr int64_t kMaxFallbackAfterUs = int64_t{7} * 24 * 3600 * 1'000'000;
  // false: outputs are free of their inputs' residency (`output_residency: anywhere`).
  bool outputs_inherit_residency = true;
  std::vector<Dataset> datasets;
  std::vector<Task> tasks;
  std::vector<Gang> gangs;  // the gangs its tasks name (Task::gang_id), by first member
  GangFailure gang_failure = GangFailure::kRestart;
  // What the spec says that will not do what its author likely meant, located
  // ("job.yaml:4:5: tasks[0]: ..."): shown by plan, submit and run, never an error.
  std::vector<std::string> warnings;

  const Task* FindTask(std::string_view name) const;
};

// `job` with its fallback regions allowed as well as its own (the job a task that has
// waited its fallback's `after` is placed as).
Job WithFallbackRegions(const Job& job);

// Whether `site` satisfies a region rule: its name, its region, or a prefix of its
// region up to a '-' ("eu" matches "eu-west-1").
bool SiteMatchesRegionRule(const Site& site, std::string_view rule);
// Whether it satisfies at least one of `rules` (none: false).
bool SiteMatchesAnyRegionRule(const Site& site, const std::vector<std::string>& rules);

}  // namespace meridian::model
