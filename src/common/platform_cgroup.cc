// cgroup v2 through its file system: /proc/self/mountinfo for where it is mounted,
// /proc/self/cgroup for this process's place in it, cgroup.kill to end a cgroup.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "common/cgroup.h"

namespace meridian {
namespace {

namespace fs = std::filesystem;

// Where the cgroup2 file system is mounted; empty if it is not.
std::string Cgroup2Mount() {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    // id parent major:minor root mount-point options [optional...] - fstype source ...
    size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream tail(line.substr(dash + 3));
    std::string fstype;
    tail >> fstype;
    if (fstype != "cgroup2") continue;
    std::istringstream head(line.substr(0, dash));
    std::string field, mount;
    for (int i = 0; i < 5 && head >> field; ++i) mount = field;
    return mount;
  }
  return "";
}

// This process's cgroup v2 path ("0::/a/b" in /proc/self/cgroup).
std::string OwnCgroup() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  }
  return "";
}

bool Populated(const std::string& dir) {
  std::ifstream in(dir + "/cgroup.events");
  std::string key, value;
  while (in >> key >> value) {
    if (key == "populated") return value != "0";
  }
  return false;
}

}  // namespace

StatusOr<CgroupTree> CgroupTree::Open(const std::string& name) {
  const std::string mount = Cgroup2Mount();
  if (mount.empty()) return UnavailableError("no cgroup2 file system is mounted");
  const std::string own = OwnCgroup();
  const fs::path path = fs::path(mount) / fs::path(own).relative_path() / name;
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) return UnavailableError(fmt::format("cannot create cgroup {}: {}", path.string(), ec.message()));
  if (access((path / "cgroup.procs").c_str(), W_OK) != 0 || access((path / "cgroup.kill").c_str(), W_OK) != 0) {
    return UnavailableError(fmt::format("cgroup {} cannot be written to (or has no cgroup.kill)", path.string()));
  }
  // Tasks' memory and CPU limits need those controllers in the tree's cgroups: ask
  // for them where the parent offers them (it does not when it holds processes
  // itself, as a service's own cgroup does; then tasks are contained, not limited).
  for (const char* controller : {"+memory", "+cpu"}) {
    std::ofstream(path / "cgroup.subtree_control") << controller;
  }
  return CgroupTree(path.string());
}

bool CgroupTree::CanLimit() const {
  std::ifstream in(fs::path(path_) / "cgroup.subtree_control");
  std::string have((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return have.find("memory") != std::string::npos && have.find("cpu") != std::string::npos;
}

int CgroupTree::KillAll() const {
  int held = 0;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(path_, ec)) {
    if (e.is_directory(ec) && KillAndRemoveCgroup(e.path().string())) ++held;
  }
  return held;
}

void CgroupTree::Remove() const {
  KillAll();
  rmdir(path_.c_str());
}

bool KillAndRemoveCgroup(const std::string& dir) {
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0) return false;
  const bool held = Populated(dir);
  if (held) {
    std::ofstream(dir + "/cgroup.kill") << "1";
    for (int i = 0; i < 200 && Populated(dir); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  rmdir(dir.c_str());
  return held;
}

}  // namespace meridian
