// Runs a stream spec (docs/streams.md) against MQTT brokers: reads the source topic
// at QoS 1, feeds the engine, publishes each window's result to the sink topic at
// QoS 1; and the sensor simulator that feeds it (`meridian sensors simulate`).
//
// Thread-safety: each call runs on its caller's thread; `stop` may be set from any.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/env.h"
#include "common/status.h"
#include "model/stream.h"
#include "workloads/stream/engine.h"
#include "workloads/stream/mqtt.h"

namespace meridian::workloads::stream {

struct StreamRunOptions {
  MqttOptions mqtt;  // the source's broker (and the sink's, unless the spec names another)
  // The broker of the site the spec's sink names (sink.site), with this site's
  // credentials there; none: the sink's broker is `mqtt`'s (or sink.broker).
  std::optional<MqttOptions> sink_mqtt;
  // End of input after this long without a record, once one came: every open window
  // is written and the run returns. 0: run until `stop`.
  int64_t stop_after_idle_ms = 0;
  // Called once the source's subscription is acknowledged (records sent from then on
  // are read).
  std::function<void()> on_subscribed;
  // Where windows' figures are computed (kernels/ops.h); none: the CPU.
  const kernels::Ops* ops = nullptr;
  // Exactly-once (docs/streams.md): the node-local state directory (state.h) whose
  // checkpoint and ingest log the run restores and keeps, with a persistent session
  // at the source's broker. Empty: none (a run that dies loses what it held).
  std::string state_dir;
  // With state_dir, a checkpoint an earlier run left elsewhere (the agent's
  // MERIDIAN_CHECKPOINT), restored when the state directory has none; and where a copy
  // of each checkpoint goes for the agent to keep as an object (MERIDIAN_CHECKPOINT_DIR).
  std::string checkpoint_file;
  std::string checkpoint_copy_dir;
  // A dataset sink's (spec.sink_dataset) without a state directory: the file its
  // results go to (sink.h: ResultFile). With state_dir they go to the directory's.
  std::string results_file;
  // Said once at the start of a run that restores (what it restored, what it replays).
  std::function<void(const std::string&)> on_notice;
};

struct StreamRunReport {
  StreamCounters counters;
  int64_t published = 0;  // results acknowledged by the sink's broker
  int64_t unsent = 0;     // results it had not acknowledged when the run stopped
  int64_t sink_disconnects = 0;
  int64_t source_reconnects = 0;
  // A dataset sink's: the results file, and how long it is (what the stream wrote to it).
  std::string results_file;
  int64_t sink_bytes = 0;
  bool backpressure = false;  // max_pending_results results waited at some point
  // With a state directory: where the state came from ("" none, "local" the
  // directory's checkpoint, "object" the agent's copy from another node), how many
  // logged records were replayed, how many checkpoints were written, and whether the
  // log after the restored checkpoint was missing (restored on another node: what the
  // lost node read after its last checkpoint is not replayed).
  std::string restored;
  int64_t replayed = 0;
  int64_t checkpoints = 0;
  bool replay_missing = false;
  // The state said the stream had ended: the run did nothing (counters: the end's).
  bool ended_before = false;
  // When the last record was read (std::chrono::steady_clock, us), and the CPU time
  // of the calling thread and the sink's over the run: what `bench stream` divides by.
  int64_t last_record_steady_us = 0;
  int64_t cpu_us = 0;
};

StatusOr<StreamRunReport> RunStream(const model::StreamSpec& spec, const StreamRunOptions& options,
                                    const std::atomic<bool>& stop);

struct SimulateOptions {
  MqttOptions mqtt;
  std::string topic_prefix = "sensors";  // a device's records go to PREFIX/DEVICE
  int32_t devices = 10;
  int64_t records_per_device = 100;
  double rate = 1000;        // records a second, all devices together (0: as fast as the broker takes them)
  int64_t period_ms = 100;   // event time between a device's records
  int64_t start_ms = 1'767'225'600'000;  // the first event time (2026-01-01T00:00:00Z)
  int64_t jitter_ms = 0;     // each record's event time moved by up to this much, either way
  uint64_t seed = 1;
  // Each record's event time is the wall clock when it is published (for latency
  // figures), not start_ms + k * period_ms.
  bool event_time_now = false;
};

// The records the simulator publishes, one at a time in publishing order: device i's
// record k has seq k and event time start + k * period (+ jitter), a daily-cycle value
// with noise and an occasional spike; devices interleaved. Deterministic in the
// options; made as they are taken, so a long run holds one record at a time.
class SensorSimulator {
 public:
  explicit SensorSimulator(const SimulateOptions& options);
  // The next record; false after the last.
  bool Next(model::SensorRecord* record);

 private:
  const SimulateOptions options_;
  Random rng_;
  std::vector<double> base_;  // each device's level
  int64_t k_ = 0;             // the round: every device's record k
  int32_t device_ = 0;
};

// All of a SensorSimulator's records (for tests and small runs).
std::vector<model::SensorRecord> SimulatedRecords(const SimulateOptions& options);

// Publishes a SensorSimulator's records at the rate; returns how many were sent, each
// acknowledged by the broker.
StatusOr<int64_t> SimulateSensors(const SimulateOptions& options, const std::atomic<bool>& stop);

}  // namespace meridian::workloads::stream
