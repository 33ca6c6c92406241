// Streams (docs/streams.md): sensor records read from an edge site's MQTT broker,
// filtered and mapped, grouped into keyed event-time windows, scored for anomalies,
// and written as one result per (device, window). Plain value types; the spec is
// read by src/spec/stream_spec.h and run by src/workloads/stream/.
//
// Thread-safety: value types.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/work.h"

namespace meridian::model {

// Bounds on what a sensor may send: a record's text, its device name.
inline constexpr size_t kMaxSensorRecordBytes = 1024;
inline constexpr size_t kMaxDeviceNameBytes = 128;
// Devices one stream keeps state for (open windows, the history its detect scores by).
inline constexpr size_t kMaxStreamDevices = 1'000'000;

// One reading, as a sensor publishes it (docs/streams.md: the record format).
struct SensorRecord {
  std::string device;
  uint64_t seq = 0;           // per device, from 0, one more for each record
  int64_t event_time_ms = 0;  // when it was measured, ms since the Unix epoch (>= 0)
  double value = 0;           // finite
};

// Keeps records whose value lies in [min, max] and whose device starts with
// device_prefix (each check only when given).
struct StreamFilter {
  std::optional<double> min;
  std::optional<double> max;
  std::string device_prefix;
};

// value * scale + offset.
struct StreamMap {
  double scale = 1;
  double offset = 0;
};

// Keyed by device, by event time. Windows start at multiples of slide_ms (tumbling:
// slide_ms == size_ms) and span size_ms, a multiple of slide_ms. The watermark is
// the largest event time seen less out_of_orderness_ms; a window's result is written
// once, when the watermark passes its end plus allowed_lateness_ms. A record that
// arrives after every window it belongs to was written is late: counted, not used.
struct StreamWindow {
  int64_t size_ms = 0;
  int64_t slide_ms = 0;
  int64_t out_of_orderness_ms = 0;
  int64_t allowed_lateness_ms = 0;
};

// A window's mean scored against the means of the device's previous `history`
// windows: |mean - their mean| / their standard deviation (0 with fewer than two,
// or when they are all equal); anomalous at `threshold` or more.
struct StreamDetect {
  double threshold = 3;
  int32_t history = 8;
};

// A step before the window: a filter or a map, in the spec's order.
struct StreamStep {
  std::optional<StreamFilter> filter;
  std::optional<StreamMap> map;
};

// An MQTT endpoint: broker URL (mqtt://HOST:PORT or mqtts://HOST:PORT; empty: the
// site's broker, given to the runner) and a topic (a filter with + and # to read).
struct MqttEndpoint {
  std::string broker;
  std::string topic;
  // A sink's only: another edge site's broker, named by site (a stream job's agent
  // gives the stream that site's address and credentials). Its topic lies under
  // sites/OWN_SITE/, all that the site may write there.
  std::string site = {};
};

// What a stream's source carries: sensor records, or another stream's window results
// (its summaries, sent here by a sink at this site), each read as a record.
enum class StreamInput { kRecords, kResults };

// The figures of a window result a stream reading results takes as a record's value.
inline constexpr std::string_view kResultFigures[] = {"mean", "min", "max", "sum", "count", "stddev", "score"};

struct StreamSpec {
  std::string name;
  std::string site;  // the edge site whose broker and accelerators it uses
  MqttEndpoint source;
  // `source: {format: results, value: FIGURE}`: each message is a window result of
  // another stream, read as the record (device, seq = window_start_ms, event_time_ms =
  // window_end_ms - 1, value = FIGURE), so a result delivered twice is a duplicate.
  StreamInput input = StreamInput::kRecords;
  std::string input_value = "mean";
  std::vector<StreamStep> steps;
  StreamWindow window;
  std::optional<StreamDetect> detect;
  MqttEndpoint sink;  // each window's result, as JSON (docs/streams.md)
  // Or the sink is a dataset (`sink: {dataset: NAME}`; then `sink` is empty): the
  // results, one JSON line each in the order written, become dataset NAME (one shard)
  // when the stream's job succeeds.
  std::string sink_dataset;
  // Bound on the records held in open windows (each counted once per window it is in).
  int64_t max_open_records = 4'000'000;
  // End of input after this long without a record, once one came (every open window
  // is then written and the stream's job succeeds); 0: the stream runs until it is
  // cancelled.
  int64_t end_after_idle_ms = 0;
  // With a state directory (docs/streams.md: exactly-once), how often the operators'
  // state is checkpointed; what came in since is replayed from the node's ingest log.
  int64_t checkpoint_interval_ms = 1000;
  // Results waiting for the sink's broker (cut off, or slow): past this many the
  // source is not read (its records wait at its broker) until the sink takes more.
  int64_t max_pending_results = 100'000;
  // What the stream's task asks of its node (`resources`, as a job task's): one core and
  // 512 MiB unless told; with an accelerator, the windows' figures are computed on it
  // (kernels/ops.h: WindowStats) when it answers, on the CPU otherwise.
  ResourceRequest resources = [] {
    ResourceRequest r;
    r.cpu_milli = 1000;
    r.memory_bytes = int64_t{512} << 20;
    return r;
  }();
};

// A stream's checkpoint file (src/workloads/stream/state.h) starts with this header
// line; a stream that ended adds " ended" at its end.
inline constexpr std::string_view kStreamCheckpointHeader = "meridian-stream-checkpoint 1";
inline bool StreamCheckpointEnded(std::string_view first_line) {
  return first_line.starts_with(kStreamCheckpointHeader) && first_line.ends_with(" ended");
}

// One result: a device's window, written once.
struct WindowResult {
  std::string device;
  int64_t window_start_ms = 0;
  int64_t window_end_ms = 0;  // exclusive
  int64_t count = 0;
  double sum = 0;
  double min = 0;
  double max = 0;
  double mean = 0;
  double stddev = 0;  // population
  uint64_t first_seq = 0;
  uint64_t last_seq = 0;
  double score = 0;  // StreamDetect's, 0 without one
  bool anomaly = false;
};

}  // namespace meridian::model
