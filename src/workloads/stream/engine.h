// The stream operators (docs/streams.md) as one engine that a runner feeds with the
// payloads read from the source: parse, filter and map, keyed event-time windows with
// a watermark and allowed lateness, per-window statistics and an anomaly score.
// Each (device, window) yields one result, once, when it is final.
//
// Deterministic: a window's figures are computed from its records in seq order, each
// (device, seq) once, so the same records give bit-identical results whatever order
// and however many times (at-least-once delivery) they arrive, as long as they arrive
// before their window is written.
//
// Bounds: a payload is at most model::kMaxSensorRecordBytes, a device name at most
// model::kMaxDeviceNameBytes; records held in open windows at most the spec's
// max_open_records (past that Add fails and changes nothing).
//
// Thread-safety: one thread at a time.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/status.h"
#include "kernels/ops.h"
#include "model/stream.h"

namespace meridian::workloads::stream {

// A record's JSON: {"device": "...", "seq": N, "event_time_ms": N, "value": X}, all
// four fields and no others.
StatusOr<model::SensorRecord> ParseRecord(std::string_view payload);
std::string FormatRecord(const model::SensorRecord& record);
// Another stream's window result read as a record (model::StreamInput::kResults):
// (device, seq = window_start_ms, event_time_ms = window_end_ms - 1, value = the
// result's figure `value`). Malformed (InvalidArgument) as ParseRecord's, within the
// same bounds.
StatusOr<model::SensorRecord> ParseResultAsRecord(std::string_view payload, std::string_view value);
// A result's JSON (docs/streams.md), and back.
std::string FormatResult(const model::WindowResult& result);
// What a checkpoint must agree on with the engine restoring it: the operators and
// their parameters (a snapshot of another spec is refused).
std::string SpecFingerprint(const model::StreamSpec& spec);
StatusOr<model::WindowResult> ParseResult(std::string_view json);

struct StreamCounters {
  int64_t payloads = 0;    // given to Add
  int64_t malformed = 0;   // not a record (the first error: first_error)
  int64_t filtered = 0;    // dropped by a filter
  int64_t duplicates = 0;  // a (device, seq) already held
  int64_t late = 0;        // every window it belongs to was already written
  int64_t accepted = 0;    // held in at least one window
  int64_t results = 0;     // windows written
  int64_t anomalies = 0;   // of those, scored at the threshold or above
  std::string first_error;
};

class StreamEngine {
 public:
  // Windows' figures are computed by `ops` (kernels/ops.h WindowStats: the CPU, or a
  // GPU; the figures are the same), the windows written at once in one call.
  explicit StreamEngine(model::StreamSpec spec, const kernels::Ops* ops = nullptr);

  // One payload from the source. Results that became final are appended to *out.
  // A malformed, filtered, duplicate or late record is counted and is not an error;
  // ResourceExhausted when the open windows would hold more than max_open_records;
  // the device's error when its window figures could not be computed.
  Status Add(std::string_view payload, std::vector<model::WindowResult>* out);
  Status AddRecord(model::SensorRecord record, std::vector<model::WindowResult>* out);
  // End of input: every open window is final, in order of end time.
  Status Flush(std::vector<model::WindowResult>* out);

  // The engine's whole state (open windows, each device's detect history, the
  // watermark, the counters) as text, and back: a checkpoint (docs/streams.md,
  // exactly-once). Restore takes only a snapshot of an engine of the same spec
  // (SpecFingerprint) and checks every bound Add keeps; on error nothing is changed.
  std::string Snapshot() const;
  Status Restore(std::string_view snapshot);

  const StreamCounters& counters() const { return counters_; }
  // The largest event time seen less the out-of-orderness (INT64_MIN before any).
  int64_t watermark_ms() const { return watermark_ms_; }
  int64_t open_records() const { return open_records_; }
  const model::StreamSpec& spec() const { return spec_; }

 private:
  struct Entry {
    uint64_t seq;
    int64_t event_time_ms;
    double value;
  };
  struct Device {
    std::map<int64_t, std::vector<Entry>> windows;  // by start
    std::unordered_set<uint64_t> held;             // seqs in open windows
    std::deque<double> history;                    // means of its last windows
  };

  // A window taken out to be written: its records in seq order.
  struct Closing {
    std::string device;
    int64_t start;
    std::vector<Entry> entries;
  };

  // The start of the last window holding event time t.
  int64_t LastStart(int64_t t) const;
  bool Written(int64_t start) const;
  // Writes the windows the watermark has passed (all of them with `all`), in order of
  // end, their figures computed in one WindowStats call.
  Status FireReady(bool all, std::vector<model::WindowResult>* out);
  void Finish(Closing& w, const kernels::WindowStat& stat, std::vector<model::WindowResult>* out);

  const model::StreamSpec spec_;
  const kernels::Ops* ops_;
  StreamCounters counters_;
  std::unordered_map<std::string, Device> devices_;
  std::set<std::tuple<int64_t, std::string, int64_t>> open_;  // (end, device, start)
  int64_t max_event_ms_ = INT64_MIN;
  int64_t watermark_ms_ = INT64_MIN;
  int64_t open_records_ = 0;
};

}  // namespace meridian::workloads::stream
