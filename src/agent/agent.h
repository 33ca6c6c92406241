// The agent: one per node. Registers the node's devices with the coordinator, runs
// what it is assigned, and reports. Reports ride on heartbeats, sent at once when a
// task ends (while one heartbeat is in flight the next batch gathers), and are kept
// until the coordinator acknowledges them, across coordinator restarts. When the
// coordinator forgets the session (it declared the node dead, or restarted), the
// agent registers again, telling it what still runs here and what finished.
//
// Thread-safety: Run blocks on the calling thread; Stop may be called from any.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "agent/executor.h"
#include "agent/reports.h"
#include "common/env.h"
#include "common/status.h"
#include "http/metrics.h"
#include "http/server.h"
#include "model/fleet.h"
#include "model/run_state.h"
#include "objects/link_clock.h"
#include "objects/store.h"
#include "objects/transfer.h"
#include "rpc/node_client.h"

namespace meridian::agent {

struct AgentOptions {
  std::string coordinator;       // host:port
  model::Node node;              // as configured: devices declared there are emulated unless found
  std::string site;
  std::string work_dir;
  bool discover_gpus = true;     // add NVIDIA GPUs found through the CUDA runtime
  int kernel_threads = 0;
  int64_t rpc_timeout_us = 5'000'000;
  int64_t object_memory_bytes = int64_t{1} << 30;  // then objects spill under work_dir/objects
  std::string transfer_host = "127.0.0.1";          // the transfer server's address
  int transfer_port = 0;                            // and port (0: any free one)
  // Emulated links' clocks shared with the other agents of a local cluster (see
  // objects::LinkClocks); empty: this agent's own.
  std::string link_clocks_file;
  // The node's certificate (node:NAME) and the cluster's CA: TLS to the coordinator and
  // on the transfer plane. Not enabled: plaintext (an insecure cluster).
  security::TlsCredentials tls;
  bool insecure_transfers = false;  // plain TCP transfers even off loopback
  // Commands run as their tenant's user from this uid up (ExecutorOptions); 0: as
  // the agent's user.
  int task_uid_base = 0;
  // Python tasks fork from warm interpreters (ExecutorOptions::warm_python).
  bool warm_python = true;
  SiteBroker site_broker;  // ExecutorOptions::site_broker
  std::map<std::string, SiteBroker> peer_brokers;  // ExecutorOptions::peer_brokers
  // Where its Prometheus /metrics listens (HTTPS with the node's certificate; plain
  // HTTP when insecure), port 0 for a free one; empty: no listener. Only a monitoring
  // certificate of the cluster's CA ("monitor:NAME") or the coordinator's may read it.
  std::string metrics_listen;
  // Idle this long (nothing running, every report acknowledged), the agent asks the
  // coordinator to leave the pool and, granted, Run returns: under a batch system the
  // machine goes back to it (docs/deploy.md, "Under Slurm"). 0: it stays.
  int64_t idle_exit_us = 0;
};

// The node as the agent will register it: CPU always; declared devices (emulated
// unless real ones of the same type were found); GPUs found through CUDA.
model::Node DescribeNode(const AgentOptions& options, std::string* note);

class Agent {
 public:
  Agent(AgentOptions options, Env& env);
  ~Agent();

  // Registers and serves until Stop, or until it left the pool when idle
  // (idle_exit_us); returns the reason it stopped.
  Status Run();
  // Whether Run returned because the agent left the pool.
  bool left() const { return left_.load(); }
  // Opens the object store and starts the transfer server (Run does it first).
  Status StartObjects();
  void Stop();
  // Its figures in Prometheus's text format (docs/observability.md).
  void WriteMetrics(http::Exposition& out);
  // Whether it is registered and its coordinator answered the last call; the text says
  // as whom, or why not (for /readyz).
  std::pair<bool, std::string> Ready();

 private:
  Status RegisterLocked(std::unique_lock<std::mutex>& lock);
  // The session file in work_dir: the last session, so that a restarted agent takes
  // its node's session over instead of being refused as a second one.
  std::string SessionFile() const;
  void StreamLoop(uint32_t node_id, uint64_t session, std::shared_ptr<rpc::NodeClient> client);
  void OnBatch(const model::AssignmentBatch& batch);
  void OnUpdate(model::TaskUpdate update);
  // Brings an input object into this node's store: found here, or fetched from the
  // replica at this site, else the one behind the fastest link.
  // Waits while inputs that came whole in an assignment cross the emulated links from
  // the sites that made them (booked on the links' shared clocks).
  void PaceInline(const std::map<std::string, int64_t>& bytes_from_site, const std::atomic<bool>& stop);
  // Small inputs not here yet, a batch per holder (its best replica), in parallel.
  std::vector<std::optional<FetchedInput>> FetchTogether(const std::vector<const model::ObjectLocation*>& objects,
                                                         const std::atomic<bool>& stop);
  // The object's replicas, best first: here, then by the fastest link (unknown links
  // count as slowest).
  std::vector<const model::ObjectReplica*> ReplicasInOrder(const model::ObjectLocation& object);
  // The object, here now, pinned for the task (`fetched`: release the fetch's reference).
  StatusOr<FetchedInput> PinInput(const objects::ObjectId& id, bool fetched, model::InputTransfer transfer,
                                  std::vector<std::string>* damaged_nodes);
  StatusOr<FetchedInput> FetchInput(const model::ObjectLocation& object, const std::atomic<bool>& stop,
                                    std::vector<std::string>* damaged_nodes);
  bool Sleep(std::unique_lock<std::mutex>& lock, int64_t us);
  // Exponential backoff between failed calls; the first failure of a run is logged.
  struct Retry {
    int64_t delay_us = 100'000;
    bool warned = false;
  };
  // After a failed call: a new channel, a warning once, a wait. False when stopping.
  bool Backoff(std::unique_lock<std::mutex>& lock, Retry& retry, const std::string& message);
  // Sends a heartbeat with every pending report; true when told to register again.
  StatusOr<bool> Beat(std::unique_lock<std::mutex>& lock);
  // After an answered heartbeat: true when the agent has been idle for idle_exit_us
  // and the coordinator let it leave.
  bool LeaveIfIdle(std::unique_lock<std::mutex>& lock);

  AgentOptions options_;
  Env& env_;
  bool real_devices_ = false;
  std::unique_ptr<rpc::NodeClient> client_;  // replaced by Backoff; used by Run's thread only
  std::shared_ptr<const security::TlsContext> transfer_tls_;  // null: plain TCP
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<objects::ObjectStore> objects_;
  std::unique_ptr<objects::TransferServer> transfer_;
  // The emulated links' clocks, shared by transfer_ and inputs that came inline; set
  // by StartObjects (before any task runs).
  std::shared_ptr<objects::LinkClocks> link_clocks_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool need_register_ = true;
  uint32_t node_id_ = 0;
  uint64_t session_ = 0;
  int64_t heartbeat_interval_us_ = 200'000;
  int32_t holding_ = 0;        // attempts it had at the last heartbeat
  MonotonicTime busy_at_{0};   // when it last held work, or registered
  std::atomic<bool> left_{false};
  // Final and running updates not yet acknowledged, newest per attempt.
  Reports reports_;
  // Objects gained and dropped since the last acknowledged heartbeat, in order.
  std::deque<ObjectChange> object_changes_;
  std::map<std::string, model::EmulatedLink> links_;  // from this site, by destination
  std::shared_ptr<rpc::NodeClient> stream_client_;
  std::thread stream_thread_;

  std::unique_ptr<http::Server> metrics_server_;  // started by Run when metrics_listen is set
  // Metrics, under mu_ (the histogram without).
  bool connected_ = false;                           // the last registration or heartbeat was answered
  std::map<std::string, uint64_t> attempts_ended_;   // by outcome
  uint64_t heartbeats_[2] = {0, 0};                  // answered: as calls, on the session
  std::map<std::string, std::pair<int64_t, double>> fetched_;  // from site: bytes, seconds
  http::LatencyHistogram heartbeat_latency_;         // a heartbeat's round trip
};

}  // namespace meridian::agent
