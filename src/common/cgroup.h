// Containing task processes with cgroup v2, where the machine mounts a cgroup2 file
// system this process may write to. Each task runs in a cgroup of its own inside a
// tree that belongs to its agent, so everything the task started (daemons that left
// its process group too) is found and killed when it ends, and an agent that starts
// after a crash kills what its tasks left behind. Where cgroup v2 cannot be used,
// process groups and the parent-death signal (subprocess.h) are what contain tasks.
//
// Thread-safety: a CgroupTree is immutable once open; its calls and
// KillAndRemoveCgroup may run on several threads at once.
#pragma once

#include <string>

#include "common/status.h"

namespace meridian {

class CgroupTree {
 public:
  // The tree `name` inside this process's own cgroup, created if missing.
  // Unavailable, saying why, where cgroup v2 is not mounted or not writable here.
  static StatusOr<CgroupTree> Open(const std::string& name);

  const std::string& path() const { return path_; }
  // A task's cgroup in the tree (created by RunProcess when it starts the task).
  std::string TaskCgroup(const std::string& task) const { return path_ + "/" + task; }
  // Kills the processes in every cgroup of the tree and removes those cgroups;
  // returns how many held processes.
  int KillAll() const;
  // Removes the tree itself (once empty): for tests.
  void Remove() const;
  // Whether tasks' cgroups get the memory and cpu controllers (memory.max, cpu.max).
  bool CanLimit() const;

 private:
  explicit CgroupTree(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

// Kills every process in the cgroup at `dir`, waits (up to 2 s) until it is empty
// and removes it. Returns whether it held processes. Nothing to do if it is missing.
bool KillAndRemoveCgroup(const std::string& dir);

}  // namespace meridian
