// The executor: runs the tasks assigned to one node, as many at once as they were
// given resources for. Built-in kernels run on a pool of threads; commands run as
// child processes, each watched by a thread of its own. Every task ends in exactly
// one final update (succeeded, failed or cancelled) passed to `on_update`.
//
// Thread-safety: all methods may be called from any thread. `on_update` is called
// from the executor's threads, never with the executor's lock held.
#pragma once

#include <sys/stat.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/cgroup.h"
#include "common/status.h"
#include "model/run_state.h"
#include "agent/warm_python.h"

namespace meridian::agent {

// An input object fetched (or found) on this node for a task: its bytes, held until
// the task ends, and the transfer it took.
struct FetchedInput {
  std::shared_ptr<void> keep;  // keeps `data` valid (a pinned object)
  std::string_view data;
  model::InputTransfer transfer;
};
// Brings one input object here from one of its replicas, giving up with kCancelled
// once `stop` is set. On failure `damaged_nodes` names the holders whose copies were
// missing or damaged. kNotFound, kDataLoss and kUnavailable mean the input is lost
// (no replica could be read), which is not the task's fault.
using FetchFn = std::function<StatusOr<FetchedInput>(const model::ObjectLocation& object, const std::atomic<bool>& stop,
                                                     std::vector<std::string>* damaged_nodes)>;
// Brings several input objects here at once where that is cheaper than one by one
// (small ones from one holder: one round trip for all). Result i is objects[i] here,
// or empty for those left to FetchFn (fetched one by one, which retries and reports
// damaged copies).
using FetchTogetherFn = std::function<std::vector<std::optional<FetchedInput>>(
    const std::vector<const model::ObjectLocation*>& objects, const std::atomic<bool>& stop)>;
// Waits while inputs that came whole in the assignment cross the emulated links from
// the sites that made them (bytes by site), giving up once `stop` is set.
using PaceFn = std::function<void(const std::map<std::string, int64_t>& bytes_from_site, const std::atomic<bool>& stop)>;
// Keeps a task's output as an object on this node (for the tasks that read it).
using StoreFn = std::function<StatusOr<model::HeldObject>(const std::string& output)>;

// The MQTT broker of the node's site (an edge site's, started by `meridian up`;
// docs/streams.md). A command whose spec sets MERIDIAN_MQTT=site gets its address
// (MERIDIAN_MQTT_URL), the user, the password as a file of its own
// (MERIDIAN_MQTT_PASSWORD_FILE) and the CA (MERIDIAN_MQTT_CA) for mqtts.
struct SiteBroker {
  std::string url;  // empty: the site has none
  std::string user;
  std::string password;
  std::string ca_pem;
};

struct ExecutorOptions {
  std::string work_dir;              // task directories go under work_dir/tasks/
  std::string node_name;
  std::string site;
  bool real_devices = false;         // the node's devices are real GPUs (else emulated)
  int kernel_threads = 0;            // 0: one per hardware thread, at least 2
  FetchFn fetch;                     // brings input objects here; none: tasks with some fail
  StoreFn store_output;              // none: outputs travel inline only
  FetchTogetherFn fetch_together = {};  // none: every input is fetched by `fetch`
  PaceFn pace_inline = {};              // none: inputs in the assignment take no time
  // Run each command in a cgroup v2 of its own where the machine allows (else its
  // process group is what contains it).
  bool use_cgroups = true;
  // Commands run as an unprivileged user of their job's tenant: uid and gid
  // task_uid_base + a hash of the tenant's name modulo 100,000, their task directory
  // that user's alone (0700). 0: as the agent's user (the agent must be root to switch).
  int task_uid_base = 0;
  // Each device's memory, by its index on the node: what a kernel given the device may
  // hold (KernelContext::memory_bytes).
  std::map<int32_t, int64_t> device_memory_bytes = {};
  // How often a running command's new output is reported (live logs), and how often
  // its checkpoint file is looked at.
  int64_t live_output_interval_us = 1'000'000;
  // Drops the reference store_output took on an object (a checkpoint superseded by a
  // newer one of the same attempt); none: superseded checkpoints stay stored.
  std::function<void(const std::string& id)> release_object = {};
  // Python scripts (`python SCRIPT.py ...`, a remote function's task) fork from a warm
  // interpreter (warm_python.h) instead of starting one each; false: each starts cold.
  bool warm_python = true;
  SiteBroker site_broker = {};
  // Other sites' brokers, by site, for a stream whose sink is there (its spec's
  // `sink: {site: X}`; the task's MERIDIAN_MQTT_SINK=X). The user is this site's at
  // that broker, which may only publish under sites/THIS_SITE/ (docs/streams.md).
  std::map<std::string, SiteBroker> peer_brokers = {};
};

// The uid (and gid) commands of `tenant` run as, under `base`.
int TaskUid(int base, const std::string& tenant);

class Executor {
 public:
  using UpdateFn = std::function<void(model::TaskUpdate)>;
  Executor(ExecutorOptions options, UpdateFn on_update);
  // Stops what runs (reporting it cancelled) and waits for its threads.
  ~Executor();

  // Starts the attempt unless it is already here; returns false for a duplicate.
  bool Start(const model::TaskAssignment& assignment);
  // Stops the attempt; it reports cancelled. Unknown keys are ignored.
  void Cancel(const model::TaskKey& key);
  std::vector<model::TaskKey> Running() const;
  int64_t cpu_allocated_milli() const;
  // Commands started in a warm Python interpreter so far.
  int64_t warm_python_starts() const { return warm_python_ ? warm_python_->warm_starts() : 0; }
  // Where task directories go (below).
  const std::filesystem::path& tasks_root() const { return tasks_root_; }

 private:
  struct Running_ {
    model::TaskAssignment assignment;
    std::atomic<bool> stop{false};
    bool checkpoint_fetched = false;  // assignment.checkpoint is the last of the inputs
  };
  void KernelWorker();
  void RunKernel(Running_& task);
  // What a kernel with this allocation may hold (KernelContext::memory_bytes).
  int64_t KernelMemory(const model::TaskAllocation& a) const;
  void RunCommand(Running_& task);
  // What RunCommand knows of its command's checkpoint file.
  struct CheckpointWatch {
    std::string dir;       // the task's directory
    int uid = -1;          // the owner the file must have (-1: any)
    struct stat seen = {};  // the file last collected (or refused), by inode, size and time
    bool seen_any = false;
    std::string held;      // the object id of the newest one kept
  };
  // Keeps the command's checkpoint as an object when it changed since the last look,
  // and reports it (an update of the running attempt); releases the one it replaces.
  void CollectCheckpoint(const model::TaskKey& key, CheckpointWatch& watch);
  // The task's inputs: its input objects then its dependencies' outputs, fetching
  // those that are objects several at a time. False when the task cannot run, with
  // `u` saying why: cancelled, failed, or cancelled with `lost_inputs` when an input
  // could not be read from any replica. `u.transfers` says what moved either way.
  // Once all are here, each goes to `sink` straight from where it arrived: slot i for
  // the task's input objects then its dependencies' outputs, and an earlier attempt's
  // checkpoint (when it could be read) after them; a sink's error fails the task.
  // A kernel's inputs are held in the agent's memory: past `host_memory` bytes (-1:
  // no bound) the task fails, by their recorded sizes before any is fetched and by
  // what arrived before it is kept.
  using InputSink = std::function<Status(size_t slot, std::string_view data)>;
  bool GatherInputs(Running_& task, const InputSink& sink, model::TaskUpdate& u, int64_t host_memory = -1);
  // Each object here: small ones together where fetch_together can, the rest one a
  // call, several at once. damaged[i] gets the holders found bad for objects[i].
  std::vector<StatusOr<FetchedInput>> FetchAll(const std::vector<const model::ObjectLocation*>& objects,
                                               const std::atomic<bool>& stop,
                                               std::vector<std::vector<std::string>>& damaged);
  void Finish(const model::TaskKey& key, model::TaskUpdate update);
  // What a successful output becomes, for kernels and commands alike: refused past
  // the limit, kept as an object on this node (the report carries its first
  // kOutputPreviewBytes), or, where the node keeps no objects, carried whole.
  void SettleOutput(std::string output, std::string_view what, model::TaskUpdate& u);
  // A successful non-empty output goes into the node's store too.
  void StoreOutput(model::TaskUpdate& u);

  const ExecutorOptions options_;
  const UpdateFn on_update_;
  std::optional<CgroupTree> cgroups_;  // set once in the constructor
  std::unique_ptr<WarmPython> warm_python_;  // set once in the constructor, when options_.warm_python
  // Where task directories go: work_dir/tasks, or, when tasks run as other users
  // who cannot reach work_dir (under a home directory of mode 0700), a directory of
  // the agent's own in /tmp named after work_dir (removed with the executor; a
  // restarted agent finds it again), or one named at random when that name is taken
  // by someone else. What an earlier agent left in it (killed, it removed nothing) is
  // removed when the executor starts, after its tasks were ended.
  std::filesystem::path tasks_root_;
  bool own_tasks_root_ = false;
  // Where stream tasks keep their state across attempts on this node
  // (MERIDIAN_STREAM_STATE_DIR, docs/streams.md): work_dir/streams, or, when tasks run as
  // other users who cannot reach work_dir, a directory of the agent's own in /var/tmp
  // named after work_dir (so that a restarted agent finds it again).
  std::filesystem::path streams_root_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;
  bool stopping_ = false;                                        // GUARDED_BY(mu_)
  std::map<model::TaskKey, std::shared_ptr<Running_>> running_;  // GUARDED_BY(mu_)
  std::deque<std::shared_ptr<Running_>> kernel_queue_;           // GUARDED_BY(mu_)
  std::vector<std::thread> kernel_threads_;
  std::map<model::TaskKey, std::thread> command_threads_;        // GUARDED_BY(mu_)
  std::vector<std::thread> finished_threads_;                    // GUARDED_BY(mu_); joined later
};

}  // namespace meridian::agent
