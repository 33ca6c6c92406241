// Job files (YAML) -> model::Job, validated against the fleet it will run on (site
// names, regions, accelerator types, throughput kinds). Map tasks are expanded into
// one task per shard ("hist/0", "hist/1", ...); `replicas: N` expands into N tasks in
// one gang. The format is documented in docs/job-spec.md. Any error names the file,
// line, column and field; on error nothing is returned.
//
// Thread-safety: pure functions.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "model/fleet.h"
#include "model/throughput.h"
#include "model/work.h"

namespace meridian::spec {

// Finds a dataset a job names but does not declare (a cluster's registry): its shards
// as objects (ObjectRef::object_id set) with the sites holding them; nullopt if none.
using DatasetResolver = std::function<std::optional<model::Dataset>(const std::string& name)>;
// Finds an object a job reads by id (`object://ID`, an object put in the cluster): its
// size and the sites holding it (ObjectRef::object_id set); nullopt if none.
using ObjectResolver = std::function<std::optional<model::ObjectRef>(const std::string& id)>;

// `max_tasks` (when positive) bounds the job's tasks below the limit of every job:
// a job that would expand past it is OutOfRange, found before its tasks are made.
StatusOr<model::Job> ParseJob(std::string_view text, std::string_view file,
                              const model::Fleet& fleet, const model::ThroughputTable& throughput,
                              const DatasetResolver& resolver = {}, int64_t max_tasks = 0,
                              const ObjectResolver& objects = {});
StatusOr<model::Job> LoadJob(const std::string& path, const model::Fleet& fleet,
                             const model::ThroughputTable& throughput);

}  // namespace meridian::spec
