// What a stream reads from outside: its spec (as a job or alone) and every payload a
// sensor, or anyone who can publish to its topic, sends. A spec either parses or is
// refused with a message; a payload is a record or counted as malformed; results come
// once per (device, window), each from at least one record, and open windows stay
// within their bound. A checkpoint (read back from a state directory or an object)
// restores as it was taken, or is refused with InvalidArgument and changes nothing.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <tuple>

#include "common/status.h"
#include "model/throughput.h"
#include "spec/fleet_spec.h"
#include "spec/job_spec.h"
#include "spec/stream_spec.h"
#include "workloads/stream/engine.h"
#include "workloads/stream/state.h"

namespace ws = meridian::workloads::stream;
namespace spec = meridian::spec;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  static const spec::FleetSpec fleet = *spec::ParseFleet(
      "sites:\n  - {name: cloud, kind: cloud}\n  - {name: factory, kind: edge}\n"
      "nodes:\n  - {name: a, site: factory, cpu: 2, memory: 4GiB}\n",
      "fleet.yaml", "");
  auto s = spec::ParseStreamSpec(bytes, "fuzz.yaml");
  if (!s.ok()) MERIDIAN_CHECK_MSG(!s.status().message().empty(), "a refusal without a message");
  auto job = spec::ParseJob(bytes, "fuzz.yaml", fleet.fleet, meridian::model::ThroughputTable{});
  if (job.ok() && spec::IsStreamSpec(bytes)) MERIDIAN_CHECK_MSG(job->tasks.size() == 1, "a stream job of many tasks");

  // The bytes as payloads, split at newlines, into a small sliding window.
  static const meridian::model::StreamSpec stream = *spec::ParseStreamSpec(
      "kind: stream\nname: f\nsource: {topic: a}\nsink: {topic: b}\nmax_open_records: 64\n"
      "operators: [{map: {scale: 2}}, {window: {size: 4ms, slide: 2ms, out_of_orderness: 1ms}}, "
      "{detect: {history: 3}}]\n",
      "f.yaml");
  ws::StreamEngine engine(stream);
  std::vector<meridian::model::WindowResult> out;
  size_t start = 0;
  while (start <= bytes.size()) {
    size_t end = bytes.find('\n', start);
    if (end == std::string_view::npos) end = bytes.size();
    meridian::Status st = engine.Add(bytes.substr(start, end - start), &out);
    MERIDIAN_CHECK_MSG(st.ok() || st.code() == meridian::StatusCode::kResourceExhausted, "an unexpected error");
    MERIDIAN_CHECK_MSG(engine.open_records() <= 64, "open windows past their bound");
    start = end + 1;
  }
  // Its snapshot restores to the very same state.
  const std::string snapshot = engine.Snapshot();
  ws::StreamEngine again(stream);
  MERIDIAN_CHECK_MSG(again.Restore(snapshot).ok(), "a snapshot that does not restore");
  MERIDIAN_CHECK_MSG(again.Snapshot() == snapshot, "a snapshot restored to another state");
  // The bytes as a checkpoint, and as an engine's snapshot.
  auto checkpoint = ws::ParseStreamCheckpoint(bytes);
  if (checkpoint.ok()) {
    MERIDIAN_CHECK_MSG(!checkpoint->client_id.empty(), "a checkpoint without a client id");
    MERIDIAN_CHECK_MSG(checkpoint->sink_bytes >= 0, "a checkpoint with a negative results length");
    // As it is written again, it reads back the same.
    auto again = ws::ParseStreamCheckpoint(ws::FormatStreamCheckpoint(*checkpoint));
    MERIDIAN_CHECK_MSG(again.ok() && again->replay_from == checkpoint->replay_from &&
                           again->client_id == checkpoint->client_id && again->engine == checkpoint->engine &&
                           again->results == checkpoint->results && again->sink_bytes == checkpoint->sink_bytes &&
                           again->ended == checkpoint->ended,
                       "a checkpoint that does not read back as written");
  }
  ws::StreamEngine restored(stream);
  meridian::Status r = restored.Restore(bytes);
  MERIDIAN_CHECK_MSG(r.ok() || r.code() == meridian::StatusCode::kInvalidArgument, "an unexpected restore error");
  if (!r.ok()) MERIDIAN_CHECK_MSG(restored.open_records() == 0, "a refused snapshot changed the engine");
  MERIDIAN_CHECK_MSG(restored.open_records() <= 64, "a restored engine past its bound");
  std::vector<meridian::model::WindowResult> restored_out;
  MERIDIAN_CHECK_MSG(restored.Flush(&restored_out).ok(), "a restored engine failed to flush");
  MERIDIAN_CHECK_MSG(engine.Flush(&out).ok(), "a flush failed on the CPU");
  std::set<std::tuple<std::string, int64_t>> seen;
  for (const auto& r : out) {
    MERIDIAN_CHECK_MSG(seen.emplace(r.device, r.window_start_ms).second, "a window written twice");
    MERIDIAN_CHECK_MSG(r.count >= 1 && r.min <= r.max, "an empty or inverted window");
  }
  MERIDIAN_CHECK_MSG(engine.open_records() == 0, "records left after a flush");
  MERIDIAN_CHECK_MSG(engine.counters().results == static_cast<int64_t>(out.size()), "results miscounted");
  return 0;
}
