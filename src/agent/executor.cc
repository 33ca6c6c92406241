#include "agent/executor.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>

#include "common/logging.h"
#include "common/net.h"
#include "common/parallel.h"
#include "common/subprocess.h"
#include "common/files.h"
#include "common/units.h"
#include "agent/gang.h"
#include "kernels/kernel.h"
#include "kernels/kernel_args.h"
#include "model/stream.h"

namespace meridian::agent {
namespace {

// Input objects fetched at once for one task.
constexpr size_t kMaxParallelFetches = 8;

// Where each running command is recorded (see KillRecordedProcessGroups).
std::string RecordsDir(const std::string& work_dir) { return work_dir + "/running"; }

// The cgroup tree of the agent working in `work_dir` (the same for its next
// incarnation, different for another agent on the machine).
std::string CgroupTreeName(const std::string& node, const std::string& work_dir) {
  std::string name = "meridian-agent-";
  for (char c : node) name.push_back(std::isalnum(static_cast<unsigned char>(c)) || c == '-' ? c : '_');
  std::error_code ec;
  const std::string dir = std::filesystem::weakly_canonical(work_dir, ec).string();
  return fmt::format("{}-{:016x}", name.substr(0, 64), std::hash<std::string>{}(ec ? work_dir : dir));
}

std::string EnvName(std::string_view arg) {
  std::string out = "MERIDIAN_ARG_";
  for (char c : arg) out.push_back(std::isalnum(static_cast<unsigned char>(c)) ? std::toupper(c) : '_');
  return out;
}

std::string Indices(const std::vector<int32_t>& devices) {
  std::string out;
  for (int32_t d : devices) out += (out.empty() ? "" : ",") + std::to_string(d);
  return out;
}

// Whether users other than its owner can reach (search) `path`: every directory on
// the way grants it to others.
bool OthersCanReach(const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::absolute(path, ec);
  for (; !p.empty(); p = p.parent_path()) {
    struct stat st {};
    if (stat(p.c_str(), &st) == 0 && (st.st_mode & S_IXOTH) == 0) return false;
    if (p == p.root_path()) break;
  }
  return true;
}

// A stream's state stays after it ended (its checkpoint says so: an attempt run again
// after one taken for lost had finished ends at once); an hour on it goes, swept when
// a stream starts on the node.
void SweepEndedStreams(const std::filesystem::path& root) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto hour_ago = fs::file_time_type::clock::now() - std::chrono::hours(1);
  for (const fs::directory_entry& e : fs::directory_iterator(root, ec)) {
    const fs::path checkpoint = e.path() / "checkpoint";
    std::error_code ignored;
    if (!e.is_directory(ignored) || e.is_symlink(ignored)) continue;
    const auto written = fs::last_write_time(checkpoint, ignored);
    if (ignored || written > hour_ago) continue;
    std::ifstream in(checkpoint, std::ios::binary);
    std::string first(256, '\0');
    in.read(first.data(), static_cast<std::streamsize>(first.size()));
    first.resize(static_cast<size_t>(in.gcount()));
    if (model::StreamCheckpointEnded(first.substr(0, first.find('\n')))) fs::remove_all(e.path(), ignored);
  }
}

// FNV-1a of the work directory's absolute path: what names the agent's directories
// outside it, so that an agent restarted in the same work directory finds them again.
uint64_t WorkDirHash(const std::string& work_dir) {
  const std::string abs = std::filesystem::absolute(work_dir).string();
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : abs) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Makes `dir` (0711: task users reach their own directories in it) unless it is there,
// and says whether it is a directory of ours, not a link: a name in a shared /tmp
// someone else may have taken first.
bool OwnDirectory(const std::filesystem::path& dir) {
  mkdir(dir.c_str(), 0711);
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid()) return false;
  chmod(dir.c_str(), 0711);
  return true;
}

// Executor::streams_root_: made here, or, for the one in /var/tmp, refused unless it
// is a directory of ours.
std::filesystem::path StreamsRoot(const std::string& work_dir, bool outside) {
  std::filesystem::path root = std::filesystem::path(work_dir) / "streams";
  if (outside) root = fmt::format("/var/tmp/meridian-streams-{}-{:016x}", geteuid(), WorkDirHash(work_dir));
  if (!OwnDirectory(root)) {
    MERIDIAN_LOG_WARN("stream state directory {} is not a directory of ours: stream tasks run without one",
                      root.string());
    return {};
  }
  return root;
}

// Removes what `dir` holds (not `dir`); says how many entries went (those that could
// not be removed are not counted).
int RemoveContents(const std::filesystem::path& dir) {
  std::error_code ec;
  std::vector<std::filesystem::path> entries;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    entries.push_back(it->path());
  }
  int removed = 0;
  for (const std::filesystem::path& e : entries) {
    std::filesystem::remove_all(e, ec);  // (uintmax_t(-1) on an error: not a count)
    removed += ec ? 0 : 1;
  }
  return removed;
}

}  // namespace

Executor::Executor(ExecutorOptions options, UpdateFn on_update)
    : options_(std::move(options)), on_update_(std::move(on_update)) {
  // Commands a previous incarnation of this agent started (it crashed, or was killed)
  // must not run on beside their re-runs.
  const std::string records = RecordsDir(options_.work_dir);
  if (int n = KillRecordedProcessGroups(records); n > 0) {
    MERIDIAN_LOG_WARN("ended {} task process groups left running by an earlier agent in {}", n, options_.work_dir);
  }
  if (options_.use_cgroups) {
    StatusOr<CgroupTree> tree = CgroupTree::Open(CgroupTreeName(options_.node_name, options_.work_dir));
    if (tree.ok()) {
      cgroups_.emplace(std::move(*tree));
      if (int left = cgroups_->KillAll(); left > 0) {
        MERIDIAN_LOG_WARN("killed what {} tasks of an earlier agent left running in {}", left, cgroups_->path());
      }
      MERIDIAN_LOG_INFO("commands run in cgroups under {}", cgroups_->path());
    } else {
      MERIDIAN_LOG_INFO("commands are contained by process groups: {}", tree.status().message());
    }
  }
  std::error_code ec;
  std::filesystem::create_directories(records, ec);
  tasks_root_ = std::filesystem::path(options_.work_dir) / "tasks";
  if (options_.task_uid_base > 0) {
    if (OthersCanReach(options_.work_dir)) {
      std::filesystem::create_directories(tasks_root_, ec);
      std::filesystem::permissions(tasks_root_, std::filesystem::perms::owner_all | std::filesystem::perms::group_exec |
                                                    std::filesystem::perms::others_exec,
                                   std::filesystem::perm_options::replace, ec);
    } else {
      const std::filesystem::path named = std::filesystem::temp_directory_path() /
                                          fmt::format("meridian-tasks-{}-{:016x}", geteuid(),
                                                      WorkDirHash(options_.work_dir));
      if (OwnDirectory(named)) {
        tasks_root_ = named;
        own_tasks_root_ = true;
      } else {
        MERIDIAN_LOG_WARN("{} is not a directory of ours: task directories go to one named at random",
                          named.string());
        std::string tmpl = (std::filesystem::temp_directory_path() / "meridian-tasks-XXXXXX").string();
        if (mkdtemp(tmpl.data()) != nullptr) {
          tasks_root_ = tmpl;
          own_tasks_root_ = true;
          chmod(tmpl.c_str(), 0711);
        }
      }
    }
    MERIDIAN_LOG_INFO("commands run as their tenant's user (uid {} and up), in {}", options_.task_uid_base,
                      tasks_root_.string());
  }
  // A task's directory goes when it ends, and the agent's own root when it stops; an
  // agent that was killed left them. Its tasks were ended above; this one has started
  // none yet.
  if (int left = RemoveContents(tasks_root_); left > 0) {
    MERIDIAN_LOG_WARN("removed {} task directories an earlier agent left in {}", left, tasks_root_.string());
  }
  streams_root_ = StreamsRoot(options_.work_dir, options_.task_uid_base > 0 && own_tasks_root_);
  if (options_.warm_python) {
    WarmPythonOptions warm;
    warm.log_path = options_.work_dir + "/warm-python.log";
    warm_python_ = std::make_unique<WarmPython>(std::move(warm));
  }
  int n = options_.kernel_threads > 0 ? options_.kernel_threads
                                      : std::max(2, static_cast<int>(std::thread::hardware_concurrency()));
  for (int i = 0; i < n; ++i) kernel_threads_.emplace_back([this] { KernelWorker(); });
}

Executor::~Executor() {
  std::map<model::TaskKey, std::thread> commands;
  std::vector<std::thread> finished;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    for (auto& [key, task] : running_) task->stop = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : kernel_threads_) t.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    commands.swap(command_threads_);
    finished.swap(finished_threads_);
  }
  for (auto& [key, t] : commands) t.join();
  for (std::thread& t : finished) t.join();
  if (cgroups_) cgroups_->Remove();  // every task's is gone: the tree is empty
  std::error_code ec;
  if (own_tasks_root_) std::filesystem::remove_all(tasks_root_, ec);
}

bool Executor::Start(const model::TaskAssignment& assignment) {
  auto task = std::make_shared<Running_>();
  task->assignment = assignment;
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_ || !running_.emplace(assignment.key, task).second) return false;
  if (!assignment.kernel.empty()) {
    kernel_queue_.push_back(task);
    work_cv_.notify_one();
    return true;
  }
  // Reap threads of commands that have finished.
  for (std::thread& t : finished_threads_) t.join();
  finished_threads_.clear();
  command_threads_.emplace(assignment.key, std::thread([this, task] { RunCommand(*task); }));
  return true;
}

void Executor::Cancel(const model::TaskKey& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = running_.find(key);
  if (it != running_.end()) it->second->stop = true;
}

std::vector<model::TaskKey> Executor::Running() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<model::TaskKey> out;
  for (const auto& [key, task] : running_) out.push_back(key);
  return out;
}

int64_t Executor::cpu_allocated_milli() const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t total = 0;
  for (const auto& [key, task] : running_) total += task->assignment.allocation.cpu_milli;
  return total;
}

void Executor::Finish(const model::TaskKey& key, model::TaskUpdate update) {
  // Reported before it leaves Running(): whoever reads Running() and then the
  // reports sees every attempt in at least one of them.
  on_update_(std::move(update));
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_.erase(key);
    auto it = command_threads_.find(key);
    if (it != command_threads_.end()) {
      finished_threads_.push_back(std::move(it->second));
      command_threads_.erase(it);
    }
  }
}

void Executor::KernelWorker() {
  while (true) {
    std::shared_ptr<Running_> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [this] { return stopping_ || !kernel_queue_.empty(); });
      if (kernel_queue_.empty()) return;  // stopping
      task = std::move(kernel_queue_.front());
      kernel_queue_.pop_front();
    }
    RunKernel(*task);
  }
}

std::vector<StatusOr<FetchedInput>> Executor::FetchAll(const std::vector<const model::ObjectLocation*>& objects,
                                                      const std::atomic<bool>& stop,
                                                      std::vector<std::vector<std::string>>& damaged) {
  std::vector<StatusOr<FetchedInput>> got(objects.size(), UnavailableError("not fetched"));
  std::vector<size_t> alone;  // indices for `fetch`, one object a call
  std::vector<std::optional<FetchedInput>> together;
  if (options_.fetch_together && objects.size() > 1) together = options_.fetch_together(objects, stop);
  for (size_t i = 0; i < objects.size(); ++i) {
    if (i < together.size() && together[i]) {
      got[i] = std::move(*together[i]);
    } else {
      alone.push_back(i);
    }
  }
  // Several at once: each fetch pays its link's round trip, and a merge of many parts
  // would otherwise pay them one after another.
  ParallelFor(alone.size(), kMaxParallelFetches, [&](size_t k) {
    const size_t i = alone[k];
    got[i] = options_.fetch(*objects[i], stop, &damaged[i]);
  });
  return got;
}

bool Executor::GatherInputs(Running_& task, const InputSink& sink, model::TaskUpdate& u, int64_t host_memory) {
  const model::TaskAssignment& a = task.assignment;
  // Refuses inputs of `bytes` (fetched or not) past host_memory.
  auto too_big = [&](int64_t bytes) {
    if (host_memory < 0 || bytes <= host_memory) return false;
    u.kind = model::UpdateKind::kFailed;
    u.reason = fmt::format(
        "kernel {}: {}", a.kernel,
        kernels::HostMemoryError(fmt::format("its inputs need {}", FormatBytes(bytes)), bytes, host_memory).message());
    return true;
  };
  // Hands one input to the sink; false, with the task failed saying why, when it
  // cannot be kept.
  auto place = [&](size_t slot, std::string_view data) {
    const Status kept = sink(slot, data);
    if (kept.ok()) return true;
    u.kind = model::UpdateKind::kFailed;
    u.exit_code = 127;
    u.reason = std::string(kept.message());
    return false;
  };
  struct Want {
    const model::ObjectLocation* object;
    std::string what;
    size_t slot;
  };
  std::vector<Want> wants;
  std::map<std::string, int64_t> inline_bytes;  // by the site that made them
  const size_t checkpoint_slot = a.input_objects.size() + a.inputs.size();
  if (!a.checkpoint.id.empty()) wants.push_back({&a.checkpoint, "its checkpoint", checkpoint_slot});
  for (size_t i = 0; i < a.input_objects.size(); ++i) {
    const model::ObjectLocation& o = a.input_objects[i];
    wants.push_back({&o, fmt::format("input {}", o.name.empty() ? o.id : o.name), i});
  }
  std::vector<size_t> whole;  // of a.inputs: those whole in the assignment
  int64_t held = 0;           // the inputs' bytes: those inline, then those fetched
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    const size_t slot = a.input_objects.size() + i;
    if (i < a.dep_objects.size() && !a.dep_objects[i].id.empty()) {
      wants.push_back({&a.dep_objects[i], fmt::format("the output of {}", a.dep_objects[i].name), slot});
      continue;
    }
    whole.push_back(i);
    held += static_cast<int64_t>(a.inputs[i].size());
    if (i < a.dep_objects.size() && !a.dep_objects[i].replicas.empty()) {
      const std::string& from = a.dep_objects[i].replicas.front().site;
      if (from != options_.site) inline_bytes[from] += static_cast<int64_t>(a.inputs[i].size());
    }
  }
  int64_t recorded = held;
  for (const Want& w : wants) recorded += std::max<int64_t>(w.object->size, 0);
  if (too_big(recorded)) return false;
  if (options_.pace_inline && !inline_bytes.empty()) options_.pace_inline(inline_bytes, task.stop);
  if (!wants.empty() && !options_.fetch) {
    u.kind = model::UpdateKind::kFailed;
    u.reason = "this agent cannot fetch input objects";
    return false;
  }
  std::vector<const model::ObjectLocation*> objects;
  for (const Want& w : wants) objects.push_back(w.object);
  std::vector<std::vector<std::string>> damaged(wants.size());
  std::vector<StatusOr<FetchedInput>> got =
      wants.empty() ? std::vector<StatusOr<FetchedInput>>() : FetchAll(objects, task.stop, damaged);
  for (const StatusOr<FetchedInput>& g : got) {
    if (!g.ok()) continue;
    held += static_cast<int64_t>(g->data.size());
    u.transfers.push_back(g->transfer);
  }
  if (too_big(held)) return false;  // larger than recorded: refused before it is kept
  std::string lost_reason, failed_reason;
  for (size_t i = 0; i < wants.size(); ++i) {
    if (got[i].ok()) continue;
    const Status& s = got[i].status();
    if (wants[i].object == &a.checkpoint && s.code() != StatusCode::kCancelled) {
      // A checkpoint saves work; without it the command starts afresh (or, in a gang,
      // from its peers), which beats not starting.
      MERIDIAN_LOG_WARN("task {}/{} attempt {} starts without its checkpoint: {}", a.key.job, a.key.task,
                        a.key.attempt, s.message());
      continue;
    }
    const std::string reason = fmt::format("{}: {}", wants[i].what, s.message());
    if (s.code() == StatusCode::kNotFound || s.code() == StatusCode::kDataLoss || s.code() == StatusCode::kUnavailable) {
      u.lost_inputs.push_back(model::LostInput{wants[i].object->id, damaged[i]});
      if (lost_reason.empty()) lost_reason = reason;
    } else if (s.code() != StatusCode::kCancelled && failed_reason.empty()) {
      failed_reason = reason;
    }
  }
  if (task.stop.load()) {
    u.kind = model::UpdateKind::kCancelled;
    u.reason = "cancelled before it started";
    u.lost_inputs.clear();
    return false;
  }
  if (!failed_reason.empty()) {
    u.kind = model::UpdateKind::kFailed;
    u.reason = failed_reason;
    u.lost_inputs.clear();
    return false;
  }
  if (!lost_reason.empty()) {
    // Not the task's doing: the coordinator finds the input again (another replica,
    // or its producer runs again) and runs this task once it is there.
    u.kind = model::UpdateKind::kCancelled;
    u.reason = fmt::format("input lost: {}", lost_reason);
    return false;
  }
  // All here: each goes to the sink straight from where it arrived (a pinned object
  // is not copied first).
  for (size_t i : whole) {
    if (!place(a.input_objects.size() + i, a.inputs[i])) return false;
  }
  for (size_t i = 0; i < wants.size(); ++i) {
    if (!got[i].ok()) continue;
    if (!place(wants[i].slot, got[i]->data)) return false;
    if (wants[i].object == &a.checkpoint) task.checkpoint_fetched = true;
  }
  return true;
}

void Executor::SettleOutput(std::string output, std::string_view what, model::TaskUpdate& u) {
  const size_t limit = options_.store_output ? model::kMaxObjectOutputBytes : model::kMaxTaskOutputBytes;
  if (output.size() > limit) {
    u.kind = model::UpdateKind::kFailed;
    u.reason = fmt::format("{} wrote {} of output; a task returns at most {}", what,
                           FormatBytes(static_cast<int64_t>(output.size())), FormatBytes(static_cast<int64_t>(limit)));
    return;
  }
  u.kind = model::UpdateKind::kSucceeded;
  u.output = std::move(output);
  StoreOutput(u);
  if (u.output_object.id.empty()) {
    if (u.output.size() > model::kMaxTaskOutputBytes) {
      u.kind = model::UpdateKind::kFailed;
      u.reason = fmt::format("{} wrote {} of output and this node could not keep it", what,
                             FormatBytes(static_cast<int64_t>(u.output.size())));
      u.output.clear();
    }
    return;
  }
  // The whole of it is the object; the report stays small whatever the task wrote.
  if (u.output.size() > model::kOutputPreviewBytes) u.output.resize(model::kOutputPreviewBytes);
}

void Executor::StoreOutput(model::TaskUpdate& u) {
  if (u.kind != model::UpdateKind::kSucceeded || u.output.empty() || !options_.store_output) return;
  StatusOr<model::HeldObject> o = options_.store_output(u.output);
  // Without it the output still travels inline: dependents read it from there.
  if (o.ok()) u.output_object = *o;
}

int64_t Executor::KernelMemory(const model::TaskAllocation& a) const {
  if (a.devices.empty()) return a.memory_bytes;
  auto it = options_.device_memory_bytes.find(a.devices.front());
  if (it == options_.device_memory_bytes.end()) return a.memory_bytes;
  const int64_t share = a.device_share_milli > 0 ? a.device_share_milli : 1000;
  return static_cast<int64_t>(static_cast<__int128>(it->second) * share / 1000);
}

void Executor::RunKernel(Running_& task) {
  const model::TaskAssignment& a = task.assignment;
  model::TaskUpdate u;
  u.key = a.key;
  const kernels::KernelInfo* kernel = kernels::FindKernel(a.kernel);
  // Kernels make no checkpoints: an earlier attempt's (none is expected) is dropped.
  std::vector<std::string> inputs(a.input_objects.size() + a.inputs.size());
  auto keep = [&inputs](size_t slot, std::string_view data) {
    if (slot < inputs.size()) inputs[slot] = std::string(data);
    return OkStatus();
  };
  // What the task may hold in the agent (kernels run in its process): its inputs and
  // the kernel's working set together.
  const int64_t host_memory =
      a.allocation.memory_bytes > 0 ? a.allocation.memory_bytes : kernels::kDefaultKernelMemoryBytes;
  if (task.stop.load()) {
    u.kind = model::UpdateKind::kCancelled;
    u.reason = "cancelled before it started";
  } else if (kernel == nullptr) {
    u.kind = model::UpdateKind::kFailed;
    u.reason = fmt::format("this agent has no kernel '{}'", a.kernel);
  } else if (GatherInputs(task, keep, u, host_memory)) {
    // A real GPU given to the task runs the kernel's compute; an emulated one does not.
    const int32_t gpu = options_.real_devices && !a.allocation.devices.empty() ? a.allocation.devices.front() : -1;
    StatusOr<std::string> out = kernel->run(
        kernels::KernelContext{a.args, inputs, a.index, task.stop, gpu, KernelMemory(a.allocation), host_memory});
    if (task.stop.load()) {
      u.kind = model::UpdateKind::kCancelled;
      u.reason = "cancelled while running";
    } else if (!out.ok()) {
      u.kind = model::UpdateKind::kFailed;
      u.reason = fmt::format("kernel {}: {}", a.kernel, out.status().message());
    } else {
      SettleOutput(std::move(*out), fmt::format("kernel {}", a.kernel), u);
    }
  }
  Finish(a.key, std::move(u));
}

int TaskUid(int base, const std::string& tenant) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : tenant) h = (h ^ c) * 1099511628211ull;
  return base + static_cast<int>(h % 100'000);
}

namespace {

// Writes `text` to a new file that only its owner may read.
bool WriteSecretFile(const std::filesystem::path& path, const std::string& text) {
  return WriteFileWhole(path, text, 0600).ok();
}

// A broker's credentials for a task, its own copies in the task's directory (they
// become the task's user's with it): STEM.password (0600) and STEM-ca.crt.
bool WriteBrokerFiles(const std::filesystem::path& dir, const std::string& stem, const SiteBroker& b) {
  if (!WriteSecretFile(dir / (stem + ".password"), b.password + "\n")) return false;
  return b.ca_pem.empty() || WriteFileWhole(dir / (stem + "-ca.crt"), b.ca_pem, 0644).ok();
}

// The variables that name them: PREFIX_URL, PREFIX_USER, PREFIX_PASSWORD_FILE and
// PREFIX_CA (stream/mqtt.h: MqttOptionsFromEnvironment).
void AddBrokerEnv(std::vector<std::string>& env, std::string_view prefix, const std::filesystem::path& dir,
                  const std::string& stem, const SiteBroker& b) {
  env.push_back(fmt::format("{}_URL={}", prefix, b.url));
  if (!b.user.empty()) env.push_back(fmt::format("{}_USER={}", prefix, b.user));
  env.push_back(fmt::format("{}_PASSWORD_FILE={}", prefix, (dir / (stem + ".password")).string()));
  if (!b.ca_pem.empty()) env.push_back(fmt::format("{}_CA={}", prefix, (dir / (stem + "-ca.crt")).string()));
}

// Hands `dir` and everything in it to `uid`, readable by it alone.
Status GiveDirectory(const std::filesystem::path& dir, int uid) {
  namespace fs = std::filesystem;
  std::error_code ec;
  auto give = [&](const fs::path& p) {
    return lchown(p.c_str(), static_cast<uid_t>(uid), static_cast<gid_t>(uid)) == 0;
  };
  if (!give(dir)) return UnavailableError(fmt::format("cannot give {} to uid {}: {}", dir.string(), uid, strerror(errno)));
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (!give(it->path())) return UnavailableError(fmt::format("cannot give {} to uid {}", it->path().string(), uid));
  }
  fs::permissions(dir, fs::perms::owner_all, fs::perm_options::replace, ec);
  if (ec) return UnavailableError(fmt::format("cannot restrict {}: {}", dir.string(), ec.message()));
  return OkStatus();
}

}  // namespace

void Executor::RunCommand(Running_& task) {
  const model::TaskAssignment& a = task.assignment;
  namespace fs = std::filesystem;
  model::TaskUpdate u;
  u.key = a.key;
  const fs::path dir = tasks_root_ /
                       fmt::format("{}-{}-{}", a.key.job, a.key.task, a.key.attempt);
  std::error_code ec;
  // A task that cannot start: its directory goes, and it fails saying why.
  auto refuse = [&](std::string why) {
    fs::remove_all(dir, ec);
    u.kind = model::UpdateKind::kFailed;
    u.exit_code = 127;
    u.reason = std::move(why);
    Finish(a.key, std::move(u));
  };
  fs::create_directories(dir / "inputs", ec);
  if (!ec) fs::create_directories(dir / "checkpoints", ec);
  if (ec) {
    refuse(fmt::format("cannot create {}: {}", dir.string(), ec.message()));
    return;
  }
  // Each input straight to its file (an earlier attempt's checkpoint to `checkpoint`),
  // every byte of it or the task does not start.
  const size_t input_count = a.input_objects.size() + a.inputs.size();
  auto write = [&](size_t slot, std::string_view data) {
    const fs::path path = slot < input_count ? dir / "inputs" / std::to_string(slot) : dir / "checkpoint";
    return WriteFileWhole(path, data, 0644)
        .WithPrefix(slot < input_count ? fmt::format("input {}", slot) : std::string("its checkpoint"));
  };
  if (!GatherInputs(task, write, u)) {
    fs::remove_all(dir, ec);
    Finish(a.key, std::move(u));
    return;
  }
  if (!a.gang.name.empty()) {
    if (Status written = WriteFileWhole(dir / "gang-peers", GangPeersText(a.gang), 0644); !written.ok()) {
      refuse(std::string(written.message()));
      return;
    }
  }
  const auto mqtt = a.env.find("MERIDIAN_MQTT");
  const bool wants_broker = mqtt != a.env.end() && mqtt->second == "site";
  if (wants_broker && !ec) {
    if (options_.site_broker.url.empty()) {
      refuse(fmt::format("the task asks for its site's MQTT broker (MERIDIAN_MQTT=site), but site '{}' has none "
                         "(meridian up starts one at each edge site)",
                         options_.site));
      return;
    }
    if (!WriteBrokerFiles(dir, "mqtt", options_.site_broker)) ec = std::make_error_code(std::errc::io_error);
  }
  // A stream whose sink is another site's broker: this site's user there, which may
  // publish only under sites/THIS_SITE/.
  const SiteBroker* sink_broker = nullptr;
  if (const auto sink = a.env.find("MERIDIAN_MQTT_SINK"); wants_broker && sink != a.env.end() && !ec) {
    const auto peer = options_.peer_brokers.find(sink->second);
    if (peer == options_.peer_brokers.end()) {
      refuse(fmt::format("the task's stream sends its results to site '{}' (MERIDIAN_MQTT_SINK), but this agent knows "
                         "no broker there (meridian up gives each edge site's agents the others' brokers: "
                         "--peer-broker)",
                         sink->second.substr(0, 128)));
      return;
    }
    sink_broker = &peer->second;
    if (!WriteBrokerFiles(dir, "mqtt-sink", *sink_broker)) ec = std::make_error_code(std::errc::io_error);
  }
  // A stream's state (its checkpoint and ingest log) outlives the attempt: the next
  // one on this node restores it. The first attempt starts with none.
  fs::path stream_state;
  if (wants_broker && !ec && !streams_root_.empty()) {
    stream_state = streams_root_ / fmt::format("{}-{}", a.key.job, a.key.task);
    if (a.key.attempt <= 1) {
      fs::remove_all(stream_state, ec);
      SweepEndedStreams(streams_root_);
    }
    if (!ec) fs::create_directories(stream_state, ec);
    if (!ec) fs::permissions(stream_state, fs::perms::owner_all, fs::perm_options::replace, ec);
  }
  ProcessOptions p;
  // Its tenant's user, not ours: it cannot read other tenants' task directories, nor
  // the agent's keys; and no core dumps of what it held.
  p.rlimits.emplace_back(RLIMIT_CORE, 0);
  if (options_.task_uid_base > 0 && !ec) {
    p.uid = p.gid = TaskUid(options_.task_uid_base, a.tenant);
    p.rlimits.emplace_back(RLIMIT_NPROC, 4096);
    Status given = GiveDirectory(dir, p.uid);
    if (given.ok() && !stream_state.empty()) given = GiveDirectory(stream_state, p.uid);
    if (!given.ok()) {
      refuse(given.message());
      return;
    }
  }
  p.memory_max_bytes = a.allocation.memory_bytes;
  p.cpu_max_milli = a.allocation.cpu_milli;
  p.argv = a.command;
  p.cwd = dir.string();
  p.timeout_us = a.timeout_us;
  p.stop_grace_us = a.stop_grace_us;
  // Its stdout is its output: read up to what a task may return, and a program that
  // writes more fails with that said (never a silently cut output).
  const size_t output_limit = options_.store_output ? model::kMaxObjectOutputBytes : model::kMaxTaskOutputBytes;
  p.max_stdout_head = output_limit;
  p.max_tail = model::kMaxTaskLogTailBytes;
  p.record_file = fmt::format("{}/{}-{}-{}", RecordsDir(options_.work_dir), a.key.job, a.key.task, a.key.attempt);
  if (cgroups_) p.cgroup = cgroups_->TaskCgroup(fmt::format("task-{}-{}-{}", a.key.job, a.key.task, a.key.attempt));
  // The agent's environment without its own settings (a token, certificates' places),
  // nor what the spec's `env` sets instead.
  for (std::string& e : CurrentEnvironment()) {
    if (e.rfind("MERIDIAN_", 0) == 0 || e.rfind("HOME=", 0) == 0) continue;
    if (a.env.count(e.substr(0, e.find('='))) > 0) continue;
    p.env.push_back(std::move(e));
  }
  for (const auto& [k, v] : a.env) p.env.push_back(k + "=" + v);
  p.env.push_back("HOME=" + dir.string());
  const std::string devices = Indices(a.allocation.devices);
  p.env.push_back(fmt::format("MERIDIAN_JOB_ID={}", a.key.job));
  p.env.push_back(fmt::format("MERIDIAN_JOB_NAME={}", a.job_name));
  p.env.push_back(fmt::format("MERIDIAN_TASK={}", a.task_name));
  p.env.push_back(fmt::format("MERIDIAN_TASK_INDEX={}", a.index));
  p.env.push_back(fmt::format("MERIDIAN_ATTEMPT={}", a.key.attempt));
  // This program, for commands that call on it (`meridian gang mpirun`).
  static const std::string self = [] {
    std::error_code ignored;
    return fs::read_symlink("/proc/self/exe", ignored).string();
  }();
  p.env.push_back("MERIDIAN_BIN=" + self);
  p.env.push_back(fmt::format("MERIDIAN_NODE={}", options_.node_name));
  p.env.push_back(fmt::format("MERIDIAN_SITE={}", options_.site));
  p.env.push_back(fmt::format("MERIDIAN_CPU_MILLI={}", a.allocation.cpu_milli));
  p.env.push_back(fmt::format("MERIDIAN_INPUTS={}", (dir / "inputs").string()));
  p.env.push_back(fmt::format("MERIDIAN_INPUT_COUNT={}", input_count));
  // Where it may leave a checkpoint (a file `checkpoint`, renamed into place whole),
  // which the agent keeps as an object; and the one an earlier attempt left, if any.
  p.env.push_back(fmt::format("MERIDIAN_CHECKPOINT_DIR={}", (dir / "checkpoints").string()));
  if (task.checkpoint_fetched) p.env.push_back(fmt::format("MERIDIAN_CHECKPOINT={}", (dir / "checkpoint").string()));
  if (wants_broker) {
    AddBrokerEnv(p.env, "MERIDIAN_MQTT", dir, "mqtt", options_.site_broker);
    if (!stream_state.empty()) p.env.push_back("MERIDIAN_STREAM_STATE_DIR=" + stream_state.string());
  }
  if (sink_broker != nullptr) AddBrokerEnv(p.env, "MERIDIAN_MQTT_SINK", dir, "mqtt-sink", *sink_broker);
  p.env.push_back(fmt::format("MERIDIAN_DEVICE_TYPE={}", a.device_type));
  p.env.push_back(fmt::format("MERIDIAN_DEVICES={}", devices));
  // Emulated devices are not GPUs the program could open: it sees none.
  p.env.push_back(fmt::format("CUDA_VISIBLE_DEVICES={}", options_.real_devices ? devices : ""));
  p.env.push_back(fmt::format("MERIDIAN_EMULATED={}", options_.real_devices || devices.empty() ? 0 : 1));
  for (const auto& [k, v] : a.args) p.env.push_back(EnvName(k) + "=" + v);
  if (!a.gang.name.empty() && !ec) {
    // A gang member: its rank and peers, and for rank 0 a MASTER_PORT free here. A
    // port taken by someone else is not the task's fault: the attempt is stopped, not
    // failed, and the gang runs again with another.
    StatusOr<std::vector<std::string>> gang_env = GangEnvironment(a.gang);
    Status port = gang_env.ok() && a.gang.rank == 0 ? CheckPortFree(a.gang.master_port) : OkStatus();
    if (!gang_env.ok() || !port.ok()) {
      fs::remove_all(dir, ec);
      u.kind = gang_env.ok() ? model::UpdateKind::kCancelled : model::UpdateKind::kFailed;
      u.exit_code = gang_env.ok() ? 0 : 127;
      u.reason = gang_env.ok() ? port.message() : gang_env.status().message();
      Finish(a.key, std::move(u));
      return;
    }
    for (std::string& e : *gang_env) p.env.push_back(std::move(e));
    p.env.push_back("MERIDIAN_GANG_SECRET=" + a.gang.secret);
    p.env.push_back(fmt::format("MERIDIAN_GANG_PEERS={}", (dir / "gang-peers").string()));
  }

  model::TaskUpdate running;
  running.key = a.key;
  running.kind = model::UpdateKind::kRunning;
  on_update_(std::move(running));
  // Its output as it comes (`job logs -f`): a report of what is new, at most one a
  // second, which the agent sends with its next heartbeat.
  p.output_interval_us = options_.live_output_interval_us;
  p.on_output = [this, key = a.key](const OutputSoFar& o) {
    model::TaskUpdate live;
    live.key = key;
    live.kind = model::UpdateKind::kRunning;
    live.stdout_tail = o.stdout_new;
    live.stderr_tail = o.stderr_new;
    live.stdout_bytes = o.stdout_bytes;
    live.stderr_bytes = o.stderr_bytes;
    on_update_(std::move(live));
  };
  CheckpointWatch watch;
  watch.dir = dir.string();
  watch.uid = p.uid >= 0 ? p.uid : -1;
  if (options_.store_output) p.on_interval = [this, &watch, key = a.key] { CollectCheckpoint(key, watch); };
  if (warm_python_ && !ec) p.launcher = warm_python_->LauncherFor(p);
  StatusOr<ProcessResult> r = ec ? StatusOr<ProcessResult>(UnavailableError(
                                       fmt::format("cannot create {}: {}", dir.string(), ec.message())))
                                 : RunProcess(p, task.stop);
  if (!r.ok() && p.launcher) {
    // The warm interpreter could not start it (none of the script ran): a cold one does.
    MERIDIAN_LOG_WARN("task {}/{} attempt {} starts cold: {}", a.key.job, a.key.task, a.key.attempt,
                      r.status().message());
    p.launcher = nullptr;
    r = RunProcess(p, task.stop);
  }
  if (!r.ok()) {
    u.kind = model::UpdateKind::kFailed;
    u.exit_code = 127;
    u.reason = r.status().message();
  } else {
    u.stdout_tail = r->stdout_tail;
    u.stderr_tail = r->stderr_tail;
    u.stdout_bytes = r->stdout_bytes;
    u.stderr_bytes = r->stderr_bytes;
    u.exit_code = r->exit_code;
    if (r->stopped) {
      u.kind = model::UpdateKind::kCancelled;
      u.reason = "killed on cancel";
    } else if (r->timed_out) {
      u.kind = model::UpdateKind::kFailed;
      u.reason = fmt::format("timed out after {}; killed", FormatDurationUs(a.timeout_us));
    } else if (r->signal != 0) {
      u.kind = model::UpdateKind::kFailed;
      u.reason = fmt::format("killed by signal {} ({})", r->signal, strsignal(r->signal));
    } else if (r->exit_code != 0) {
      u.kind = model::UpdateKind::kFailed;
      u.reason = fmt::format("exit code {}", r->exit_code);
    } else if (r->stdout_truncated) {
      u.kind = model::UpdateKind::kFailed;
      u.reason = fmt::format("wrote more than {} to stdout; a task returns at most that (write larger results "
                             "to a file and put it as an object)",
                             FormatBytes(static_cast<int64_t>(output_limit)));
    } else {
      SettleOutput(std::move(r->stdout_head), "the command", u);
    }
  }
  // The last checkpoint it wrote, before its directory goes: a retry resumes from it.
  if (options_.store_output && r.ok()) CollectCheckpoint(a.key, watch);
  fs::remove_all(dir, ec);
  Finish(a.key, std::move(u));
}

void Executor::CollectCheckpoint(const model::TaskKey& key, CheckpointWatch& watch) {
  // The command owns its directory and could put a link where the file should be:
  // every step opens without following links, and only a regular file of the task's
  // own user is read (never something of the agent's it points at).
  const int task_dir = open(watch.dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (task_dir < 0) return;
  const int checkpoints = openat(task_dir, "checkpoints", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  close(task_dir);
  if (checkpoints < 0) return;
  const int fd = openat(checkpoints, "checkpoint", O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  close(checkpoints);
  if (fd < 0) return;
  struct stat st = {};
  auto same = [&](const struct stat& a) {
    return a.st_ino == st.st_ino && a.st_size == st.st_size && a.st_mtim.tv_sec == st.st_mtim.tv_sec &&
           a.st_mtim.tv_nsec == st.st_mtim.tv_nsec;
  };
  if (fstat(fd, &st) != 0 || (watch.seen_any && same(watch.seen))) {
    close(fd);
    return;
  }
  watch.seen = st;
  watch.seen_any = true;
  std::string refused;
  if (!S_ISREG(st.st_mode)) {
    refused = "it is not a regular file";
  } else if (watch.uid >= 0 && st.st_uid != static_cast<uid_t>(watch.uid)) {
    refused = fmt::format("it belongs to uid {}, not the task's", st.st_uid);
  } else if (st.st_size > model::kMaxCheckpointBytes) {
    refused = fmt::format("it is {}; a checkpoint is kept up to {}", FormatBytes(st.st_size),
                          FormatBytes(model::kMaxCheckpointBytes));
  }
  std::string bytes;
  if (refused.empty()) {
    bytes.resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < bytes.size()) {
      const ssize_t n = read(fd, bytes.data() + got, bytes.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    if (got != bytes.size()) refused = "it could not be read whole";
  }
  close(fd);
  model::TaskUpdate live;
  live.key = key;
  live.kind = model::UpdateKind::kRunning;
  if (refused.empty()) {
    StatusOr<model::HeldObject> held = options_.store_output(bytes);
    if (held.ok()) {
      if (!watch.held.empty() && options_.release_object) options_.release_object(watch.held);
      watch.held = held->id;
      live.checkpoint = *held;
      MERIDIAN_LOG_INFO("task {}/{} attempt {}: checkpoint {} ({}) kept", key.job, key.task, key.attempt,
                        held->id.substr(0, 12), FormatBytes(held->size));
      on_update_(std::move(live));
      return;
    }
    refused = held.status().message();
  }
  MERIDIAN_LOG_WARN("task {}/{} attempt {}: its checkpoint is not kept: {}", key.job, key.task, key.attempt, refused);
}

}  // namespace meridian::agent
