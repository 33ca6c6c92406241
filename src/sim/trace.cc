#include "sim/trace.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "common/env.h"
#include "common/units.h"
#include "model/accelerators.h"
#include "spec/csv.h"
#include "spec/gavel.h"
#include "spec/yaml_reader.h"

namespace meridian::sim {
namespace {

// Bounds on a trace's numbers, so that converting them to microseconds and bytes
// cannot overflow: a century of seconds, and what one machine can hold.
constexpr int64_t kMaxTraceSeconds = int64_t{100} * 365 * 24 * 3600;
constexpr int64_t kMaxTraceMib = int64_t{64} << 20;          // 64 TiB
constexpr int64_t kMaxTraceCpuMilli = int64_t{4096} * 1000;  // 4,096 cores

Status CheckSeconds(const spec::CsvTable& t, size_t r, size_t c, double seconds) {
  if (seconds < 0 || seconds > static_cast<double>(kMaxTraceSeconds)) {
    return t.Error(r, c, fmt::format("expected seconds from 0 to {}", kMaxTraceSeconds));
  }
  return OkStatus();
}

Status CheckMib(const spec::CsvTable& t, size_t r, size_t c, int64_t mib) {
  if (mib < 0 || mib > kMaxTraceMib) return t.Error(r, c, fmt::format("expected MiB from 0 to {}", kMaxTraceMib));
  return OkStatus();
}

Status CheckCpuMilli(const spec::CsvTable& t, size_t r, size_t c, int64_t milli) {
  if (milli < 0 || milli > kMaxTraceCpuMilli) {
    return t.Error(r, c, fmt::format("expected milli-cores from 0 to {}", kMaxTraceCpuMilli));
  }
  return OkStatus();
}

std::string Stem(const std::string& path) {
  size_t slash = path.find_last_of('/');
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  size_t dot = base.rfind('.');
  return dot == std::string::npos ? base : base.substr(0, dot);
}

void SortByArrival(Trace* t) {
  std::stable_sort(t->jobs.begin(), t->jobs.end(),
                   [](const TraceJob& a, const TraceJob& b) { return a.arrival_us < b.arrival_us; });
}

StatusOr<std::vector<std::string>> AcceleratorList(const spec::CsvTable& t, size_t r, size_t column) {
  std::vector<std::string> out;
  for (const std::string& name : spec::SplitList(t.field(r, column), '|')) {
    std::optional<model::AcceleratorType> type = model::FindAcceleratorType(name);
    if (!type || type->name == model::kCpuType) {
      return t.Error(r, column, fmt::format("unknown accelerator '{}' (known: {})", name,
                                            model::KnownAcceleratorTypeNames()));
    }
    out.emplace_back(type->name);
  }
  return out;
}

// What a Sia/Philly application trains, as Gavel measured it: the closest model
// of Gavel's table, its batch sizes, and the samples one job processes (the
// dataset times a number of epochs). docs/simulator.md gives the reasoning.
struct Application {
  const char* name;
  const char* gavel_model;       // normalised: "resnet-18"
  std::vector<int> gavel_batches;
  double samples;
};

const std::vector<Application>& Applications() {
  static const std::vector<Application> kApps = {
      {"cifar10", "resnet-18", {16, 32, 64, 128, 256}, 50'000.0 * 50},   // CIFAR-10, 50 epochs
      {"imagenet", "resnet-50", {16, 32, 64, 128}, 1'281'167.0 * 5},     // ImageNet, 5 epochs
      {"bert", "transformer", {16, 32, 64, 128, 256}, 88'000.0 * 2},     // SQuAD fine-tuning, 2 epochs
      {"deepspeech2", "lm", {5, 10, 20, 40, 80}, 28'539.0 * 20},         // LibriSpeech-100h, 20 epochs
      {"yolov3", "cyclegan", {}, 16'551.0 * 5},                          // PASCAL VOC, 5 epochs
  };
  return kApps;
}

// The Gavel batch closest (in ratio) to the per-replica batch.
int NearestBatch(const std::vector<int>& batches, double per_replica) {
  int best = batches.front();
  for (int b : batches) {
    if (std::abs(std::log(b / per_replica)) < std::abs(std::log(best / per_replica))) best = b;
  }
  return best;
}

}  // namespace

size_t Trace::TaskCount() const {
  size_t n = 0;
  for (const TraceJob& j : jobs) n += j.job->tasks.size();
  return n;
}

StatusOr<Trace> ParseAlibabaPods(std::string text, const std::string& file) {
  MERIDIAN_ASSIGN_OR_RETURN(spec::CsvTable t, spec::CsvTable::Parse(std::move(text), file));
  MERIDIAN_ASSIGN_OR_RETURN(size_t c_name, t.RequireColumn("name"));
  MERIDIAN_ASSIGN_OR_RETURN(size_t c_cpu, t.RequireColumn("cpu_milli"));
  MERIDIAN_ASSIGN_OR_RETURN(size_t c_mem, t.RequireColumn("memory_mib"));
  MERIDIAN_ASSIGN_OR_RETURN(size_t c_gpus, t.RequireColumn("num_gpu"));
  MERIDIAN_ASSIGN_OR_RETURN(size_t c_milli, t.RequireColumn("gpu_milli"));
  const std::optional<size_t> c_spec = t.Column("gpu_spec");
  Trace trace;
  trace.name = Stem(file);
  trace.format = "alibaba-gpu-2023";
  trace.timeless = !t.Column("creation_time");
  size_t c_created = 0, c_deleted = 0, c_scheduled = 0;
  if (!trace.timeless) {
    MERIDIAN_ASSIGN_OR_RETURN(c_created, t.RequireColumn("creation_time"));
    MERIDIAN_ASSIGN_OR_RETURN(c_deleted, t.RequireColumn("deletion_time"));
    MERIDIAN_ASSIGN_OR_RETURN(c_scheduled, t.RequireColumn("scheduled_time"));
  }
  for (size_t r = 0; r < t.rows(); ++r) {
    model::Task task;
    task.id = TaskId(0);
    task.name = "pod";
    MERIDIAN_ASSIGN_OR_RETURN(task.resources.cpu_milli, t.Int(r, c_cpu));
    MERIDIAN_ASSIGN_OR_RETURN(int64_t mem_mib, t.Int(r, c_mem));
    MERIDIAN_ASSIGN_OR_RETURN(int64_t gpus, t.Int(r, c_gpus));
    MERIDIAN_ASSIGN_OR_RETURN(int64_t milli, t.Int(r, c_milli));
    MERIDIAN_RETURN_IF_ERROR(CheckCpuMilli(t, r, c_cpu, task.resources.cpu_milli));
    MERIDIAN_RETURN_IF_ERROR(CheckMib(t, r, c_mem, mem_mib));
    if (gpus < 0 || gpus > 64) return t.Error(r, c_gpus, "expected 0 to 64 GPUs");
    if (milli < 0 || milli > 1000 || (gpus > 0 && milli == 0)) {
      return t.Error(r, c_milli, "expected 1 to 1000 milli-GPUs per GPU");
    }
    task.resources.memory_bytes = mem_mib * kMiB;
    task.resources.device_count = static_cast<int32_t>(gpus);
    task.resources.device_share_milli = gpus > 0 ? static_cast<int32_t>(milli) : 1000;
    if (c_spec) {
      MERIDIAN_ASSIGN_OR_RETURN(task.resources.accelerator_any_of, AcceleratorList(t, r, *c_spec));
    }
    auto job = std::make_shared<model::Job>();
    job->id = JobId(static_cast<uint32_t>(r));
    job->name = std::string(t.field(r, c_name));
    if (trace.timeless) {
      job->tasks.push_back(std::move(task));
      trace.jobs.push_back(TraceJob{static_cast<int64_t>(r) * kSecondUs, std::move(job)});
      continue;
    }
    MERIDIAN_ASSIGN_OR_RETURN(int64_t created, t.Int(r, c_created));
    MERIDIAN_ASSIGN_OR_RETURN(int64_t deleted, t.IntOr(r, c_deleted, -1));
    MERIDIAN_ASSIGN_OR_RETURN(int64_t scheduled, t.IntOr(r, c_scheduled, -1));
    if (deleted < 0) return t.Error(r, c_deleted, "expected the time the pod ended");
    MERIDIAN_RETURN_IF_ERROR(CheckSeconds(t, r, c_created, static_cast<double>(created)));
    MERIDIAN_RETURN_IF_ERROR(CheckSeconds(t, r, c_deleted, static_cast<double>(deleted)));
    if (scheduled >= 0) MERIDIAN_RETURN_IF_ERROR(CheckSeconds(t, r, c_scheduled, static_cast<double>(scheduled)));
    int64_t began = scheduled >= 0 ? scheduled : created;
    if (deleted < began) return t.Error(r, c_deleted, "ends before it began");
    task.duration_us = (deleted - began) * kSecondUs;
    job->tasks.push_back(std::move(task));
    trace.jobs.push_back(TraceJob{created * kSecondUs, std::move(job)});
  }
  SortByArrival(&trace);
  return trace;
}

namespace {

// A training job: `replicas` one-GPU replicas (a gang when more than one), each
// doing `work` on any device type the table knows its kind for.
std::shared_ptr<const model::Job> ReplicaGang(uint32_t id, std::string name, int replicas, const model::WorkAmount& work,
                                              const model::ThroughputTable& throughput) {
  auto job = std::make_shared<model::Job>();
  job->id = JobId(id);
  job->name = std::move(name);
  for (int i = 0; i < replicas; ++i) {
    model::Task task;
    task.id = TaskId(static_cast<uint32_t>(i));
    task.name = fmt::format("replica-{}", i);
    task.work = work;
    task.resources.device_count = 1;
    task.resources.accelerator_any_of = throughput.DeviceTypes(work.kind);
    task.resources.cpu_milli = 1000;
    if (replicas > 1) task.gang = "replicas";
    job->tasks.push_back(std::move(task));
  }
  return job;
}

}  // namespace

StatusOr<Trace> ParseSiaPhilly(std::string text, const std::string& file, const model::ThroughputTable& throughput) {
  MERIDIAN_ASSIGN_OR_RETURN(spec::CsvTable t, spec::CsvTable::Parse(std::move(text), file));
  MERIDIAN_ASSIGN_OR_RETURN(size_t c_name, t.RequireColumn("name"));
  MERIDIAN_ASSIGN_OR_RETURN(size_t c_time, t.RequireColumn("time"));
  MERIDIAN_ASSIGN_OR_RETURN(size_t c_app, t.RequireColumn("application"));
  MERIDIAN_ASSIGN_OR_RETURN(size_t c_replicas, t.RequireColumn("num_replicas"));
  MERIDIAN_ASSIGN_OR_RETURN(size_t c_batch, t.RequireColumn("batch_size"));
  Trace trace;
  trace.name = Stem(file);
  trace.format = "sia-philly";
  for (size_t r = 0; r < t.rows(); ++r) {
    std::string_view app_name = t.field(r, c_app);
    auto app = std::find_if(Applications().begin(), Applications().end(),
                            [&](const Application& a) { return a.name == app_name; });
    if (app == Applications().end()) {
      return t.Error(r, c_app, "unknown application (known: cifar10, imagenet, bert, deepspeech2, yolov3)");
    }
    // Sia's newer workloads give fractional seconds ("487.661836").
    MERIDIAN_ASSIGN_OR_RETURN(double arrival_s, t.Double(r, c_time));
    MERIDIAN_ASSIGN_OR_RETURN(int64_t replicas, t.Int(r, c_replicas));
    MERIDIAN_ASSIGN_OR_RETURN(int64_t batch, t.Int(r, c_batch));
    MERIDIAN_RETURN_IF_ERROR(CheckSeconds(t, r, c_time, arrival_s));
    if (replicas < 1 || replicas > 1024) return t.Error(r, c_replicas, "expected 1 to 1024 replicas");
    if (batch < 1) return t.Error(r, c_batch, "expected a batch size >= 1");
    const double per_replica = static_cast<double>(batch) / static_cast<double>(replicas);
    const int gavel_batch = app->gavel_batches.empty() ? 1 : NearestBatch(app->gavel_batches, per_replica);
    std::string kind = app->gavel_batches.empty() ? app->gavel_model
                                                  : fmt::format("{}-b{}", app->gavel_model, gavel_batch);
    if (!throughput.HasKind(kind)) {
      return t.Error(r, c_app, fmt::format("the throughput table has no kind '{}' (load Gavel's table in the fleet)", kind));
    }
    // Each replica processes its share of the samples in steps of Gavel's batch.
    const double steps_per_replica = app->samples / (static_cast<double>(replicas) * gavel_batch);
    trace.jobs.push_back(TraceJob{
        static_cast<int64_t>(std::llround(arrival_s * kSecondUs)),
        ReplicaGang(static_cast<uint32_t>(r), std::string(t.field(r, c_name)), static_cast<int>(replicas),
                    model::WorkAmount{kind, steps_per_replica}, throughput)});
  }
  SortByArrival(&trace);
  return trace;
}

StatusOr<Trace> ParseGenericTrace(std::string text, const std::string& file, const model::Fleet& fleet) {
  MERIDIAN_ASSIGN_OR_RETURN(spec::CsvTable t, spec::CsvTable::Parse(std::move(text), file));
  static const std::vector<std::string_view> kKnown = {
      "job", "task", "arrival_s", "duration_s", "kind", "work", "gpus", "gpu_milli", "accelerators",
      "cpu_milli", "memory_mib", "gang", "after", "tenant", "priority", "input_bytes", "input_site",
      "output_bytes"};
  for (std::string_view h : t.header()) {
    if (std::find(kKnown.begin(), kKnown.end(), h) == kKnown.end()) {
      return InvalidArgumentError(fmt::format("{}:1: unknown column '{}' (known: job, task, arrival_s, duration_s, "
                                              "kind, work, gpus, gpu_milli, accelerators, cpu_milli, memory_mib, "
                                              "gang, after, tenant, priority, input_bytes, input_site, output_bytes)",
                                              file, h));
    }
  }
  MERIDIAN_ASSIGN_OR_RETURN(size_t c_job, t.RequireColumn("job"));
  MERIDIAN_ASSIGN_OR_RETURN(size_t c_arrival, t.RequireColumn("arrival_s"));
  auto col = [&](std::string_view n) { return t.Column(n); };
  const auto c_task = col("task"), c_duration = col("duration_s"), c_kind = col("kind"), c_work = col("work"),
             c_gpus = col("gpus"), c_milli = col("gpu_milli"), c_accel = col("accelerators"),
             c_cpu = col("cpu_milli"), c_mem = col("memory_mib"), c_gang = col("gang"), c_after = col("after"),
             c_tenant = col("tenant"), c_priority = col("priority"), c_in_bytes = col("input_bytes"),
             c_in_site = col("input_site"), c_out_bytes = col("output_bytes");
  if (!c_duration && !(c_kind && c_work)) {
    return InvalidArgumentError(fmt::format("{}:1: the header needs duration_s, or kind and work", file));
  }
  Trace trace;
  trace.name = Stem(file);
  trace.format = "meridian-csv";
  std::map<std::string, size_t, std::less<>> job_index;
  std::vector<std::shared_ptr<model::Job>> jobs;
  std::vector<std::vector<std::vector<std::string>>> afters;  // per job, per task
  std::vector<std::vector<size_t>> rows_of;                   // per job, per task: its row
  for (size_t r = 0; r < t.rows(); ++r) {
    std::string_view job_name = t.field(r, c_job);
    if (job_name.empty()) return t.Error(r, c_job, "expected a job name");
    MERIDIAN_ASSIGN_OR_RETURN(double arrival_s, t.Double(r, c_arrival));
    MERIDIAN_RETURN_IF_ERROR(CheckSeconds(t, r, c_arrival, arrival_s));
    auto [it, inserted] = job_index.try_emplace(std::string(job_name), jobs.size());
    if (inserted) {
      auto job = std::make_shared<model::Job>();
      job->id = JobId(static_cast<uint32_t>(jobs.size()));
      job->name = std::string(job_name);
      if (c_tenant && !t.field(r, *c_tenant).empty()) job->tenant = std::string(t.field(r, *c_tenant));
      if (c_priority) {
        MERIDIAN_ASSIGN_OR_RETURN(int64_t p, t.IntOr(r, *c_priority, 0));
        job->priority = static_cast<int32_t>(p);
      }
      jobs.push_back(job);
      afters.emplace_back();
      rows_of.emplace_back();
      trace.jobs.push_back(TraceJob{static_cast<int64_t>(std::llround(arrival_s * kSecondUs)), nullptr});
    } else if (trace.jobs[it->second].arrival_us != static_cast<int64_t>(std::llround(arrival_s * kSecondUs))) {
      return t.Error(r, c_arrival, "differs from the arrival of the job's first task");
    }
    model::Job& job = *jobs[it->second];
    model::Task task;
    task.id = TaskId(static_cast<uint32_t>(job.tasks.size()));
    task.name = c_task && !t.field(r, *c_task).empty() ? std::string(t.field(r, *c_task))
                                                       : fmt::format("t{}", job.tasks.size());
    if (job.FindTask(task.name)) {
      return t.Error(r, c_task ? *c_task : c_job, fmt::format("task '{}' appears twice in job", task.name));
    }
    bool has_kind = c_kind && !t.field(r, *c_kind).empty();
    if (has_kind) {
      if (!c_work) return t.Error(r, *c_kind, "a kind needs a work column");
      MERIDIAN_ASSIGN_OR_RETURN(double work, t.Double(r, *c_work));
      if (work < 0) return t.Error(r, *c_work, "expected work >= 0");
      task.work = model::WorkAmount{std::string(t.field(r, *c_kind)), work};
    } else {
      if (!c_duration || t.field(r, *c_duration).empty()) {
        return t.Error(r, c_job, "expected duration_s, or kind and work");
      }
      MERIDIAN_ASSIGN_OR_RETURN(double d, t.Double(r, *c_duration));
      MERIDIAN_RETURN_IF_ERROR(CheckSeconds(t, r, *c_duration, d));
      task.duration_us = static_cast<int64_t>(std::llround(d * kSecondUs));
    }
    model::ResourceRequest& req = task.resources;
    if (c_gpus) {
      MERIDIAN_ASSIGN_OR_RETURN(int64_t g, t.IntOr(r, *c_gpus, 0));
      if (g < 0 || g > 64) return t.Error(r, *c_gpus, "expected 0 to 64 GPUs");
      req.device_count = static_cast<int32_t>(g);
    }
    if (c_milli) {
      MERIDIAN_ASSIGN_OR_RETURN(int64_t m, t.IntOr(r, *c_milli, 1000));
      if (m < 1 || m > 1000) return t.Error(r, *c_milli, "expected 1 to 1000 milli-GPUs per GPU");
      req.device_share_milli = static_cast<int32_t>(m);
    }
    if (c_accel) {
      MERIDIAN_ASSIGN_OR_RETURN(req.accelerator_any_of, AcceleratorList(t, r, *c_accel));
    }
    if (c_cpu) {
      MERIDIAN_ASSIGN_OR_RETURN(req.cpu_milli, t.IntOr(r, *c_cpu, 1000));
      MERIDIAN_RETURN_IF_ERROR(CheckCpuMilli(t, r, *c_cpu, req.cpu_milli));
    }
    if (c_mem) {
      MERIDIAN_ASSIGN_OR_RETURN(int64_t mib, t.IntOr(r, *c_mem, 0));
      MERIDIAN_RETURN_IF_ERROR(CheckMib(t, r, *c_mem, mib));
      req.memory_bytes = mib * kMiB;
    }
    if (c_gang) task.gang = std::string(t.field(r, *c_gang));
    if (c_out_bytes) {
      MERIDIAN_ASSIGN_OR_RETURN(task.output_bytes, t.IntOr(r, *c_out_bytes, 0));
      if (task.output_bytes < 0) return t.Error(r, *c_out_bytes, "expected bytes >= 0");
    }
    if (c_in_bytes && !t.field(r, *c_in_bytes).empty()) {
      MERIDIAN_ASSIGN_OR_RETURN(int64_t bytes, t.Int(r, *c_in_bytes));
      if (bytes < 0) return t.Error(r, *c_in_bytes, "expected bytes >= 0");
      if (!c_in_site || t.field(r, *c_in_site).empty()) {
        return t.Error(r, *c_in_bytes, "an input needs input_site, the site that holds it");
      }
      std::optional<SiteId> site = fleet.FindSite(t.field(r, *c_in_site));
      if (!site) return t.Error(r, *c_in_site, "no such site in the fleet");
      task.inputs.push_back(model::ObjectRef{fmt::format("{}/{}.in", job.name, task.name), bytes, {*site}, {}});
    }
    afters[it->second].push_back(c_after ? spec::SplitList(t.field(r, *c_after), '|') : std::vector<std::string>{});
    rows_of[it->second].push_back(r);
    job.tasks.push_back(std::move(task));
  }
  // Dependencies name tasks of the same job; a task may only follow ones listed
  // before it, which also rules out cycles.
  for (size_t j = 0; j < jobs.size(); ++j) {
    for (size_t k = 0; k < jobs[j]->tasks.size(); ++k) {
      for (const std::string& dep : afters[j][k]) {
        const model::Task* d = jobs[j]->FindTask(dep);
        if (!d || d->id.value() >= k) {
          return t.Error(rows_of[j][k], *c_after,
                         fmt::format("'{}' is not a task listed earlier in job '{}'", dep, jobs[j]->name));
        }
        jobs[j]->tasks[k].after.push_back(d->id);
      }
    }
    trace.jobs[j].job = std::move(jobs[j]);
  }
  if (trace.jobs.empty()) return InvalidArgumentError(fmt::format("{}: no tasks", file));
  SortByArrival(&trace);
  return trace;
}

StatusOr<Trace> ParseGavelTrace(std::string_view text, const std::string& file,
                                const model::ThroughputTable& throughput) {
  // job_type, command, working_directory, num_steps_arg, needs_data_dir,
  // total_steps, scale_factor, priority_weight, SLO, arrival_time.
  constexpr size_t kFields = 10;
  Trace trace;
  trace.name = Stem(file);
  trace.format = "gavel";
  size_t line_no = 0;
  while (!text.empty()) {
    const size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    auto error = [&](std::string_view what) {
      return InvalidArgumentError(fmt::format("{}:{}: {}", file, line_no, what));
    };
    std::vector<std::string_view> f;
    for (size_t from = 0;;) {
      const size_t tab = line.find('\t', from);
      f.push_back(line.substr(from, tab == std::string_view::npos ? std::string_view::npos : tab - from));
      if (tab == std::string_view::npos || f.size() > kFields) break;
      from = tab + 1;
    }
    if (f.size() != kFields) {
      return error(fmt::format("expected {} tab-separated fields (Gavel's trace format), got {}", kFields, f.size()));
    }
    auto number = [&](std::string_view field, std::string_view name) -> StatusOr<double> {
      std::optional<double> v = spec::ParseFiniteDouble(field);
      if (!v) return error(fmt::format("{}: expected a number, got '{}'", name, field));
      return *v;
    };
    const std::string kind = spec::NormaliseGavelModel(f[0]);
    if (!throughput.HasKind(kind)) {
      return error(fmt::format("job type '{}': the throughput table has no kind '{}' (load Gavel's table in the fleet)",
                               f[0], kind));
    }
    MERIDIAN_ASSIGN_OR_RETURN(double steps, number(f[5], "total_steps"));
    MERIDIAN_ASSIGN_OR_RETURN(double scale, number(f[6], "scale_factor"));
    MERIDIAN_ASSIGN_OR_RETURN(double arrival_s, number(f[9], "arrival_time"));
    if (steps < 1 || steps > 1e15) return error(fmt::format("total_steps: expected 1 to 1e15, got '{}'", f[5]));
    if (scale < 1 || scale > 1024 || scale != std::floor(scale)) {
      return error(fmt::format("scale_factor: expected a whole number of GPUs from 1 to 1024, got '{}'", f[6]));
    }
    if (arrival_s < 0 || arrival_s > static_cast<double>(kMaxTraceSeconds)) {
      return error(fmt::format("arrival_time: expected seconds from 0 to {}, got '{}'", kMaxTraceSeconds, f[9]));
    }
    // Synchronous data parallelism: every replica takes each of the job's steps.
    const uint32_t id = static_cast<uint32_t>(trace.jobs.size());
    trace.jobs.push_back(TraceJob{static_cast<int64_t>(std::llround(arrival_s * kSecondUs)),
                                  ReplicaGang(id, fmt::format("{}-{}", kind, id), static_cast<int>(scale),
                                              model::WorkAmount{kind, steps}, throughput)});
  }
  if (trace.jobs.empty()) return InvalidArgumentError(fmt::format("{}: no jobs", file));
  SortByArrival(&trace);
  return trace;
}

StatusOr<Trace> LoadTrace(const std::string& path, TraceFormat format, const model::Fleet& fleet,
                          const model::ThroughputTable& throughput) {
  MERIDIAN_ASSIGN_OR_RETURN(std::string text, spec::ReadFileToString(path));
  if (format == TraceFormat::kAuto) {
    std::string_view head = std::string_view(text).substr(0, text.find('\n'));
    if (head.find("gpu_milli") != std::string_view::npos && head.find("num_gpu") != std::string_view::npos) {
      format = TraceFormat::kAlibaba;
    } else if (head.find("num_replicas") != std::string_view::npos) {
      format = TraceFormat::kSiaPhilly;
    } else if (head.find("arrival_s") != std::string_view::npos) {
      format = TraceFormat::kGeneric;
    } else if (std::count(head.begin(), head.end(), '\t') == 9) {
      format = TraceFormat::kGavel;  // no header: ten tab-separated fields
    } else {
      return InvalidArgumentError(fmt::format(
          "{}:1: cannot tell the trace format from the header; expected an Alibaba GPU 2023 pod list, a "
          "Sia/Philly workload, a Gavel trace or a Meridian CSV trace (docs/simulator.md)",
          path));
    }
  }
  switch (format) {
    case TraceFormat::kAlibaba: return ParseAlibabaPods(std::move(text), path);
    case TraceFormat::kSiaPhilly: return ParseSiaPhilly(std::move(text), path, throughput);
    case TraceFormat::kGavel: return ParseGavelTrace(text, path, throughput);
    default: return ParseGenericTrace(std::move(text), path, fleet);
  }
}

Trace ScaleJobs(const Trace& trace, int factor) {
  Trace out;
  out.name = factor == 1 ? trace.name : fmt::format("{}x{}", trace.name, factor);
  out.format = trace.format;
  out.timeless = trace.timeless;
  out.jobs.reserve(trace.jobs.size() * static_cast<size_t>(std::max(factor, 1)));
  for (const TraceJob& j : trace.jobs) {
    for (int k = 0; k < factor; ++k) out.jobs.push_back(j);
  }
  return out;
}

Trace FillTrace(const Trace& trace, int64_t capacity_gpu_milli, double target) {
  Trace out;
  out.name = fmt::format("{}-fill", trace.name);
  out.format = trace.format;
  const double goal = target * static_cast<double>(capacity_gpu_milli);
  double demand = 0;
  bool any_gpu = false;
  for (const TraceJob& j : trace.jobs) {
    for (const model::Task& t : j.job->tasks) any_gpu |= t.resources.device_count > 0;
  }
  if (!any_gpu || trace.jobs.empty()) return out;
  for (size_t k = 0; demand < goal; ++k) {
    const TraceJob& j = trace.jobs[k % trace.jobs.size()];
    for (const model::Task& t : j.job->tasks) {
      demand += static_cast<double>(t.resources.device_count) * t.resources.device_share_milli;
    }
    out.jobs.push_back(TraceJob{static_cast<int64_t>(k) * kSecondUs, j.job});
  }
  return out;
}

Trace SaturatingTrace(const Trace& trace, size_t jobs, double per_second, int64_t mean_run_us, uint64_t seed) {
  Trace out;
  out.name = fmt::format("{}-saturating", trace.name);
  out.format = trace.format;
  if (trace.jobs.empty() || per_second <= 0) return out;
  Random rng(seed);
  out.jobs.reserve(jobs);
  for (size_t k = 0; k < jobs; ++k) {
    auto job = std::make_shared<model::Job>(*trace.jobs[k % trace.jobs.size()].job);
    job->name = fmt::format("{}-{}", job->name, k);
    for (model::Task& t : job->tasks) {
      // Exponential by inversion; 1 - u is in (0, 1], so the log is finite.
      const double run = -std::log(1.0 - rng.UniformDouble()) * static_cast<double>(mean_run_us);
      t.duration_us = std::max<int64_t>(1, static_cast<int64_t>(run));
      t.work.reset();
    }
    out.jobs.push_back(TraceJob{static_cast<int64_t>(static_cast<double>(k) / per_second * kSecondUs), job});
  }
  return out;
}

}  // namespace meridian::sim
