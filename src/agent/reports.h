// Reports: what an agent has to tell the coordinator about its attempts, kept until
// the coordinator acknowledges it. The newest report of each attempt is kept (a
// running attempt's output so far is merged into the next); reports travel in
// heartbeats, ended attempts first, and in a registration, which acknowledges every
// ended attempt it carries. This is the agent's side of the report protocol, shared by
// the real agent and the deterministic simulation (src/vopr), which plays agents with
// it over a simulated network.
//
// Thread-safety: none; the real agent holds its lock around every call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <utility>
#include <vector>

#include "model/run_state.h"

namespace meridian::agent {

// Reports ride in heartbeats and registrations. Each message carries at most this
// much of them, and at most this many object changes; the rest go in the next
// heartbeat, sent at once. So no amount of output, nor of reports saved up while the
// coordinator was away, makes a message too large to deliver (the limit is 16 MiB).
inline constexpr size_t kMaxReportBytesPerMessage = 4 << 20;
inline constexpr size_t kMaxObjectChangesPerMessage = 20'000;

// An object a node gained (added) or dropped, in the order the changes happened.
struct ObjectChange {
  model::HeldObject object;
  bool added = false;
};

// What the first `n` of `changes` come to, each object once, as its last change left
// it: the heartbeat's objects_added and objects_removed. Two lists lose the order, and
// the coordinator applies the adds first: an object dropped and put again before a
// heartbeat would otherwise vanish from the directory while the node holds it.
void NetObjectChanges(const std::deque<ObjectChange>& changes, size_t n, model::AgentHeartbeat& hb);

// About how many bytes a report takes in a message.
size_t ReportBytes(const model::TaskUpdate& u);

class Reports {
 public:
  // The reports a heartbeat carried: acknowledged when it is answered.
  using Sent = std::vector<std::pair<model::TaskKey, uint64_t>>;

  // Keeps `update` as its attempt's newest report. A running report after the attempt
  // ended is dropped; one after an unacknowledged running report carries the output
  // of both (the newest part of it: a log is a tail), since the coordinator skips
  // what it has.
  void Add(model::TaskUpdate update);
  // Whether the attempt ended here and waits for acknowledgement (an assignment of it
  // that comes again is not started again).
  bool Ended(const model::TaskKey& key) const;
  // Whether some attempt ended and is not acknowledged (a heartbeat is due at once).
  bool AnyEnded() const;
  size_t size() const { return pending_.size(); }

  // Fills a registration's unacked with ended attempts, up to the message bound; those
  // past it go to `running` (reported in the heartbeats that follow; till then the
  // coordinator counts them as running here, not lost). `running` is to be read from
  // the executor before this call: an attempt that ends in between is in one of them.
  void ForRegistration(model::AgentRegistration& reg) const;
  // The registration was answered: what it carried is acknowledged, and running
  // reports are moot (the new session starts from what the registration said).
  void Registered(const model::AgentRegistration& reg);
  // Fills a heartbeat's updates, ended attempts first, then running ones, up to the
  // message bound.
  Sent ForHeartbeat(model::AgentHeartbeat& hb) const;
  // The heartbeat was answered without asking to register again: what it carried is
  // acknowledged, unless a newer report of the attempt came since.
  void Acknowledged(const Sent& sent);

 private:
  // Newest per attempt, with the sequence number it was added under.
  std::map<model::TaskKey, std::pair<uint64_t, model::TaskUpdate>> pending_;
  uint64_t seq_ = 0;
};

}  // namespace meridian::agent
