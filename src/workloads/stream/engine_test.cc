#include "workloads/stream/engine.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <tuple>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "spec/fleet_spec.h"
#include "spec/job_spec.h"
#include "spec/stream_spec.h"
#include "workloads/stream/runner.h"
#include "workloads/stream/sink.h"
#include "workloads/stream/state.h"

namespace meridian::workloads::stream {
namespace {

model::StreamSpec Spec(std::string_view window_yaml, std::string_view extra = "") {
  std::string text = fmt::format(
      "kind: stream\nname: t\nsite: factory\nsource: {{topic: 'sensors/#'}}\nsink: {{topic: results}}\n"
      "operators:\n{}  - window: {}\n",
      extra, window_yaml);
  StatusOr<model::StreamSpec> spec = spec::ParseStreamSpec(text, "t.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  return *spec;
}

std::string Rec(std::string_view device, uint64_t seq, int64_t t, double v) {
  return FormatRecord(model::SensorRecord{std::string(device), seq, t, v});
}

TEST(StreamEngineTest, TumblingWindowsWaitForLatenessDropDuplicatesAndLateRecords) {
  StreamEngine e(Spec("{size: 10s, out_of_orderness: 1s, allowed_lateness: 2s}"));
  std::vector<model::WindowResult> out;
  ASSERT_TRUE(e.Add(Rec("a", 0, 0, 1.0), &out).ok());
  ASSERT_TRUE(e.Add(Rec("a", 1, 4000, 2.0), &out).ok());
  ASSERT_TRUE(e.Add(Rec("a", 2, 9500, 3.0), &out).ok());
  ASSERT_TRUE(e.Add(Rec("a", 3, 10500, 4.0), &out).ok());
  EXPECT_EQ(e.watermark_ms(), 9500);
  ASSERT_TRUE(e.Add(Rec("a", 4, 8000, 5.0), &out).ok());  // out of order, in time
  ASSERT_TRUE(e.Add(Rec("a", 2, 9500, 3.0), &out).ok());  // delivered twice
  EXPECT_TRUE(out.empty());  // [0, 10s) waits for the watermark to pass 12 s
  ASSERT_TRUE(e.Add(Rec("a", 5, 13500, 6.0), &out).ok());
  ASSERT_EQ(out.size(), 1u);
  const model::WindowResult& w = out[0];
  EXPECT_EQ(w.device, "a");
  EXPECT_EQ(w.window_start_ms, 0);
  EXPECT_EQ(w.window_end_ms, 10000);
  EXPECT_EQ(w.count, 4);
  EXPECT_EQ(w.sum, 11.0);
  EXPECT_EQ(w.min, 1.0);
  EXPECT_EQ(w.max, 5.0);
  EXPECT_EQ(w.mean, 2.75);
  EXPECT_EQ(w.stddev, std::sqrt(8.75 / 4));
  EXPECT_EQ(w.first_seq, 0u);
  EXPECT_EQ(w.last_seq, 4u);
  ASSERT_TRUE(e.Add(Rec("a", 6, 9000, 7.0), &out).ok());  // its window is written: late
  ASSERT_TRUE(e.Flush(&out).ok());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].window_start_ms, 10000);
  EXPECT_EQ(out[1].count, 2);
  EXPECT_EQ(out[1].mean, 5.0);
  EXPECT_EQ(out[1].stddev, 1.0);
  EXPECT_EQ(out[1].first_seq, 3u);
  EXPECT_EQ(out[1].last_seq, 5u);
  const StreamCounters& c = e.counters();
  EXPECT_EQ(c.payloads, 8);
  EXPECT_EQ(c.accepted, 6);
  EXPECT_EQ(c.duplicates, 1);
  EXPECT_EQ(c.late, 1);
  EXPECT_EQ(c.results, 2);
  EXPECT_EQ(e.open_records(), 0);
}

TEST(StreamEngineTest, FiguresDoNotDependOnArrivalOrder) {
  // Sums are taken in seq order: the same records shuffled give bit-identical results.
  std::vector<std::string> records;
  for (int i = 0; i < 50; ++i) records.push_back(Rec("d", i, 100 * i, 0.1 * i + 1e-3 * (i % 7)));
  std::vector<model::WindowResult> a, b;
  StreamEngine e1(Spec("{size: 5s, out_of_orderness: 10s}"));
  for (const std::string& r : records) ASSERT_TRUE(e1.Add(r, &a).ok());
  ASSERT_TRUE(e1.Flush(&a).ok());
  StreamEngine e2(Spec("{size: 5s, out_of_orderness: 10s}"));
  for (auto it = records.rbegin(); it != records.rend(); ++it) ASSERT_TRUE(e2.Add(*it, &b).ok());
  ASSERT_TRUE(e2.Flush(&b).ok());
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(FormatResult(a[0]), FormatResult(b[0]));
  EXPECT_EQ(a[0].count, 50);
}

TEST(StreamEngineTest, SlidingWindowsHoldARecordInEachOfItsWindows) {
  StreamEngine e(Spec("{size: 10s, slide: 5s}"));
  std::vector<model::WindowResult> out;
  ASSERT_TRUE(e.Add(Rec("b", 0, 1000, 1.0), &out).ok());
  EXPECT_EQ(e.open_records(), 2);
  ASSERT_TRUE(e.Add(Rec("b", 1, 6000, 2.0), &out).ok());
  ASSERT_EQ(out.size(), 1u);  // [-5 s, 5 s)
  EXPECT_EQ(out[0].window_start_ms, -5000);
  EXPECT_EQ(out[0].count, 1);
  ASSERT_TRUE(e.Add(Rec("b", 2, 12000, 4.0), &out).ok());
  ASSERT_EQ(out.size(), 2u);  // [0, 10 s)
  EXPECT_EQ(out[1].window_start_ms, 0);
  EXPECT_EQ(out[1].sum, 3.0);
  EXPECT_EQ(out[1].stddev, 0.5);
  ASSERT_TRUE(e.Flush(&out).ok());
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[2].window_start_ms, 5000);
  EXPECT_EQ(out[2].sum, 6.0);
  EXPECT_EQ(out[2].first_seq, 1u);
  EXPECT_EQ(out[2].last_seq, 2u);
  EXPECT_EQ(out[3].window_start_ms, 10000);
  EXPECT_EQ(out[3].sum, 4.0);
}

TEST(StreamEngineTest, DetectScoresAWindowAgainstTheDevicesLastWindows) {
  StreamEngine e(Spec("{size: 1s}\n  - detect: {threshold: 2, history: 3}"));
  std::vector<model::WindowResult> out;
  const double values[] = {10, 12, 10, 12, 30};
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(e.Add(Rec("c", i, 1000 * i, values[i]), &out).ok());
  ASSERT_TRUE(e.Flush(&out).ok());
  ASSERT_EQ(out.size(), 5u);
  EXPECT_EQ(out[0].score, 0.0);  // no history
  EXPECT_EQ(out[1].score, 0.0);  // one window: no spread yet
  EXPECT_EQ(out[2].score, 1.0);  // against 10, 12: mean 11, stddev 1
  EXPECT_NEAR(out[3].score, std::sqrt(2.0), 1e-12);
  EXPECT_FALSE(out[3].anomaly);
  EXPECT_NEAR(out[4].score, 28 / std::sqrt(2.0), 1e-9);  // against 12, 10, 12 (history 3)
  EXPECT_TRUE(out[4].anomaly);
  EXPECT_EQ(e.counters().anomalies, 1);
}

TEST(StreamEngineTest, FiltersAndMapsRunInTheSpecsOrder) {
  StreamEngine e(Spec("{size: 1s}", "  - map: {scale: 2, offset: 1}\n  - filter: {min: 0, max: 10, device_prefix: dev-}\n"));
  std::vector<model::WindowResult> out;
  ASSERT_TRUE(e.Add(Rec("dev-1", 0, 0, 2), &out).ok());    // 5: kept
  ASSERT_TRUE(e.Add(Rec("dev-1", 1, 10, 5), &out).ok());   // 11: above max
  ASSERT_TRUE(e.Add(Rec("dev-1", 2, 20, -3), &out).ok());  // -5: below min
  ASSERT_TRUE(e.Add(Rec("gw-1", 0, 30, 1), &out).ok());    // other prefix
  ASSERT_TRUE(e.Flush(&out).ok());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].sum, 5.0);
  EXPECT_EQ(e.counters().filtered, 3);
}

TEST(StreamEngineTest, MalformedRecordsAreCountedAndChangeNothing) {
  StreamEngine e(Spec("{size: 1s}"));
  std::vector<model::WindowResult> out;
  const std::string bad[] = {
      "not json",
      R"({"device":"a","seq":1,"event_time_ms":5})",
      R"({"device":"a","seq":1,"event_time_ms":5,"value":1,"extra":2})",
      R"({"device":"a","seq":-1,"event_time_ms":5,"value":1})",
      R"({"device":"a","seq":1,"event_time_ms":-5,"value":1})",
      R"({"device":"a","seq":1,"event_time_ms":5,"value":"1"})",
      R"({"device":"","seq":1,"event_time_ms":5,"value":1})",
      std::string(2000, ' '),
  };
  for (const std::string& p : bad) ASSERT_TRUE(e.Add(p, &out).ok());
  EXPECT_EQ(e.counters().malformed, 8);
  EXPECT_EQ(e.counters().accepted, 0);
  EXPECT_EQ(e.counters().first_error, "malformed record: expected a JSON object");
  EXPECT_EQ(ParseRecord(bad[2]).status().message(), "malformed record: unknown field 'extra'");
  EXPECT_EQ(ParseRecord(bad[7]).status().message(), "malformed record: 2000 bytes, more than 1024");
  EXPECT_EQ(e.watermark_ms(), INT64_MIN);
}

TEST(StreamEngineTest, OpenWindowsAreBounded) {
  model::StreamSpec spec = Spec("{size: 10s}");
  spec.max_open_records = 2;
  StreamEngine e(spec);
  std::vector<model::WindowResult> out;
  ASSERT_TRUE(e.Add(Rec("a", 0, 0, 1), &out).ok());
  ASSERT_TRUE(e.Add(Rec("b", 0, 0, 1), &out).ok());
  Status s = e.Add(Rec("c", 0, 0, 1), &out);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("max_open_records (2)"), std::string::npos) << s.message();
  EXPECT_EQ(e.open_records(), 2);
  EXPECT_EQ(e.counters().accepted, 2);
}

TEST(StreamEngineTest, ResultsRoundTripThroughJson) {
  model::WindowResult r{"dev-7", 1000, 2000, 3, 0.1 + 0.2, -1.5, 7.25, 0.1, 1e-17, 4, 9, 3.5, true};
  StatusOr<model::WindowResult> back = ParseResult(FormatResult(r));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(FormatResult(*back), FormatResult(r));
  EXPECT_EQ(back->sum, 0.1 + 0.2);
}

// A checkpoint mid-stream: an engine restored from the snapshot and fed the rest gives
// the very results, figures and counters of one that never stopped (sliding windows,
// detect history, out-of-order and duplicate records across the cut).
TEST(StreamEngineTest, AnEngineRestoredFromASnapshotEndsAsOneThatNeverStopped) {
  const std::string window = "{size: 4s, slide: 2s, out_of_orderness: 1500ms, allowed_lateness: 1s}";
  const std::string detect = "  - detect: {threshold: 2, history: 3}\n";
  auto spec = [&] {
    model::StreamSpec s = Spec(window);
    s.detect = model::StreamDetect{2, 3};
    return s;
  };
  std::vector<std::string> records;
  Random rng(7);
  for (int i = 0; i < 400; ++i) {
    const std::string device = fmt::format("d{}", i % 5);
    const int64_t t = 250 * (i / 5) + rng.UniformRange(-900, 900);
    records.push_back(Rec(device, static_cast<uint64_t>(i / 5), std::max<int64_t>(0, t), (i % 13) * 0.37 - 1));
    if (i % 17 == 0) records.push_back(records.back());  // delivered twice
  }
  records.push_back("{\"device\": 1}");
  std::vector<model::WindowResult> whole, cut;
  StreamEngine undisturbed(spec());
  for (const std::string& r : records) ASSERT_TRUE(undisturbed.Add(r, &whole).ok());
  ASSERT_TRUE(undisturbed.Flush(&whole).ok());

  const size_t at = records.size() / 2;
  std::string snapshot;
  {
    StreamEngine first(spec());
    for (size_t i = 0; i < at; ++i) ASSERT_TRUE(first.Add(records[i], &cut).ok());
    ASSERT_GT(first.open_records(), 0);
    snapshot = first.Snapshot();
  }
  StreamEngine second(spec());
  ASSERT_TRUE(second.Restore(snapshot).ok());
  EXPECT_EQ(second.Snapshot(), snapshot);
  for (size_t i = at; i < records.size(); ++i) ASSERT_TRUE(second.Add(records[i], &cut).ok());
  ASSERT_TRUE(second.Flush(&cut).ok());
  ASSERT_EQ(cut.size(), whole.size());
  for (size_t i = 0; i < whole.size(); ++i) EXPECT_EQ(FormatResult(cut[i]), FormatResult(whole[i])) << i;
  const StreamCounters& a = undisturbed.counters();
  const StreamCounters& b = second.counters();
  EXPECT_EQ(std::tie(a.payloads, a.accepted, a.duplicates, a.late, a.malformed, a.results, a.anomalies),
            std::tie(b.payloads, b.accepted, b.duplicates, b.late, b.malformed, b.results, b.anomalies));
  EXPECT_EQ(b.first_error, a.first_error);
  EXPECT_EQ(a.payloads, 425);
  EXPECT_EQ(a.duplicates, 24);
  EXPECT_GT(a.anomalies, 0);
}

TEST(StreamEngineTest, RestoreRefusesAnotherSpecsOrABrokenSnapshotAndChangesNothing) {
  StreamEngine a(Spec("{size: 10s}"));
  std::vector<model::WindowResult> out;
  ASSERT_TRUE(a.Add(Rec("x", 0, 1000, 2.0), &out).ok());
  const std::string snapshot = a.Snapshot();
  StreamEngine other(Spec("{size: 20s}"));
  ASSERT_TRUE(other.Add(Rec("y", 0, 1000, 3.0), &out).ok());
  const std::string before = other.Snapshot();
  Status s = other.Restore(snapshot);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("taken by a stream of another spec"), std::string::npos) << s.message();
  EXPECT_EQ(other.Snapshot(), before);
  StreamEngine same(Spec("{size: 10s}"));
  std::string broken = snapshot;
  broken.replace(broken.find("[0,1000,2.0]"), 12, "[0,99000,2.0]");  // outside its window
  s = same.Restore(broken);
  EXPECT_NE(s.message().find("device 'x' has a record outside its window at 0"), std::string::npos) << s.message();
  EXPECT_EQ(same.open_records(), 0);
  EXPECT_EQ(same.Restore("{").code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(same.Restore(snapshot).ok());
  EXPECT_EQ(same.open_records(), 1);
}

// A stream at another site reading the first's summaries: each result a record of
// (device, window start, window end - 1, figure); one sent twice is a duplicate.
TEST(StreamEngineTest, AStreamOfResultsWindowsAnotherStreamsSummaries) {
  StreamEngine first(Spec("{size: 1s}"));
  std::vector<model::WindowResult> firsts;
  for (int i = 0; i < 40; ++i) {
    ASSERT_TRUE(first.Add(Rec(i % 2 == 0 ? "a" : "b", i / 2, int64_t{250} * i, 1.0 + i), &firsts).ok());
  }
  ASSERT_TRUE(first.Flush(&firsts).ok());
  ASSERT_EQ(firsts.size(), 20u);  // 10 s of records, 2 devices, 1 s windows
  std::string text =
      "kind: stream\nname: summaries\nsite: depot\nsource: {topic: 'sites/factory/#', format: results, value: max}\n"
      "sink: {topic: out}\noperators: [{window: {size: 5s}}]\n";
  StatusOr<model::StreamSpec> spec = spec::ParseStreamSpec(text, "s.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  StreamEngine second(*spec);
  std::vector<model::WindowResult> out;
  for (size_t i = 0; i < firsts.size(); ++i) {
    ASSERT_TRUE(second.Add(FormatResult(firsts[i]), &out).ok());
    if (i == 3) {
      ASSERT_TRUE(second.Add(FormatResult(firsts[i]), &out).ok());  // sent again after a restore
    }
  }
  ASSERT_TRUE(second.Add(R"({"device":"a","window_start_ms":5000,"window_end_ms":4000,"max":1})", &out).ok());
  ASSERT_TRUE(second.Flush(&out).ok());
  EXPECT_EQ(second.counters().duplicates, 1);
  EXPECT_EQ(second.counters().malformed, 1);
  EXPECT_NE(second.counters().first_error.find("0 <= start < end"), std::string::npos) << second.counters().first_error;
  ASSERT_EQ(out.size(), 4u);  // [0, 5 s) and [5 s, 10 s) for a and b
  // Device a's first window holds its results of [0, 1 s) .. [4 s, 5 s); a's records
  // are i = 0, 2, 4, ... at 250 i ms, of value 1 + i: the max of [k s, k+1 s) is 3 + 4k.
  const model::WindowResult& a0 = out[0];
  EXPECT_EQ(a0.device, "a");
  EXPECT_EQ(a0.window_start_ms, 0);
  EXPECT_EQ(a0.count, 5);
  EXPECT_EQ(a0.first_seq, 0u);
  EXPECT_EQ(a0.last_seq, 4000u);
  EXPECT_EQ(a0.min, 3.0);
  EXPECT_EQ(a0.max, 19.0);
  EXPECT_EQ(a0.sum, 3.0 + 7.0 + 11.0 + 15.0 + 19.0);
  EXPECT_EQ(second.counters().late, 0);
  // Another figure, another stream: a checkpoint of one does not restore into the other.
  text.replace(text.find("value: max"), 10, "value: mean");
  StatusOr<model::StreamSpec> by_mean = spec::ParseStreamSpec(text, "s.yaml");
  ASSERT_TRUE(by_mean.ok());
  StreamEngine third(*by_mean);
  EXPECT_EQ(third.Restore(second.Snapshot()).code(), StatusCode::kInvalidArgument);
}

TEST(StreamStateTest, TheLogReplaysWhatCameAfterTheCheckpointAndStopsAtATornRecord) {
  char tmpl[] = "/tmp/stream-state-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = std::string(tmpl) + "/state";
  std::string id;
  {
    StatusOr<std::unique_ptr<StreamState>> s = StreamState::Open(dir);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    id = (*s)->client_id();
    EXPECT_EQ(id.size(), 20u);
    // A second run waits for the first, then gives up.
    StatusOr<std::unique_ptr<StreamState>> busy = StreamState::Open(dir, 100);
    EXPECT_EQ(busy.status().code(), StatusCode::kUnavailable);
    EXPECT_NE(busy.status().message().find("held by another run"), std::string::npos);
    ASSERT_TRUE((*s)->StartSegment().ok());
    ASSERT_TRUE((*s)->Append("one").ok());
    ASSERT_TRUE((*s)->Append("two").ok());
    ASSERT_TRUE((*s)->Checkpoint("{\"state\": 2}", {"{\"r\": 1}", "{\"r\": 2}"}, 0, tmpl).ok());
    ASSERT_TRUE((*s)->Append("three").ok());
    ASSERT_TRUE((*s)->Append(std::string(5000, 'x')).ok());  // kept cut at 1 KiB + 1
    EXPECT_EQ((*s)->log_bytes(), 4 + 5 + 4 + 1025);
  }
  // A record cut short by a crash.
  std::FILE* f = std::fopen((dir + "/log-000000000001").c_str(), "ab");
  ASSERT_NE(f, nullptr);
  std::fwrite("\x09\x00\x00\x00fou", 1, 7, f);
  std::fclose(f);
  StatusOr<std::unique_ptr<StreamState>> s = StreamState::Open(dir);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ((*s)->client_id(), id);
  StatusOr<StreamCheckpoint> c = (*s)->LoadCheckpoint();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->replay_from, 1);
  EXPECT_EQ(c->client_id, id);
  EXPECT_EQ(c->engine, "{\"state\": 2}");
  EXPECT_EQ(c->results, (std::vector<std::string>{"{\"r\": 1}", "{\"r\": 2}"}));
  StatusOr<StreamCheckpoint> copy = ReadStreamCheckpoint(std::string(tmpl) + "/checkpoint");
  ASSERT_TRUE(copy.ok()) << copy.status().ToString();
  EXPECT_EQ(FormatStreamCheckpoint(*copy), FormatStreamCheckpoint(*c));
  std::vector<std::string> replayed;
  ASSERT_TRUE((*s)->Replay(c->replay_from, [&](std::string_view p) {
                   replayed.emplace_back(p);
                   return OkStatus();
                 }).ok());
  ASSERT_EQ(replayed.size(), 2u);  // segment 0 went with the checkpoint
  EXPECT_EQ(replayed[0], "three");
  EXPECT_EQ(replayed[1].size(), model::kMaxSensorRecordBytes + 1);
  EXPECT_EQ((*s)->torn(), 1);
  EXPECT_TRUE((*s)->HasSegmentsFrom(1));
  EXPECT_FALSE((*s)->HasSegmentsFrom(2));
  EXPECT_EQ(ParseStreamCheckpoint("meridian-stream-checkpoint 1 replay_from=x client_id=a results=0\n{}").status().code(),
            StatusCode::kInvalidArgument);
  StatusOr<StreamCheckpoint> short_one =
      ParseStreamCheckpoint("meridian-stream-checkpoint 1 replay_from=3 client_id=a results=2\n{}\n{}");
  EXPECT_EQ(short_one.status().message(), "a stream checkpoint: its header counts 2 results, it holds 1");
  ASSERT_TRUE((*s)->End("{\"state\": 3}", 4321).ok());
  StatusOr<StreamCheckpoint> ended = (*s)->LoadCheckpoint();
  ASSERT_TRUE(ended.ok()) << ended.status().ToString();
  EXPECT_TRUE(ended->ended);
  EXPECT_FALSE(c->ended);
  EXPECT_EQ(ended->engine, "{\"state\": 3}");
  EXPECT_EQ(ended->sink_bytes, 4321);
  EXPECT_EQ(c->sink_bytes, 0);
  EXPECT_FALSE((*s)->HasSegmentsFrom(0));
  std::filesystem::remove_all(tmpl);
}

// A dataset sink's file across a restore: cut back to the checkpoint's length (the
// replay writes the rest again), refused when shorter, bounded.
TEST(ResultFileTest, ARestoreCutsTheFileBackToItsCheckpointAndAShorterOneIsRefused) {
  char tmpl[] = "/tmp/stream-results-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string path = std::string(tmpl) + "/results";
  int64_t at_checkpoint = 0;
  {
    StatusOr<std::unique_ptr<ResultFile>> f = ResultFile::Open(path, 0, 64);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    ASSERT_TRUE((*f)->Append("{\"w\":1}").ok());
    at_checkpoint = (*f)->bytes();
    ASSERT_TRUE((*f)->Append("{\"w\":2}").ok());  // after the checkpoint: made again by the replay
    EXPECT_EQ((*f)->bytes(), 16);
  }
  StatusOr<std::unique_ptr<ResultFile>> f = ResultFile::Open(path, at_checkpoint, 30);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->bytes(), 8);
  ASSERT_TRUE((*f)->Append("{\"w\":2}").ok());
  ASSERT_TRUE((*f)->Append("{\"w\":3}").ok());
  Status full = (*f)->Append("{\"w\":4}");  // 32 bytes > 30
  EXPECT_EQ(full.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(full.message().find("a dataset sink's results would pass"), std::string::npos) << full.message();
  std::ostringstream out;
  ASSERT_TRUE(CopyResults(path, (*f)->bytes(), out).ok());
  EXPECT_EQ(out.str(), "{\"w\":1}\n{\"w\":2}\n{\"w\":3}\n");
  EXPECT_EQ(CopyResults(path, 100, out).code(), StatusCode::kDataLoss);
  StatusOr<std::unique_ptr<ResultFile>> lost = ResultFile::Open(std::string(tmpl) + "/other", 24, 30);
  EXPECT_EQ(lost.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(lost.status().message().find("holds 0 bytes, the checkpoint counts 24"), std::string::npos)
      << lost.status().message();
  std::filesystem::remove_all(tmpl);
}

TEST(StreamSpecTest, ErrorsNameTheFieldAndWhatWasExpected) {
  const std::pair<std::string, std::string> cases[] = {
      {"kind: stream\nname: x\nsource: {topic: a}\nsink: {topic: b}\noperators: [{map: {scale: 2}}]\n",
       "a stream needs a 'window' operator"},
      {"kind: stream\nname: x\nsource: {topic: a}\nsink: {topic: b}\noperators: [{join: {}}]\n",
       "unknown operator 'join'"},
      {"kind: stream\nname: x\nsource: {topic: a}\nsink: {topic: b}\noperators: [{window: {size: 10s, slide: 3s}}]\n",
       "operators[0].window.slide: expected whole milliseconds that divide the size"},
      {"kind: stream\nname: x\nsource: {topic: a}\nsink: {topic: 'b/#'}\noperators: [{window: {size: 1s}}]\n",
       "a topic written to may not hold + or #"},
      {"kind: stream\nname: x\nsource: {topic: a, broker: 'http://h:1'}\nsink: {topic: b}\noperators: [{window: {size: "
       "1s}}]\n",
       "expected mqtt://HOST:PORT"},
      {"kind: stream\nname: x\nsource: {topic: a}\nsink: {topic: b}\noperators: [{window: {size: 1s}}, {map: {}}]\n",
       "'map' must come before the window"},
      {"kind: stream\nname: x\nsource: {topic: a}\nsink: {topic: b}\noperators: [{window: {size: 1s, sise: 2}}]\n",
       "sise"},
      {"kind: stream\nname: x\nsource: {topic: a}\nsink: {topic: b}\noperators: [{window: {size: 1s}}]\n"
       "checkpoint_interval: 10ms\n",
       "checkpoint_interval: expected 100ms to 1h"},
      {"kind: stream\nname: x\nsource: {topic: a}\nsink: {dataset: d}\noperators: [{window: {size: 1s}}]\n",
       "s.yaml:4:7: sink: a dataset sink needs 'end_after_idle'"},
      {"kind: stream\nname: x\nsource: {topic: a}\nsink: {dataset: d, topic: b}\noperators: [{window: {size: 1s}}]\n"
       "end_after_idle: 1s\n",
       "unknown field 'topic'"},
      {"kind: stream\nname: x\nsource: {topic: a}\nsink: {dataset: 'a b'}\noperators: [{window: {size: 1s}}]\n"
       "end_after_idle: 1s\n",
       "sink.dataset: "},
      {"kind: stream\nname: x\nsource: {topic: a, value: max}\nsink: {topic: b}\noperators: [{window: {size: 1s}}]\n",
       "source.value: 'value' picks a figure of a result: it needs 'format: results'"},
      {"kind: stream\nname: x\nsource: {topic: a, format: results, value: median}\nsink: {topic: b}\n"
       "operators: [{window: {size: 1s}}]\n",
       "unknown figure 'median'; expected one of mean, min, max, sum, count, stddev, score"},
      // An operator's name that is itself a map or a list (found by fuzz_stream): the
      // parser threw, and the process ended.
      {"kind: stream\nname: x\nsource: {topic: a}\nsink: {topic: b}\noperators: [{{window: {size: 1s}}: {}}]\n",
       "s.yaml:5:14: operators[0]: expected an operator name (filter, map, window or detect)"},
      {"kind: stream\nname: x\nsource: {topic: a}\nsink: {topic: b}\noperators: [{[window]: {size: 1s}}]\n",
       "operators[0]: expected an operator name"},
  };
  for (const auto& [text, want] : cases) {
    StatusOr<model::StreamSpec> s = spec::ParseStreamSpec(text, "s.yaml");
    ASSERT_FALSE(s.ok()) << text;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find(want), std::string::npos) << s.status().message();
    EXPECT_EQ(s.status().message().rfind("s.yaml:", 0), 0u) << s.status().message();
  }
  EXPECT_TRUE(spec::IsStreamSpec("kind: stream\n"));
  EXPECT_FALSE(spec::IsStreamSpec("name: job\ntasks: []\n"));
}

TEST(SimulatedRecordsTest, AreDeterministicAndInterleaveDevices) {
  SimulateOptions o;
  o.devices = 3;
  o.records_per_device = 4;
  o.period_ms = 250;
  std::vector<model::SensorRecord> a = SimulatedRecords(o);
  std::vector<model::SensorRecord> b = SimulatedRecords(o);
  ASSERT_EQ(a.size(), 12u);
  EXPECT_EQ(a[1].device, "dev-00001");
  EXPECT_EQ(a[4].seq, 1u);
  EXPECT_EQ(a[4].event_time_ms, o.start_ms + 250);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(FormatRecord(a[i]), FormatRecord(b[i]));
  o.seed = 2;
  EXPECT_NE(FormatRecord(SimulatedRecords(o)[0]), FormatRecord(a[0]));
}

}  // namespace
}  // namespace meridian::workloads::stream

namespace meridian::workloads::stream {
namespace {

TEST(StreamJobTest, RunsAtItsEdgeSiteWithTheSpecAndTheSitesBroker) {
  StatusOr<spec::FleetSpec> fleet = spec::ParseFleet(
      "sites:\n  - {name: cloud, kind: cloud}\n  - {name: factory, kind: edge}\n  - {name: depot, kind: edge}\n"
      "nodes:\n  - {name: a, site: factory, cpu: 2, memory: 4GiB}\n",
      "f.yaml", "");
  ASSERT_TRUE(fleet.ok()) << fleet.status().ToString();
  const std::string text =
      "kind: stream\nname: s\nsite: factory\nsource: {topic: 'in/#'}\nsink: {topic: out}\n"
      "operators: [{window: {size: 1s}}]\n";
  StatusOr<model::Job> job = spec::ParseJob(text, "s.yaml", fleet->fleet, model::ThroughputTable{});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->name, "s");
  EXPECT_EQ(job->allowed_regions, std::vector<std::string>{"factory"});
  ASSERT_EQ(job->tasks.size(), 1u);
  EXPECT_EQ(job->tasks[0].env.at(spec::kStreamSpecEnv), text);
  EXPECT_EQ(job->tasks[0].env.at("MERIDIAN_MQTT"), "site");
  EXPECT_EQ(job->tasks[0].timeout_us, 0);
  EXPECT_EQ(job->tasks[0].output_dataset, "");
  // A dataset sink: the task's output (its results) becomes the dataset.
  std::string to_dataset = text;
  to_dataset.replace(to_dataset.find("{topic: out}"), 12, "{dataset: windows}\nend_after_idle: 5s");
  StatusOr<model::Job> dj = spec::ParseJob(to_dataset, "s.yaml", fleet->fleet, model::ThroughputTable{});
  ASSERT_TRUE(dj.ok()) << dj.status().ToString();
  EXPECT_EQ(dj->tasks[0].output_dataset, "windows");
  EXPECT_EQ(job->tasks[0].resources.device_count, 0);
  EXPECT_EQ(job->tasks[0].resources.cpu_milli, 1000);
  EXPECT_EQ(job->tasks[0].resources.memory_bytes, int64_t{512} << 20);
  // The site's accelerator, for the windows' figures.
  std::string on_gpu = text + "resources: {accelerator: T4, memory: 1GiB}\n";
  StatusOr<model::Job> gj = spec::ParseJob(on_gpu, "s.yaml", fleet->fleet, model::ThroughputTable{});
  ASSERT_TRUE(gj.ok()) << gj.status().ToString();
  EXPECT_EQ(gj->tasks[0].resources.device_count, 1);
  EXPECT_EQ(gj->tasks[0].resources.accelerator_any_of, std::vector<std::string>{"T4"});
  EXPECT_EQ(gj->tasks[0].resources.memory_bytes, int64_t{1} << 30);
  // A sink at another edge site: its broker, under sites/OWN_SITE/.
  std::string to_depot = text;
  to_depot.replace(to_depot.find("{topic: out}"), 12, "{site: depot, topic: sites/factory/out}");
  StatusOr<model::Job> sj = spec::ParseJob(to_depot, "s.yaml", fleet->fleet, model::ThroughputTable{});
  ASSERT_TRUE(sj.ok()) << sj.status().ToString();
  EXPECT_EQ(sj->tasks[0].env.at("MERIDIAN_MQTT_SINK"), "depot");
  EXPECT_EQ(job->tasks[0].env.count("MERIDIAN_MQTT_SINK"), 0u);

  for (const auto& [from, to, want] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"site: factory", "site: lab", "s.yaml:3:7: site: no site 'lab' in the fleet"},
           {"site: factory", "site: cloud", "site 'cloud' is not an edge site, so it has no broker"},
           {"site: factory\n", "", "a stream job names its 'site'"},
           {"{topic: out}", "{site: depot, topic: out}",
            "s.yaml:5:28: sink.topic: a stream of site 'factory' writes at another site's broker under "
            "'sites/factory/'"},
           {"{topic: out}", "{site: cloud, topic: sites/factory/x}", "site 'cloud' is not an edge site"},
           {"{topic: out}", "{site: lab, topic: sites/factory/x}", "sink.site: no site 'lab' in the fleet"},
           {"{topic: out}", "{site: depot, broker: 'mqtt://h:1', topic: x}", "give 'site' or 'broker', not both"},
           {"site: factory\n", "site: factory\nresources: {accelerator: T4, count: 2}\n",
            "resources.count: a stream uses one accelerator at most"}}) {
    std::string t = text;
    t.replace(t.find(from), from.size(), to);
    StatusOr<model::Job> j = spec::ParseJob(t, "s.yaml", fleet->fleet, model::ThroughputTable{});
    ASSERT_FALSE(j.ok()) << t;
    EXPECT_NE(j.status().message().find(want), std::string::npos) << j.status().message();
  }
}

}  // namespace
}  // namespace meridian::workloads::stream
