// Emulated WAN links shared by every sender on them. A link between two sites has one
// bandwidth, whoever sends: the transfer servers of all agents at a site (separate
// processes on a local cluster) take turns on one clock per (from, to) site pair.
// The clocks live in a small file that every agent of the cluster maps; without one,
// in this process's memory (one agent's senders share them).
//
// Thread-safety: any number of threads and processes may pace on one table at once
// (lock-free atomics in shared memory).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace meridian::objects {

class LinkClocks {
 public:
  // Maps `path` (created when missing) or, with an empty path, private memory.
  static StatusOr<std::unique_ptr<LinkClocks>> Open(const std::string& path);
  ~LinkClocks();
  LinkClocks(const LinkClocks&) = delete;
  LinkClocks& operator=(const LinkClocks&) = delete;

  // Books `bytes` on the link from `from` to `to` at `bandwidth_bps` and returns the
  // monotonic time (microseconds, the clock every process shares) at which they
  // have crossed it: after everything booked on the link before them.
  int64_t Book(std::string_view from, std::string_view to, int64_t bytes, int64_t bandwidth_bps, int64_t now_us);

  static constexpr size_t kSlots = 256;  // site pairs one table holds

 private:
  struct Slot;
  LinkClocks(Slot* slots, bool shared) : slots_(slots), shared_(shared) {}
  Slot* slots_;
  bool shared_;
};

}  // namespace meridian::objects
