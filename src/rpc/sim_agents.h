// Many simulated agents in one process, each a node of its own with its own gRPC
// connection (its own channel and TCP connection) to a coordinator, speaking
// NodeService exactly as a real agent does: it registers, keeps its assignment stream
// open, heartbeats at the interval the coordinator gives it, and reports each task it
// is assigned as succeeded at once, with no output (a no-op executed instantly). For
// `meridian bench scale`: a coordinator's cost per connected node, without a process
// per node. Plaintext only (a coordinator started with --insecure).
//
// Built on gRPC's callback API: no thread per agent; a few threads register, one
// timer thread sends the heartbeats as they fall due.
//
// Thread-safety: Start and Stop from one thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"

namespace meridian::rpc {

struct SimAgentsOptions {
  std::string coordinator;  // host:port
  std::string name_prefix = "sim";
  int first = 0;            // nodes are named PREFIX-FIRST ... PREFIX-(FIRST+COUNT-1)
  int count = 1;
  std::string site = "local";
  int64_t cpu_milli = 2000;
  int64_t memory_bytes = int64_t{8} << 30;
  int register_threads = 8;
};

struct SimAgentsStats {
  int agents = 0;
  int64_t tasks_done = 0;           // assignments reported as succeeded
  int64_t batches = 0;              // assignment batches received
  int64_t heartbeats = 0;           // answered
  int64_t heartbeat_errors = 0;     // failed calls (the reports in them are sent again)
  int64_t reregistered = 0;         // registrations after the first (the coordinator dropped the session)
  int64_t stream_ends = 0;          // assignment streams that ended before Stop
  // Idle heartbeats (no reports) from sending to the answer, microseconds.
  std::vector<int64_t> idle_heartbeat_us;
  // From a heartbeat being due to its answer (the heartbeat lag the coordinator sees).
  std::vector<int64_t> heartbeat_lag_us;

  // Adds another's counts and samples (its agents included) to these.
  void Add(const SimAgentsStats& other);
};

class SimAgents {
 public:
  // Registers every agent and opens its assignment stream; returns when all have.
  static StatusOr<std::unique_ptr<SimAgents>> Start(const SimAgentsOptions& options);
  ~SimAgents();

  // Ends the streams and waits for calls in flight; the figures since Start.
  SimAgentsStats Stop();
  // The longest heartbeat interval the coordinator has given any of them.
  int64_t heartbeat_interval_us() const;

  struct Agent;  // sim_agents.cc

 private:
  explicit SimAgents(SimAgentsOptions options);
  void TimerLoop();

  const SimAgentsOptions options_;
  std::vector<std::unique_ptr<Agent>> agents_;
  std::atomic<bool> stopping_{false};
  std::thread timer_;
  bool stopped_ = false;
};

}  // namespace meridian::rpc
