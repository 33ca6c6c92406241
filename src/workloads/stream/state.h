// The node-local state that makes a stream run exactly-once (docs/streams.md):
//
//   DIR/client-id     the MQTT client id of the run's persistent session at the broker
//                     (it queues what comes while no run is connected)
//   DIR/log-N         the ingest log: every payload read from the source, appended in
//                     one write(2) as soon as the client library hands it over (which
//                     is when it has acknowledged it to the broker), in segments
//   DIR/checkpoint    the operators' state (StreamEngine::Snapshot), the results not
//                     yet acknowledged by the sink (or, for a dataset sink, the length
//                     of its results file), and the first segment written after it;
//                     replaced whole (rename)
//   DIR/results       a dataset sink's results (sink.h: ResultFile)
//   DIR/lock          held (flock) by the one run using the directory
//
// A run restores the checkpoint, replays the segments from the one it names, and reads
// on from the broker, whose session holds what came meanwhile. Writes reach the page
// cache: the state survives the run's process and its agent being killed, not the
// machine losing power (nothing is fsynced).
//
// Bounds: a logged payload is at most model::kMaxSensorRecordBytes + 1 bytes (longer
// ones are cut there: the engine refuses them as malformed either way); the log holds
// at most kMaxStreamLogBytes; a checkpoint is read up to model::kMaxCheckpointBytes.
//
// Thread-safety: one thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace meridian::workloads::stream {

inline constexpr int64_t kMaxStreamLogBytes = int64_t{1} << 30;

// A checkpoint's contents: the segment to replay from, the session's client id, the
// engine's snapshot (one line of JSON), and the results the sink's broker had not
// acknowledged yet, in order (each one line of JSON).
struct StreamCheckpoint {
  int64_t replay_from = 0;
  std::string client_id;
  std::string engine;
  std::vector<std::string> results;
  // A dataset sink's results file was this long (what came after it is made again by
  // the replay); 0 for an MQTT sink.
  int64_t sink_bytes = 0;
  // The stream ended (every result acknowledged, the session ended): a run that finds
  // this has nothing left to do.
  bool ended = false;
};
std::string FormatStreamCheckpoint(const StreamCheckpoint& checkpoint);
StatusOr<StreamCheckpoint> ParseStreamCheckpoint(std::string_view text);
// Reads a checkpoint file (bounded by model::kMaxCheckpointBytes).
StatusOr<StreamCheckpoint> ReadStreamCheckpoint(const std::string& path);

class StreamState {
 public:
  // Opens `dir` (made 0700 if missing) and locks it, waiting up to lock_wait_ms for a
  // run that still holds it (Unavailable after that). Makes the client id on first use.
  static StatusOr<std::unique_ptr<StreamState>> Open(const std::string& dir, int64_t lock_wait_ms = 10'000);
  ~StreamState();
  StreamState(const StreamState&) = delete;
  StreamState& operator=(const StreamState&) = delete;

  const std::string& dir() const { return dir_; }
  const std::string& client_id() const { return client_id_; }
  // Takes another client id (a checkpoint's from another node: the same session).
  Status SetClientId(const std::string& id);
  // The directory's checkpoint; NotFound when there is none.
  StatusOr<StreamCheckpoint> LoadCheckpoint() const;
  // Whether segment `n` (or a later one) is in the log.
  bool HasSegmentsFrom(int64_t n) const;

  // Calls `fn` with each logged payload of segments from `from` on, in order. A record
  // cut short by a crash while it was written ends its segment (counted in torn()).
  Status Replay(int64_t from, const std::function<Status(std::string_view)>& fn);
  // Starts appending to a segment after every one in the log.
  Status StartSegment();
  // Appends a payload to the current segment.
  Status Append(std::string_view payload);
  // Starts a new segment, writes the checkpoint of `engine_snapshot`, the pending
  // `results` and the results file's length naming it (and the same file to
  // copy_dir/checkpoint when copy_dir is given: the agent keeps that one as an
  // object), then drops the segments before it.
  Status Checkpoint(std::string engine_snapshot, std::vector<std::string> results, int64_t sink_bytes,
                    const std::string& copy_dir);
  // The stream is over: its last checkpoint says so (StreamCheckpoint::ended), and the
  // log goes. (The agent sweeps the directory an hour after the stream ended.)
  Status End(std::string engine_snapshot, int64_t sink_bytes);
  // Where a dataset sink's results go in this directory.
  std::string results_path() const { return dir_ + "/results"; }

  int64_t log_bytes() const { return log_bytes_; }
  int64_t torn() const { return torn_; }
  int64_t checkpoints() const { return checkpoints_; }

 private:
  StreamState() = default;
  std::string SegmentPath(int64_t n) const;
  // The log's segment numbers, ascending.
  std::vector<int64_t> Segments() const;

  std::string dir_;
  std::string client_id_;
  int lock_fd_ = -1;
  int segment_fd_ = -1;
  int64_t segment_ = -1;
  int64_t log_bytes_ = 0;
  int64_t torn_ = 0;
  int64_t checkpoints_ = 0;
};

}  // namespace meridian::workloads::stream
