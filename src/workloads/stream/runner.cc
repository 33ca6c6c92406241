#include "workloads/stream/runner.h"

#include <chrono>
#include <cmath>
#include <deque>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "common/env.h"
#include "model/run_state.h"
#include "workloads/stream/sink.h"
#include "workloads/stream/state.h"

namespace meridian::workloads::stream {
namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t NowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Payloads read but not yet given to the engine: past this many the loop stops
// reading until the engine catches up. (One read of the socket adds what libmosquitto
// has buffered, at most its receive window.)
constexpr size_t kMaxInbox = 100'000;
// Records read in one turn of the loop before the operators run.
constexpr int kReadsPerTurn = 256;

}  // namespace

StatusOr<StreamRunReport> RunStream(const model::StreamSpec& spec, const StreamRunOptions& options,
                                    const std::atomic<bool>& stop) {
  const int64_t cpu_start = ThreadCpuUs();
  StreamEngine engine(spec, options.ops);
  StreamRunReport report;
  MqttOptions source_opts = options.mqtt;
  if (!spec.source.broker.empty()) source_opts.url = spec.source.broker;
  std::unique_ptr<StreamState> state;
  std::optional<StreamCheckpoint> restored_from;
  int64_t replay_from = 0;
  if (!options.state_dir.empty()) {
    MERIDIAN_ASSIGN_OR_RETURN(state, StreamState::Open(options.state_dir));
    StatusOr<StreamCheckpoint> from = state->LoadCheckpoint();
    if (from.ok()) {
      report.restored = "local";
    } else if (from.status().code() != StatusCode::kNotFound) {
      return from.status();
    } else if (!options.checkpoint_file.empty()) {
      from = ReadStreamCheckpoint(options.checkpoint_file);
      if (!from.ok()) return from.status();
      report.restored = "object";
      // The same session at the broker as the run that took it.
      MERIDIAN_RETURN_IF_ERROR(state->SetClientId(from->client_id));
    }
    if (from.ok()) MERIDIAN_RETURN_IF_ERROR(engine.Restore(from->engine));
    if (from.ok() && from->ended) {
      if (options.on_notice) {
        options.on_notice(fmt::format("stream {}: it ended before (its state in {} says so): nothing left to do; "
                                      "remove the directory to run it afresh",
                                      spec.name, options.state_dir));
      }
      report.ended_before = true;
      report.results_file = state->results_path();
      report.sink_bytes = from->sink_bytes;
      report.counters = engine.counters();
      report.cpu_us = ThreadCpuUs() - cpu_start;
      return report;
    }
    if (from.ok()) {
      replay_from = from->replay_from;
      report.replay_missing = !state->HasSegmentsFrom(replay_from);
      restored_from = std::move(*from);
    }
    source_opts.client_id = state->client_id();
    source_opts.clean_session = false;
  }
  // Results go to a file (a dataset sink: cut back to the checkpoint's length), or out
  // from a thread of their own (sink.h): an MQTT sink across a cut link holds them, in
  // order, while the source is read on.
  std::unique_ptr<ResultFile> file;
  std::unique_ptr<ResultSink> sink;
  std::vector<std::string> pending;
  if (restored_from) pending = std::move(restored_from->results);
  const int64_t pending_at_start = static_cast<int64_t>(pending.size());
  if (!spec.sink_dataset.empty()) {
    report.results_file = state ? state->results_path() : options.results_file;
    if (report.results_file.empty()) {
      return InvalidArgumentError(fmt::format("stream {}: its sink is a dataset, and the run was given no file for "
                                              "its results",
                                              spec.name));
    }
    const int64_t keep = restored_from ? restored_from->sink_bytes : 0;
    MERIDIAN_ASSIGN_OR_RETURN(
        file, ResultFile::Open(report.results_file, keep, static_cast<int64_t>(model::kMaxObjectOutputBytes)));
  } else {
    ResultSinkOptions sink_opts;
    sink_opts.mqtt = options.sink_mqtt ? *options.sink_mqtt : options.mqtt;
    if (!spec.sink.broker.empty()) sink_opts.mqtt.url = spec.sink.broker;
    sink_opts.mqtt.client_id.clear();
    sink_opts.mqtt.connect_timeout_ms = 5'000;
    sink_opts.topic = spec.sink.topic;
    sink_opts.max_pending = spec.max_pending_results;
    sink = std::make_unique<ResultSink>(std::move(sink_opts), std::move(pending));
  }
  std::vector<model::WindowResult> results;
  auto publish = [&]() -> Status {
    for (const model::WindowResult& r : results) {
      if (file) {
        MERIDIAN_RETURN_IF_ERROR(file->Append(FormatResult(r)));
      } else {
        sink->Push(FormatResult(r));
      }
    }
    results.clear();
    return OkStatus();
  };
  auto sink_stats = [&] { return sink ? sink->stats() : ResultSink::Stats{}; };

  // What the log holds past the checkpoint went through the operators before; again
  // now, their results are the same (and published again: a result's key is its
  // device and window).
  bool dirty = false;  // records went in since the last checkpoint
  if (state) {
    MERIDIAN_RETURN_IF_ERROR(state->Replay(replay_from, [&](std::string_view payload) {
      ++report.replayed;
      MERIDIAN_RETURN_IF_ERROR(engine.Add(payload, &results));
      return publish();
    }));
    dirty = report.replayed > 0;
    MERIDIAN_RETURN_IF_ERROR(state->StartSegment());
    if (options.on_notice && (!report.restored.empty() || report.replayed > 0)) {
      options.on_notice(fmt::format(
          "stream {}: restored {} ({} records in its windows, {} read before, {} results to send), replayed {} "
          "logged records{}",
          spec.name, report.restored.empty() ? "no checkpoint" : "the " + report.restored + " checkpoint",
          engine.open_records(), engine.counters().payloads - report.replayed, pending_at_start, report.replayed,
          report.replay_missing ? "; the log after the checkpoint is not on this node: what the lost run read after "
                                  "it is not replayed"
                                : ""));
    }
  }

  // Each record is in the log before anything else is done with it.
  std::deque<std::string> inbox;
  Status logged = OkStatus();
  auto on_message = [&](std::string_view, std::string_view payload) {
    if (state && logged.ok()) logged = state->Append(payload);
    inbox.emplace_back(payload);
  };
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<MqttClient> source, MqttClient::Connect(source_opts, on_message));
  MERIDIAN_RETURN_IF_ERROR(source->Subscribe(spec.source.topic));
  MERIDIAN_RETURN_IF_ERROR(logged);
  if (options.on_subscribed) options.on_subscribed();
  // A persistent session survives a lost connection: what came meanwhile waits at
  // the broker, and what was in flight comes again (the engine drops it as a
  // duplicate). Without one, a lost connection ends the run.
  auto read_source = [&](int timeout_ms) -> Status {
    Status s = source ? source->Poll(timeout_ms, kReadsPerTurn) : UnavailableError("not connected");
    if (s.ok() || !state) return s;
    if (source) {
      ++report.source_reconnects;
      source.reset();
      if (options.on_notice) options.on_notice(fmt::format("stream {}: the source's broker: {}; connecting again", spec.name, s.message()));
    }
    StatusOr<std::unique_ptr<MqttClient>> again = MqttClient::Connect(source_opts, on_message);
    if (again.ok()) {
      source = std::move(*again);
      return source->Subscribe(spec.source.topic);
    }
    if (again.status().code() == StatusCode::kUnauthenticated) return again.status();
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    return OkStatus();
  };

  auto checkpoint = [&]() -> Status {
    MERIDIAN_RETURN_IF_ERROR(state->Checkpoint(engine.Snapshot(), sink ? sink->Pending() : std::vector<std::string>{},
                                               file ? file->bytes() : 0, options.checkpoint_copy_dir));
    ++report.checkpoints;
    dirty = false;
    return OkStatus();
  };
  // A restored run counts its idle time from the start: what it restored may be all
  // that is left.
  int64_t last_record_ms = report.restored.empty() && report.replayed == 0 ? -1 : NowMs();
  int64_t last_checkpoint_ms = NowMs();
  int64_t sent_at_checkpoint = 0;
  bool ended = false;
  bool sink_away = false;  // said once per outage
  int64_t drops_said = 0;
  // A connection lost and made again between two looks is said all the same.
  auto say_drops = [&](const ResultSink::Stats& out) {
    if (out.disconnects > drops_said && out.failure.ok() && !sink_away && options.on_notice) {
      options.on_notice(fmt::format("stream {}: {}; connected again, sending what it had not acknowledged",
                                    spec.name, out.last_drop.message()));
    }
    drops_said = out.disconnects;
  };
  while (!stop.load()) {
    const ResultSink::Stats out = sink_stats();
    MERIDIAN_RETURN_IF_ERROR(out.error);
    say_drops(out);
    if (out.failure.ok() == sink_away) {
      sink_away = !out.failure.ok();
      if (options.on_notice) {
        options.on_notice(sink_away ? fmt::format("stream {}: {}; results are held ({} now) and sent when it is back",
                                                  spec.name, out.failure.message(), out.pending)
                                    : fmt::format("stream {}: the sink's broker is back", spec.name));
      }
    }
    if (out.full) {
      // Backpressure: the records wait at the broker until the sink takes results again.
      if (!report.backpressure) {
        report.backpressure = true;
        if (options.on_notice) {
          options.on_notice(fmt::format("stream {}: {} results wait for the sink (max_pending_results); the source "
                                        "waits at the broker",
                                        spec.name, out.pending));
        }
      }
      // (A connection that times out meanwhile is made again when reading resumes.)
      // Time not read is not idle time: the records wait, the input has not ended.
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if (last_record_ms >= 0) last_record_ms = NowMs();
    } else if (inbox.size() < kMaxInbox) {
      MERIDIAN_RETURN_IF_ERROR(read_source(inbox.empty() ? 50 : 0));
    }
    MERIDIAN_RETURN_IF_ERROR(logged);
    if (!inbox.empty()) {
      last_record_ms = NowMs();
      report.last_record_steady_us = NowUs();
      dirty = true;
    }
    while (!inbox.empty()) {
      MERIDIAN_RETURN_IF_ERROR(engine.Add(inbox.front(), &results));
      inbox.pop_front();
    }
    MERIDIAN_RETURN_IF_ERROR(publish());
    if (options.stop_after_idle_ms > 0 && last_record_ms >= 0 &&
        NowMs() - last_record_ms >= options.stop_after_idle_ms) {
      MERIDIAN_RETURN_IF_ERROR(engine.Flush(&results));
      MERIDIAN_RETURN_IF_ERROR(publish());
      ended = true;
      break;
    }
    // A checkpoint when records went in, or the sink took results, since the last.
    if (state && (dirty || out.acknowledged != sent_at_checkpoint) &&
        NowMs() - last_checkpoint_ms >= spec.checkpoint_interval_ms) {
      sent_at_checkpoint = out.acknowledged;
      MERIDIAN_RETURN_IF_ERROR(checkpoint());
      last_checkpoint_ms = NowMs();
    }
  }
  if (source) source->Disconnect();
  // Every result out before the run ends (a sink cut off holds the end until it is
  // back, or the run is stopped: then they wait in the checkpoint).
  while (sink && !sink->WaitEmpty(200)) {
    MERIDIAN_RETURN_IF_ERROR(sink->stats().error);
    if (stop.load()) break;
  }
  if (sink) sink->Stop();
  const ResultSink::Stats out = sink_stats();
  say_drops(out);
  if (file) report.sink_bytes = file->bytes();
  report.counters = engine.counters();
  report.published = out.acknowledged;
  report.unsent = out.pending;
  report.sink_disconnects = out.disconnects;
  report.cpu_us = ThreadCpuUs() - cpu_start + out.cpu_us;
  if (state) {
    if (ended && report.unsent == 0) {
      // Done: the broker stops queuing for the session, and the state says so (an
      // attempt started after this one, the first taken for lost, ends at once).
      MERIDIAN_RETURN_IF_ERROR(MqttClient::EndSession(source_opts));
      MERIDIAN_RETURN_IF_ERROR(state->End(engine.Snapshot(), report.sink_bytes));
    } else {
      MERIDIAN_RETURN_IF_ERROR(checkpoint());
    }
  } else if (report.unsent > 0) {
    return UnavailableError(fmt::format("stream {}: stopped with {} results the sink's broker did not take (without a "
                                        "state directory they are lost)",
                                        spec.name, report.unsent));
  }
  return report;
}

SensorSimulator::SensorSimulator(const SimulateOptions& options)
    : options_(options), rng_(options.seed), base_(static_cast<size_t>(std::max(0, options.devices))) {
  for (double& b : base_) b = 15.0 + 10.0 * rng_.UniformDouble();
}

bool SensorSimulator::Next(model::SensorRecord* r) {
  const SimulateOptions& o = options_;
  if (o.devices <= 0 || k_ >= o.records_per_device) return false;
  constexpr double kDayMs = 86'400'000.0;
  r->device = fmt::format("dev-{:05d}", device_);
  r->seq = static_cast<uint64_t>(k_);
  r->event_time_ms = o.start_ms + k_ * o.period_ms;
  if (o.jitter_ms > 0) r->event_time_ms += rng_.UniformRange(-o.jitter_ms, o.jitter_ms);
  if (r->event_time_ms < 0) r->event_time_ms = 0;
  const double phase = 2 * M_PI * static_cast<double>(r->event_time_ms % 86'400'000) / kDayMs;
  double v = base_[static_cast<size_t>(device_)] + 5.0 * std::sin(phase) + (rng_.UniformDouble() - 0.5);
  if (rng_.Bernoulli(0.002)) v += 25.0;  // a spike
  // Two decimals, as a thermometer reports.
  r->value = std::round(v * 100.0) / 100.0;
  if (++device_ == o.devices) {
    device_ = 0;
    ++k_;
  }
  return true;
}

std::vector<model::SensorRecord> SimulatedRecords(const SimulateOptions& o) {
  std::vector<model::SensorRecord> out;
  SensorSimulator sim(o);
  model::SensorRecord r;
  while (sim.Next(&r)) out.push_back(r);
  return out;
}

StatusOr<int64_t> SimulateSensors(const SimulateOptions& o, const std::atomic<bool>& stop) {
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<MqttClient> client, MqttClient::Connect(o.mqtt));
  SensorSimulator records(o);
  const auto start = std::chrono::steady_clock::now();
  int64_t sent = 0;
  model::SensorRecord r;
  while (!stop.load() && records.Next(&r)) {
    if (o.rate > 0) {
      const auto due = start + std::chrono::duration<double>(static_cast<double>(sent) / o.rate);
      while (std::chrono::steady_clock::now() < due) {
        const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(due - std::chrono::steady_clock::now());
        MERIDIAN_RETURN_IF_ERROR(client->Poll(static_cast<int>(std::clamp<int64_t>(wait.count(), 0, 50))));
      }
    }
    if (o.event_time_now) r.event_time_ms = WallMs();
    MERIDIAN_RETURN_IF_ERROR(client->Publish(fmt::format("{}/{}", o.topic_prefix, r.device), FormatRecord(r)));
    ++sent;
    if (sent % 256 == 0) MERIDIAN_RETURN_IF_ERROR(client->Poll(0));
  }
  MERIDIAN_RETURN_IF_ERROR(client->Drain(60'000));
  client->Disconnect();
  return sent;
}

}  // namespace meridian::workloads::stream
