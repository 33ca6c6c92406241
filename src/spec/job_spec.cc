#include "spec/job_spec.h"

#include <algorithm>
#include <array>
#include <map>
#include <set>

#include <fmt/format.h>

#include "common/units.h"
#include "model/accelerators.h"
#include "spec/resource_spec.h"
#include "spec/stream_spec.h"
#include "spec/yaml_reader.h"

namespace meridian::spec {
namespace {

using model::Job;
using model::Task;

constexpr int64_t kMaxTasks = 1'000'000;
// A task's resources.qubits: as many as the OpenQASM reader takes (kernels/qasm.h).
constexpr int64_t kMaxSimulatedQubits = 40;
constexpr std::string_view kDatasetScheme = "dataset://";
constexpr std::string_view kObjectScheme = "object://";
// A command's `env`: at most this many variables, each value at most this long.
constexpr size_t kMaxEnvVars = 64;
constexpr size_t kMaxEnvValueBytes = 4096;
constexpr int64_t kMaxStopGraceUs = int64_t{300} * 1'000'000;  // 5 minutes
// What a gang member's command is told of its gang (docs/runtime.md): a spec may not
// set these for one.
constexpr std::array<std::string_view, 8> kGangVariables = {"RANK",       "WORLD_SIZE",  "LOCAL_RANK",
                                                            "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK",
                                                            "MASTER_ADDR", "MASTER_PORT"};

// A task as written, before map/replica expansion.
struct TaskTemplate {
  YAML::Node node;
  std::string path;
  Task task;
  std::vector<std::string> after;
  std::vector<std::string> dataset_inputs;
  std::string map_over;
  std::string reduce_of;
  int64_t fan_in = 0;  // reduce in a tree of this fan-in; 0: one task over everything
  int64_t replicas = 1;
  int64_t count = 1;
  std::vector<TaskId> expanded;  // ids after expansion
};

class JobParser {
 public:
  JobParser(const Reader& r, const model::Fleet& fleet, const model::ThroughputTable& throughput,
            const DatasetResolver& resolver, int64_t max_tasks, const ObjectResolver& objects)
      : r_(r), fleet_(fleet), throughput_(throughput), resolver_(resolver), objects_(objects), max_tasks_(max_tasks) {}

  StatusOr<Job> Parse(const YAML::Node& root);

 private:
  Status ParseHeader(const YAML::Node& root);
  Status ParseRegionRules(const YAML::Node& at, const std::string& path,
                          const std::vector<std::string>& rules) const;
  // The job's `fallback`: regions its tasks may run in once they have waited.
  Status ParseFallback(const YAML::Node& root);
  Status ParseObject(const YAML::Node& o, const std::string& path, model::ObjectRef* obj) const;
  Status ParseDatasets(const YAML::Node& root);
  Status ParseWork(const YAML::Node& t, const std::string& path, Task* task) const;
  Status ParseInputs(const YAML::Node& t, const std::string& path, TaskTemplate* tmpl) const;
  // A command's `env` (after its kernel or command is known).
  Status ParseEnv(const YAML::Node& t, const std::string& path, Task& task) const;
  Status ParseTask(const YAML::Node& t, const std::string& path, TaskTemplate* tmpl) const;
  Status Expand();
  Status Link();
  Status CheckAcyclic() const;
  // Job::gangs and each member's gang id and rank; a gang's bounds, and no member
  // depending on another of its gang (they start together).
  Status BuildGangs();
  // The template a task was made from (its name before any '/').
  const TaskTemplate& TemplateOf(const Task& task) const;
  // Task::output_residency of every task, from its inputs and dependencies.
  void DeriveOutputResidency();
  // Adds the inner levels of a reduce tree over `level`; returns the last level.
  std::vector<TaskId> ReduceTree(const TaskTemplate& tmpl, std::vector<TaskId> level);
  // Whether `name` is a dataset: declared in the spec, or found by the resolver (and
  // then added to the job).
  bool KnowDataset(const std::string& name) const;

  const Reader& r_;
  const model::Fleet& fleet_;
  const model::ThroughputTable& throughput_;
  const DatasetResolver& resolver_;
  const ObjectResolver& objects_;
  const int64_t max_tasks_;  // 0: kMaxTasks only
  // Mutable: datasets the resolver finds join them while tasks are parsed.
  mutable Job job_;
  mutable std::map<std::string, size_t> dataset_index_;
  std::vector<TaskTemplate> templates_;
  std::map<std::string, size_t> template_index_;
};

bool JobParser::KnowDataset(const std::string& name) const {
  if (dataset_index_.count(name)) return true;
  if (!resolver_) return false;
  std::optional<model::Dataset> found = resolver_(name);
  if (!found) return false;
  found->name = name;
  dataset_index_[name] = job_.datasets.size();
  job_.datasets.push_back(std::move(*found));
  return true;
}

Status JobParser::ParseRegionRules(const YAML::Node& at, const std::string& path,
                                   const std::vector<std::string>& rules) const {
  for (const std::string& rule : rules) {
    bool any = false;
    for (const model::Site& s : fleet_.sites) any |= model::SiteMatchesRegionRule(s, rule);
    if (!any) {
      return r_.Error(at, path, fmt::format("'{}' matches no site, region or region prefix of the fleet", rule));
    }
  }
  return OkStatus();
}

Status JobParser::ParseHeader(const YAML::Node& root) {
  MERIDIAN_RETURN_IF_ERROR(r_.RequiredString(root, "name", "", &job_.name));
  MERIDIAN_RETURN_IF_ERROR(r_.String(root, "tenant", "", &job_.tenant));
  if (!fleet_.tenants.empty() && job_.tenant != "default" && !fleet_.FindTenant(job_.tenant)) {
    return r_.Error(root["tenant"], "tenant", fmt::format("unknown tenant '{}'", job_.tenant));
  }
  int64_t priority = 0;
  MERIDIAN_RETURN_IF_ERROR(r_.Int(root, "priority", "", -1000, 1000, &priority));
  job_.priority = static_cast<int32_t>(priority);
  MERIDIAN_RETURN_IF_ERROR(r_.Enum(root, "objective", "",
                                   {{"fastest", model::Objective::kFastest},
                                    {"cheapest", model::Objective::kCheapest},
                                    {"balanced", model::Objective::kBalanced}},
                                   &job_.objective));
  if (root["deadline"]) {
    int64_t d = 0;
    MERIDIAN_RETURN_IF_ERROR(r_.Unit(root, "deadline", "", ParseDurationUs, &d));
    if (d <= 0) return r_.Error(root["deadline"], "deadline", "must be positive");
    job_.deadline_us = d;
  }
  if (root["budget"]) {
    int64_t b = 0;
    MERIDIAN_RETURN_IF_ERROR(r_.Unit(root, "budget", "", ParseMicroUsd, &b));
    job_.budget_micro_usd = b;
  }
  MERIDIAN_RETURN_IF_ERROR(r_.StringList(root, "regions", "", &job_.allowed_regions));
  MERIDIAN_RETURN_IF_ERROR(r_.Enum(root, "output_residency", "", {{"inherit", true}, {"anywhere", false}},
                                   &job_.outputs_inherit_residency));
  MERIDIAN_RETURN_IF_ERROR(r_.Enum(root, "gang_failure", "",
                                   {{"restart", model::GangFailure::kRestart},
                                    {"fail", model::GangFailure::kFail},
                                    {"elastic", model::GangFailure::kElastic}},
                                   &job_.gang_failure));
  MERIDIAN_RETURN_IF_ERROR(ParseRegionRules(root["regions"], "regions", job_.allowed_regions));
  return ParseFallback(root);
}

Status JobParser::ParseFallback(const YAML::Node& root) {
  const YAML::Node f = root["fallback"];
  if (!f) return OkStatus();
  MERIDIAN_RETURN_IF_ERROR(r_.CheckMap(f, "fallback", {"regions", "after"}));
  if (job_.allowed_regions.empty()) {
    return r_.Error(f, "fallback", "needs the job's 'regions': without them its tasks may run anywhere already");
  }
  if (!f["regions"]) return r_.Error(f, "fallback", "missing required field 'regions' (where its tasks may run then)");
  if (!f["after"]) return r_.Error(f, "fallback", "missing required field 'after' (how long a task waits first)");
  MERIDIAN_RETURN_IF_ERROR(r_.StringList(f, "regions", "fallback", &job_.fallback_regions));
  if (job_.fallback_regions.empty()) return r_.Error(f["regions"], "fallback.regions", "must name at least one region");
  MERIDIAN_RETURN_IF_ERROR(ParseRegionRules(f["regions"], "fallback.regions", job_.fallback_regions));
  MERIDIAN_RETURN_IF_ERROR(r_.Unit(f, "after", "fallback", ParseDurationUs, &job_.fallback_after_us));
  if (job_.fallback_after_us < Job::kMinFallbackAfterUs || job_.fallback_after_us > Job::kMaxFallbackAfterUs) {
    return r_.Error(f["after"], "fallback.after", "must be from 1s to 7d");
  }
  return OkStatus();
}

Status JobParser::ParseObject(const YAML::Node& o, const std::string& path,
                              model::ObjectRef* obj) const {
  MERIDIAN_RETURN_IF_ERROR(r_.CheckMap(o, path, {"name", "size", "at", "residency"}));
  MERIDIAN_RETURN_IF_ERROR(r_.String(o, "name", path, &obj->name));
  if (!o["size"]) return r_.Error(o, path, "missing required field 'size'");
  MERIDIAN_RETURN_IF_ERROR(r_.Unit(o, "size", path, ParseBytes, &obj->size_bytes));
  std::vector<std::string> at;
  MERIDIAN_RETURN_IF_ERROR(r_.StringList(o, "at", path, &at));
  if (at.empty()) return r_.Error(o, path, "missing required field 'at' (the sites holding a replica)");
  for (const std::string& s : at) {
    auto id = fleet_.FindSite(s);
    if (!id) return r_.Error(o["at"], Field(path, "at"), fmt::format("unknown site '{}'", s));
    obj->locations.push_back(*id);
  }
  MERIDIAN_RETURN_IF_ERROR(r_.StringList(o, "residency", path, &obj->residency));
  return ParseRegionRules(o["residency"], Field(path, "residency"), obj->residency);
}

Status JobParser::ParseDatasets(const YAML::Node& root) {
  YAML::Node ds = root["datasets"];
  if (!ds) return OkStatus();
  MERIDIAN_RETURN_IF_ERROR(r_.CheckSeq(ds, "datasets"));
  for (size_t i = 0; i < ds.size(); ++i) {
    std::string path = Index("datasets", i);
    MERIDIAN_RETURN_IF_ERROR(r_.CheckMap(ds[i], path, {"name", "shards"}));
    model::Dataset dataset;
    MERIDIAN_RETURN_IF_ERROR(r_.RequiredString(ds[i], "name", path, &dataset.name));
    if (dataset_index_.count(dataset.name)) {
      return r_.Error(ds[i]["name"], Field(path, "name"), fmt::format("duplicate dataset '{}'", dataset.name));
    }
    YAML::Node shards = ds[i]["shards"];
    std::string spath = Field(path, "shards");
    if (!shards) return r_.Error(ds[i], path, "missing required field 'shards'");
    MERIDIAN_RETURN_IF_ERROR(r_.CheckSeq(shards, spath));
    if (shards.size() == 0) return r_.Error(shards, spath, "a dataset needs at least one shard");
    for (size_t k = 0; k < shards.size(); ++k) {
      model::ObjectRef shard;
      MERIDIAN_RETURN_IF_ERROR(ParseObject(shards[k], Index(spath, k), &shard));
      if (shard.name.empty()) shard.name = fmt::format("{}/{}", dataset.name, k);
      dataset.shards.push_back(std::move(shard));
    }
    dataset_index_[dataset.name] = job_.datasets.size();
    job_.datasets.push_back(std::move(dataset));
  }
  return OkStatus();
}

}  // namespace

Status ParseResourceRequest(const Reader& r, const YAML::Node& t, const std::string& path,
                            model::ResourceRequest* req) {
  YAML::Node res = t["resources"];
  if (!res) return OkStatus();
  std::string rpath = Field(path, "resources");
  MERIDIAN_RETURN_IF_ERROR(
      r.CheckMap(res, rpath, {"accelerator", "count", "share", "min_memory", "qubits", "cpu", "memory", "labels", "spot"}));
  MERIDIAN_RETURN_IF_ERROR(r.StringMap(res, "labels", rpath, "label: value", "label", &req->node_labels));
  MERIDIAN_RETURN_IF_ERROR(r.Enum(res, "spot", rpath,
                                   {{"any", model::SpotRule::kAny}, {"never", model::SpotRule::kNever},
                                    {"only", model::SpotRule::kOnly}, {"prefer", model::SpotRule::kPrefer},
                                    {"avoid", model::SpotRule::kAvoid}},
                                   &req->spot));
  if (YAML::Node acc = res["accelerator"]) {
    std::string apath = Field(rpath, "accelerator");
    std::vector<std::string> types;
    if (acc.IsScalar()) {
      types.push_back(acc.Scalar());
    } else {
      MERIDIAN_RETURN_IF_ERROR(r.CheckMap(acc, apath, {"any_of"}));
      MERIDIAN_RETURN_IF_ERROR(r.StringList(acc, "any_of", apath, &types));
      if (types.empty()) return r.Error(acc, apath, "missing required field 'any_of'");
    }
    for (const std::string& name : types) {
      auto known = model::FindAcceleratorType(name);
      if (!known || known->klass == model::AcceleratorClass::kCpu) {
        return r.Error(acc, apath, fmt::format("unknown accelerator type '{}' (known: {})", name,
                                                model::KnownAcceleratorTypeNames()));
      }
      req->accelerator_any_of.emplace_back(known->name);
    }
    req->device_count = 1;
  }
  // A state-vector simulation of N qubits holds 2^N amplitudes of 16 bytes on its
  // device: that much device memory at least, on one device unless told otherwise.
  int64_t qubits = 0;
  MERIDIAN_RETURN_IF_ERROR(r.Int(res, "qubits", rpath, 1, kMaxSimulatedQubits, &qubits));
  if (qubits > 0 && req->device_count == 0) req->device_count = 1;
  int64_t count = req->device_count;
  MERIDIAN_RETURN_IF_ERROR(r.Int(res, "count", rpath, 0, 64, &count));
  req->device_count = static_cast<int32_t>(count);
  int64_t share = req->device_share_milli;
  MERIDIAN_RETURN_IF_ERROR(r.Unit(res, "share", rpath, ParseMilli, &share));
  if (share <= 0 || share > kMilliPerUnit) {
    return r.Error(res["share"], Field(rpath, "share"), "expected a share of each device in (0, 1], such as 0.5 or 250m");
  }
  req->device_share_milli = static_cast<int32_t>(share);
  if (req->device_count == 0 && (res["share"] || res["min_memory"] || res["accelerator"] || res["qubits"])) {
    return r.Error(res, rpath, "'accelerator', 'share', 'min_memory' and 'qubits' need 'count' of at least 1");
  }
  MERIDIAN_RETURN_IF_ERROR(r.Unit(res, "min_memory", rpath, ParseBytes, &req->min_device_memory_bytes));
  if (qubits > 0) req->min_device_memory_bytes = std::max(req->min_device_memory_bytes, int64_t{16} << qubits);
  MERIDIAN_RETURN_IF_ERROR(r.Unit(res, "cpu", rpath, ParseMilli, &req->cpu_milli));
  return r.Unit(res, "memory", rpath, ParseBytes, &req->memory_bytes);
}

namespace {

Status JobParser::ParseWork(const YAML::Node& t, const std::string& path, Task* task) const {
  if (t["duration"]) {
    MERIDIAN_RETURN_IF_ERROR(r_.Unit(t, "duration", path, ParseDurationUs, &task->duration_us));
  }
  YAML::Node w = t["work"];
  if (!w) return OkStatus();
  if (t["duration"]) return r_.Error(w, Field(path, "work"), "give either 'work' or 'duration', not both");
  std::string wpath = Field(path, "work");
  MERIDIAN_RETURN_IF_ERROR(r_.CheckMap(w, wpath, {"kind", "amount"}));
  model::WorkAmount work;
  MERIDIAN_RETURN_IF_ERROR(r_.RequiredString(w, "kind", wpath, &work.kind));
  if (!throughput_.HasKind(work.kind)) {
    std::string known;
    for (const std::string& k : throughput_.Kinds()) known += (known.empty() ? "" : ", ") + k;
    return r_.Error(w["kind"], Field(wpath, "kind"),
                    fmt::format("work kind '{}' is not in the fleet's throughput table (known: {})",
                                work.kind, known.empty() ? "none" : known));
  }
  if (!w["amount"]) return r_.Error(w, wpath, "missing required field 'amount'");
  MERIDIAN_RETURN_IF_ERROR(r_.Double(w, "amount", wpath, 0.0, &work.amount));
  if (work.amount <= 0) return r_.Error(w["amount"], Field(wpath, "amount"), "must be positive");
  task->work = std::move(work);
  return OkStatus();
}

Status JobParser::ParseInputs(const YAML::Node& t, const std::string& path, TaskTemplate* tmpl) const {
  YAML::Node in = t["inputs"];
  if (!in) return OkStatus();
  std::string ipath = Field(path, "inputs");
  MERIDIAN_RETURN_IF_ERROR(r_.CheckSeq(in, ipath));
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i].IsScalar()) {
      std::string ref = in[i].Scalar();
      if (ref.rfind(kObjectScheme, 0) == 0) {
        const std::string id = ref.substr(kObjectScheme.size());
        std::optional<model::ObjectRef> found = objects_ ? objects_(id) : std::nullopt;
        if (!found) {
          return r_.Error(in[i], Index(ipath, i),
                          fmt::format("no object {} in the cluster that this job may read (put it first)", id));
        }
        found->name = ref;
        found->object_id = id;
        tmpl->task.inputs.push_back(std::move(*found));
        continue;
      }
      if (ref.rfind(kDatasetScheme, 0) != 0) {
        return r_.Error(in[i], Index(ipath, i),
                        fmt::format("expected dataset://NAME, object://ID or an object map, got '{}'", ref));
      }
      std::string name = ref.substr(kDatasetScheme.size());
      if (!KnowDataset(name)) return r_.Error(in[i], Index(ipath, i), fmt::format("unknown dataset '{}'", name));
      tmpl->dataset_inputs.push_back(name);
      continue;
    }
    model::ObjectRef obj;
    MERIDIAN_RETURN_IF_ERROR(ParseObject(in[i], Index(ipath, i), &obj));
    if (obj.name.empty()) obj.name = fmt::format("{}.input{}", tmpl->task.name, i);
    tmpl->task.inputs.push_back(std::move(obj));
  }
  return OkStatus();
}

Status JobParser::ParseEnv(const YAML::Node& t, const std::string& path, Task& task) const {
  YAML::Node e = t["env"];
  if (!e) return OkStatus();
  const std::string epath = Field(path, "env");
  if (!e.IsMap()) return r_.Error(e, epath, "expected a map of NAME: value");
  if (!task.kernel.empty()) return r_.Error(e, epath, "only a command has an environment (a kernel reads 'args')");
  if (e.size() > kMaxEnvVars) {
    return r_.Error(e, epath, fmt::format("at most {} variables, got {}", kMaxEnvVars, e.size()));
  }
  MERIDIAN_RETURN_IF_ERROR(r_.StringMap(t, "env", path, "NAME: value", "variable", &task.env));
  for (auto it = e.begin(); it != e.end(); ++it) {
    const std::string k = it->first.Scalar();
    const std::string& v = task.env.at(k);
    const bool name_ok = !k.empty() && k.size() <= 128 && !std::isdigit(static_cast<unsigned char>(k[0])) &&
                         std::all_of(k.begin(), k.end(), [](char c) {
                           return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
                         });
    if (!name_ok) {
      return r_.Error(it->first, Field(epath, k),
                      "a variable's name is letters, digits and '_' (not first), at most 128 of them");
    }
    if (k.rfind("MERIDIAN_", 0) == 0 || k == "HOME" || k == "CUDA_VISIBLE_DEVICES") {
      return r_.Error(it->first, Field(epath, k),
                      fmt::format("{} is Meridian's to set (MERIDIAN_*, HOME, CUDA_VISIBLE_DEVICES)", k));
    }
    if (v.size() > kMaxEnvValueBytes || v.find('\0') != std::string::npos) {
      return r_.Error(it->second, Field(epath, k),
                      fmt::format("a value is at most {} bytes, without NUL", kMaxEnvValueBytes));
    }
  }
  return OkStatus();
}

Status JobParser::ParseTask(const YAML::Node& t, const std::string& path, TaskTemplate* tmpl) const {
  MERIDIAN_RETURN_IF_ERROR(r_.CheckMap(t, path, {"name", "kernel", "command", "work", "duration", "resources", "inputs", "map", "reduce", "after", "output_size", "replicas", "count", "gang", "retries", "timeout", "stop_grace", "args", "env", "output_dataset"}));
  Task& task = tmpl->task;
  MERIDIAN_RETURN_IF_ERROR(r_.RequiredString(t, "name", path, &task.name));
  if (task.name.find('/') != std::string::npos) return r_.Error(t["name"], Field(path, "name"), "must not contain '/'");
  MERIDIAN_RETURN_IF_ERROR(r_.String(t, "kernel", path, &task.kernel));
  MERIDIAN_RETURN_IF_ERROR(r_.StringList(t, "command", path, &task.command));
  if (task.kernel.empty() == task.command.empty()) {
    return r_.Error(t, path, "give exactly one of 'kernel' or 'command'");
  }
  MERIDIAN_RETURN_IF_ERROR(ParseWork(t, path, &task));
  MERIDIAN_RETURN_IF_ERROR(ParseResourceRequest(r_, t, path, &task.resources));
  MERIDIAN_RETURN_IF_ERROR(ParseInputs(t, path, tmpl));
  if (YAML::Node m = t["map"]) {
    MERIDIAN_RETURN_IF_ERROR(r_.CheckMap(m, Field(path, "map"), {"over"}));
    std::string over;
    MERIDIAN_RETURN_IF_ERROR(r_.RequiredString(m, "over", Field(path, "map"), &over));
    if (over.rfind(kDatasetScheme, 0) != 0 || !KnowDataset(over.substr(kDatasetScheme.size()))) {
      return r_.Error(m["over"], Field(path, "map.over"),
                      fmt::format("expected dataset://NAME of a dataset declared here or put in the cluster "
                                  "(meridian data put), got '{}'",
                                  over));
    }
    tmpl->map_over = over.substr(kDatasetScheme.size());
  }
  if (YAML::Node red = t["reduce"]; red && red.IsMap()) {
    const std::string rpath = Field(path, "reduce");
    MERIDIAN_RETURN_IF_ERROR(r_.CheckMap(red, rpath, {"of", "fan_in"}));
    MERIDIAN_RETURN_IF_ERROR(r_.RequiredString(red, "of", rpath, &tmpl->reduce_of));
    if (!red["fan_in"]) return r_.Error(red, rpath, "missing required field 'fan_in' (or write reduce: NAME)");
    MERIDIAN_RETURN_IF_ERROR(r_.Int(red, "fan_in", rpath, 2, 1024, &tmpl->fan_in));
  } else {
    MERIDIAN_RETURN_IF_ERROR(r_.String(t, "reduce", path, &tmpl->reduce_of));
  }
  MERIDIAN_RETURN_IF_ERROR(r_.StringList(t, "after", path, &tmpl->after));
  MERIDIAN_RETURN_IF_ERROR(r_.Unit(t, "output_size", path, ParseBytes, &task.output_bytes));
  MERIDIAN_RETURN_IF_ERROR(r_.Int(t, "replicas", path, 1, 4096, &tmpl->replicas));
  if (tmpl->replicas > 1 && !tmpl->map_over.empty()) {
    return r_.Error(t["replicas"], Field(path, "replicas"), "a map task cannot also have replicas");
  }
  MERIDIAN_RETURN_IF_ERROR(r_.Int(t, "count", path, 1, kMaxTasks, &tmpl->count));
  if (t["count"] && (t["replicas"] || t["map"])) {
    return r_.Error(t["count"], Field(path, "count"), "give at most one of 'count', 'replicas' or 'map'");
  }
  MERIDIAN_RETURN_IF_ERROR(r_.StringMap(t, "args", path, "name: value", "argument", &task.args));
  MERIDIAN_RETURN_IF_ERROR(ParseEnv(t, path, task));
  MERIDIAN_RETURN_IF_ERROR(r_.String(t, "output_dataset", path, &task.output_dataset));
  if (t["output_dataset"]) {
    const std::string opath = Field(path, "output_dataset");
    if (Status named = model::CheckName(task.output_dataset, "a dataset name"); !named.ok()) {
      return r_.Error(t["output_dataset"], opath, named.message());
    }
    if (model::LooksLikeObjectId(task.output_dataset)) {
      return r_.Error(t["output_dataset"], opath, "a dataset name must not read as an object id (32 hex digits)");
    }
    if (KnowDataset(task.output_dataset)) {
      return r_.Error(t["output_dataset"], opath,
                      fmt::format("dataset '{}' exists already; a task's outputs make a new one", task.output_dataset));
    }
  }
  MERIDIAN_RETURN_IF_ERROR(r_.String(t, "gang", path, &task.gang));
  if (!task.gang.empty() || tmpl->replicas > 1) {
    for (std::string_view name : kGangVariables) {
      if (!task.env.count(std::string(name))) continue;
      return r_.Error(t["env"][std::string(name)], Field(Field(path, "env"), std::string(name)),
                      fmt::format("{} is Meridian's to set for a gang's members", name));
    }
  }
  int64_t retries = 0;
  MERIDIAN_RETURN_IF_ERROR(r_.Int(t, "retries", path, 0, 100, &retries));
  task.retries = static_cast<int32_t>(retries);
  MERIDIAN_RETURN_IF_ERROR(r_.Unit(t, "timeout", path, ParseDurationUs, &task.timeout_us));
  // A command stopped (cancelled, timed out) gets SIGTERM, then SIGKILL this long after.
  MERIDIAN_RETURN_IF_ERROR(r_.Unit(t, "stop_grace", path, ParseDurationUs, &task.stop_grace_us));
  if (t["stop_grace"]) {
    if (!task.kernel.empty()) {
      return r_.Error(t["stop_grace"], Field(path, "stop_grace"), "only a command is stopped with a grace period");
    }
    if (task.stop_grace_us < 0 || task.stop_grace_us > kMaxStopGraceUs) {
      return r_.Error(t["stop_grace"], Field(path, "stop_grace"),
                      fmt::format("expected 0s to {}, got {}", FormatDurationUs(kMaxStopGraceUs),
                                  FormatDurationUs(task.stop_grace_us)));
    }
  }
  return OkStatus();
}

Status JobParser::Expand() {
  // One task's copies make a dataset: two tasks may not write the same one.
  std::map<std::string, const TaskTemplate*> writers;
  for (const TaskTemplate& tmpl : templates_) {
    const std::string& name = tmpl.task.output_dataset;
    if (name.empty()) continue;
    auto [it, fresh] = writers.emplace(name, &tmpl);
    if (!fresh) {
      return r_.Error(tmpl.node["output_dataset"], Field(tmpl.path, "output_dataset"),
                      fmt::format("task '{}' writes dataset '{}' already; each dataset is one task's outputs",
                                  it->second->task.name, name));
    }
  }
  for (TaskTemplate& tmpl : templates_) {
    std::vector<const model::ObjectRef*> shards;
    if (!tmpl.map_over.empty()) {
      for (const model::ObjectRef& s : job_.datasets[dataset_index_[tmpl.map_over]].shards) shards.push_back(&s);
    }
    size_t n = !shards.empty() ? shards.size() : static_cast<size_t>(std::max(tmpl.replicas, tmpl.count));
    if (job_.tasks.size() + n > static_cast<size_t>(kMaxTasks)) {
      return r_.Error(tmpl.node, tmpl.path, fmt::format("a job holds at most {} tasks after expansion", kMaxTasks));
    }
    if (max_tasks_ > 0 && job_.tasks.size() + n > static_cast<size_t>(max_tasks_)) {
      return OutOfRangeError(fmt::format("{}: the job has more than {} tasks", r_.file(), max_tasks_));
    }
    for (size_t k = 0; k < n; ++k) {
      Task task = tmpl.task;
      task.id = TaskId(static_cast<uint32_t>(job_.tasks.size()));
      task.index = static_cast<uint32_t>(k);
      if (n > 1 || !shards.empty()) task.name = fmt::format("{}/{}", tmpl.task.name, k);
      if (!shards.empty()) task.inputs.push_back(*shards[k]);
      for (const std::string& ds : tmpl.dataset_inputs) {
        for (const model::ObjectRef& s : job_.datasets[dataset_index_[ds]].shards) task.inputs.push_back(s);
      }
      if (tmpl.replicas > 1 && task.gang.empty()) task.gang = tmpl.task.name;
      tmpl.expanded.push_back(task.id);
      job_.tasks.push_back(std::move(task));
    }
  }
  return OkStatus();
}

Status JobParser::Link() {
  for (TaskTemplate& tmpl : templates_) {
    std::vector<std::string> deps = tmpl.after;
    if (!tmpl.reduce_of.empty()) deps.push_back(tmpl.reduce_of);
    for (const std::string& dep : deps) {
      auto it = template_index_.find(dep);
      if (it == template_index_.end()) {
        YAML::Node at = tmpl.node[dep == tmpl.reduce_of ? "reduce" : "after"];
        return r_.Error(at, Field(tmpl.path, dep == tmpl.reduce_of ? "reduce" : "after"),
                        fmt::format("unknown task '{}'", dep));
      }
      if (it->second == static_cast<size_t>(&tmpl - templates_.data())) {
        return r_.Error(tmpl.node, tmpl.path, "a task cannot depend on itself");
      }
      std::vector<TaskId> inputs = templates_[it->second].expanded;
      if (dep == tmpl.reduce_of && tmpl.fan_in > 0) inputs = ReduceTree(tmpl, std::move(inputs));
      for (TaskId id : tmpl.expanded) {
        for (TaskId d : inputs) job_.tasks[id.value()].after.push_back(d);
      }
    }
  }
  MERIDIAN_RETURN_IF_ERROR(CheckAcyclic());
  return BuildGangs();
}

const TaskTemplate& JobParser::TemplateOf(const Task& task) const {
  return templates_[template_index_.at(task.name.substr(0, task.name.find('/')))];
}

Status JobParser::BuildGangs() {
  std::map<std::string, int32_t> by_name;
  for (Task& t : job_.tasks) {
    if (t.gang.empty()) continue;
    auto [it, fresh] = by_name.emplace(t.gang, static_cast<int32_t>(job_.gangs.size()));
    if (fresh) job_.gangs.push_back(model::Gang{t.gang, {}});
    model::Gang& g = job_.gangs[static_cast<size_t>(it->second)];
    if (g.members.size() == model::kMaxGangMembers) {
      const TaskTemplate& tmpl = TemplateOf(t);
      return r_.Error(tmpl.node, tmpl.path,
                      fmt::format("gang '{}' has more than {} members", g.name, model::kMaxGangMembers));
    }
    t.gang_id = it->second;
    t.gang_rank = static_cast<uint32_t>(g.members.size());
    g.members.push_back(t.id);
  }
  // Its members start together, so none may wait for another: back from every member
  // through its dependencies, no member of the same gang may be met. Each task is
  // visited once per gang.
  std::vector<uint32_t> seen(job_.tasks.size(), 0);
  std::vector<std::pair<TaskId, TaskId>> stack;  // (task, the member whose dependency it is)
  for (size_t gi = 0; gi < job_.gangs.size(); ++gi) {
    const model::Gang& g = job_.gangs[gi];
    const uint32_t mark = static_cast<uint32_t>(gi) + 1;
    for (TaskId m : g.members) {
      for (TaskId d : job_.tasks[m.value()].after) stack.emplace_back(d, m);
    }
    while (!stack.empty()) {
      auto [id, of] = stack.back();
      stack.pop_back();
      if (seen[id.value()] == mark) continue;
      seen[id.value()] = mark;
      const Task& t = job_.tasks[id.value()];
      if (t.gang_id == static_cast<int32_t>(gi)) {
        const Task& member = job_.tasks[of.value()];
        const TaskTemplate& tmpl = TemplateOf(member);
        return r_.Error(tmpl.node, tmpl.path,
                        fmt::format("task '{}' depends on '{}' (directly or through other tasks), a member of its "
                                    "own gang '{}': a gang's members start together",
                                    member.name, t.name, g.name));
      }
      for (TaskId d : t.after) stack.emplace_back(d, of);
    }
  }
  return OkStatus();
}

std::vector<TaskId> JobParser::ReduceTree(const TaskTemplate& tmpl, std::vector<TaskId> level) {
  // Merge `fan_in` at a time, level by level, until one task's worth is left; the
  // template's own task then merges the last level. Neighbours merge together (a
  // dataset's shards are in order, so they tend to share a site).
  // A copy: push_back below may move the tasks, and a reference would dangle.
  const Task base = job_.tasks[tmpl.expanded.front().value()];
  for (int depth = 1; level.size() > static_cast<size_t>(tmpl.fan_in); ++depth) {
    std::vector<TaskId> next;
    for (size_t start = 0; start < level.size(); start += static_cast<size_t>(tmpl.fan_in)) {
      Task task = base;
      task.output_dataset.clear();  // the tree's inner merges are not the task's outputs
      task.id = TaskId(static_cast<uint32_t>(job_.tasks.size()));
      task.index = static_cast<uint32_t>(next.size());
      task.name = fmt::format("{}/l{}-{}", tmpl.task.name, depth, next.size());
      task.after.assign(level.begin() + static_cast<std::ptrdiff_t>(start),
                        level.begin() + static_cast<std::ptrdiff_t>(std::min(level.size(), start + tmpl.fan_in)));
      next.push_back(task.id);
      job_.tasks.push_back(std::move(task));
    }
    level = std::move(next);
  }
  return level;
}

void JobParser::DeriveOutputResidency() {
  // Depth first over dependencies (the graph is acyclic: Link checked it), each
  // task once.
  std::vector<uint8_t> state(job_.tasks.size(), 0);  // 0 new, 1 on the stack, 2 done
  std::vector<size_t> stack;
  for (size_t root = 0; root < job_.tasks.size(); ++root) {
    if (state[root] != 0) continue;
    stack.push_back(root);
    while (!stack.empty()) {
      const size_t i = stack.back();
      Task& t = job_.tasks[i];
      if (state[i] == 0) {
        state[i] = 1;
        for (TaskId d : t.after) {
          if (state[d.value()] == 0) stack.push_back(d.value());
        }
        continue;
      }
      stack.pop_back();
      if (state[i] == 2) continue;
      state[i] = 2;
      std::vector<const std::vector<std::string>*> lists;
      for (const model::ObjectRef& in : t.inputs) {
        if (!in.residency.empty()) lists.push_back(&in.residency);
      }
      for (TaskId d : t.after) {
        if (!job_.tasks[d.value()].output_residency.empty()) lists.push_back(&job_.tasks[d.value()].output_residency);
      }
      if (lists.empty()) continue;
      bool agree = true;
      for (const auto* l : lists) agree &= *l == *lists.front();
      if (agree) {
        t.output_residency = *lists.front();
        continue;
      }
      // Several rules: the sites that satisfy every one, by name.
      for (const model::Site& site : fleet_.sites) {
        bool ok = true;
        for (const auto* l : lists) ok &= model::SiteMatchesAnyRegionRule(site, *l);
        if (ok) t.output_residency.push_back(site.name);
      }
      // No site satisfies them all: the task cannot run, nor anything after it.
      if (t.output_residency.empty()) t.output_residency = *lists.front();
    }
  }
}

Status JobParser::CheckAcyclic() const {
  // Kahn's algorithm over templates; whatever is left is on a cycle.
  std::vector<int> indegree(templates_.size(), 0);
  std::vector<std::vector<size_t>> users(templates_.size());
  for (size_t i = 0; i < templates_.size(); ++i) {
    std::vector<std::string> deps = templates_[i].after;
    if (!templates_[i].reduce_of.empty()) deps.push_back(templates_[i].reduce_of);
    for (const std::string& d : deps) {
      users[template_index_.at(d)].push_back(i);
      ++indegree[i];
    }
  }
  std::vector<size_t> ready;
  for (size_t i = 0; i < templates_.size(); ++i) if (indegree[i] == 0) ready.push_back(i);
  size_t done = 0;
  while (!ready.empty()) {
    size_t i = ready.back();
    ready.pop_back();
    ++done;
    for (size_t u : users[i]) if (--indegree[u] == 0) ready.push_back(u);
  }
  if (done == templates_.size()) return OkStatus();
  for (size_t i = 0; i < templates_.size(); ++i) {
    if (indegree[i] > 0) {
      return r_.Error(templates_[i].node, templates_[i].path,
                      fmt::format("task '{}' is on a dependency cycle", templates_[i].task.name));
    }
  }
  return InternalError("cycle detection inconsistent");
}

StatusOr<Job> JobParser::Parse(const YAML::Node& root) {
  MERIDIAN_RETURN_IF_ERROR(r_.CheckMap(root, "", {"name", "tenant", "priority", "objective", "deadline", "budget", "regions",
                                              "fallback", "output_residency", "gang_failure", "datasets", "tasks"}));
  MERIDIAN_RETURN_IF_ERROR(ParseHeader(root));
  MERIDIAN_RETURN_IF_ERROR(ParseDatasets(root));
  YAML::Node tasks = root["tasks"];
  if (!tasks) return r_.Error(root, "", "missing required field 'tasks'");
  MERIDIAN_RETURN_IF_ERROR(r_.CheckSeq(tasks, "tasks"));
  if (tasks.size() == 0) return r_.Error(tasks, "tasks", "a job needs at least one task");
  for (size_t i = 0; i < tasks.size(); ++i) {
    TaskTemplate tmpl;
    tmpl.node = tasks[i];
    tmpl.path = Index("tasks", i);
    MERIDIAN_RETURN_IF_ERROR(ParseTask(tasks[i], tmpl.path, &tmpl));
    if (template_index_.count(tmpl.task.name)) {
      return r_.Error(tasks[i]["name"], Field(tmpl.path, "name"), fmt::format("duplicate task name '{}'", tmpl.task.name));
    }
    template_index_[tmpl.task.name] = templates_.size();
    templates_.push_back(std::move(tmpl));
  }
  MERIDIAN_RETURN_IF_ERROR(Expand());
  MERIDIAN_RETURN_IF_ERROR(Link());
  if (job_.outputs_inherit_residency) DeriveOutputResidency();
  // Cost and deadlines are weighed by each task's time; without one it counts as zero.
  const bool weighs_time = job_.objective != model::Objective::kFastest || job_.deadline_us || job_.budget_micro_usd;
  for (const TaskTemplate& tmpl : templates_) {
    if (!weighs_time || tmpl.task.work || tmpl.task.duration_us > 0) continue;
    job_.warnings.push_back(
        r_.Error(tmpl.node, tmpl.path,
                 fmt::format("task '{}' has no 'duration' or 'work': its time and cost count as zero, so the "
                             "objective, deadline and budget cannot weigh it",
                             tmpl.task.name))
            .message());
  }
  return std::move(job_);
}

}  // namespace

StatusOr<Job> ParseJob(std::string_view text, std::string_view file, const model::Fleet& fleet,
                       const model::ThroughputTable& throughput, const DatasetResolver& resolver, int64_t max_tasks,
                       const ObjectResolver& objects) {
  MERIDIAN_ASSIGN_OR_RETURN(YAML::Node root, ParseYaml(text, file));
  const bool has_kind = root.IsMap() && root["kind"] && root["kind"].IsScalar();
  // A stream (docs/streams.md) runs as a job of one task at its site.
  if (has_kind && root["kind"].Scalar() == "stream") return ParseStreamJob(text, file, fleet);
  // A service is not one job but one per replica, started by `meridian serve`.
  if (has_kind && root["kind"].Scalar() == "service") {
    return InvalidArgumentError(
        fmt::format("{}: a service spec (kind: service): start it with `meridian serve {}`", file, file));
  }
  Reader r{std::string(file)};
  JobParser parser(r, fleet, throughput, resolver, max_tasks, objects);
  return parser.Parse(root);
}

StatusOr<Job> LoadJob(const std::string& path, const model::Fleet& fleet,
                      const model::ThroughputTable& throughput) {
  MERIDIAN_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path, kMaxYamlFileBytes));
  return ParseJob(text, path, fleet, throughput);
}

}  // namespace meridian::spec
