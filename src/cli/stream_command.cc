// `meridian stream run` and `meridian sensors simulate` (docs/streams.md): a stream
// spec run against MQTT brokers, and the simulated sensors that feed one.
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "common/temp_dir.h"
#include "common/units.h"
#include "spec/stream_spec.h"
#include "workloads/stream/runner.h"
#include "workloads/stream/sink.h"

namespace meridian::cli {
namespace {

namespace ws = workloads::stream;

std::atomic<bool> g_stop{false};

void OnStopSignal(int) { g_stop.store(true); }

void StopOnSignals() {
  struct sigaction sa {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

ws::MqttOptions Mqtt(const MqttFlags& f) {
  ws::MqttOptions o = ws::MqttOptionsFromEnvironment();
  if (!f.broker.empty()) o.url = f.broker;
  if (!f.user.empty()) o.user = f.user;
  if (!f.password_file.empty()) o.password_file = f.password_file;
  if (!f.ca.empty()) o.ca_file = f.ca;
  if (!f.cert.empty()) o.cert_file = f.cert;
  if (!f.key.empty()) o.key_file = f.key;
  return o;
}

StatusOr<int64_t> DurationMs(const std::string& text, std::string_view flag) {
  StatusOr<int64_t> us = ParseDurationUs(text);
  if (!us.ok()) return us.status().WithPrefix(flag);
  return *us / 1000;
}

}  // namespace

Status RunStreamCommand(const StreamRunCommandOptions& o, std::ostream& out, std::ostream& err) {
  model::StreamSpec spec;
  if (!o.file.empty()) {
    MERIDIAN_ASSIGN_OR_RETURN(spec, spec::LoadStreamSpec(o.file));
  } else if (const char* text = std::getenv(spec::kStreamSpecEnv); text != nullptr) {
    // A stream job's task (spec::ParseStreamJob).
    MERIDIAN_ASSIGN_OR_RETURN(spec, spec::ParseStreamSpec(text, "the stream job's spec"));
  } else {
    return InvalidArgumentError(fmt::format("give a stream spec: meridian stream run FILE (or set {})",
                                            spec::kStreamSpecEnv));
  }
  ws::StreamRunOptions run;
  run.mqtt = Mqtt(o.mqtt);
  run.mqtt.client_id = o.client_id;
  run.state_dir = !o.state_dir.empty() ? o.state_dir : Getenv("MERIDIAN_STREAM_STATE_DIR");
  if (!run.state_dir.empty()) {
    if (!o.client_id.empty()) {
      return InvalidArgumentError("--client-id and --state-dir: give one (the state directory keeps its session's id)");
    }
    // What the agent gives a task: an earlier attempt's checkpoint, and where to leave one.
    run.checkpoint_file = Getenv("MERIDIAN_CHECKPOINT");
    run.checkpoint_copy_dir = Getenv("MERIDIAN_CHECKPOINT_DIR");
  }
  if (!spec.sink.site.empty()) {
    // Another site's broker: what the agent gives a stream job's task (or the same
    // variables set by hand).
    ws::MqttOptions sink = ws::MqttOptionsFromEnvironment("MERIDIAN_MQTT_SINK");
    if (!sink.url.empty()) {
      run.sink_mqtt = std::move(sink);
    } else if (spec.sink.site != spec.site) {
      return InvalidArgumentError(fmt::format(
          "sink.site '{}': this run has no broker for that site (a stream job's agent gives it; by hand, set "
          "MERIDIAN_MQTT_SINK_URL, _USER, _PASSWORD_FILE and _CA)",
          spec.sink.site));
    }
  }
  run.on_notice = [&](const std::string& notice) { err << notice << "\n" << std::flush; };
  run.stop_after_idle_ms = spec.end_after_idle_ms;
  if (!o.stop_after_idle.empty()) {
    MERIDIAN_ASSIGN_OR_RETURN(run.stop_after_idle_ms, DurationMs(o.stop_after_idle, "--stop-after-idle"));
  }
  const std::string source_url = spec.source.broker.empty() ? run.mqtt.url : spec.source.broker;
  std::string sink_is = fmt::format("'{}'", spec.sink.topic);
  if (!spec.sink.site.empty()) sink_is += " at site " + spec.sink.site;
  if (!spec.sink_dataset.empty()) sink_is = fmt::format("dataset '{}'", spec.sink_dataset);
  run.on_subscribed = [&] {
    err << fmt::format("stream {}: reading '{}' at {}; results to {}\n", spec.name, spec.source.topic, source_url,
                       sink_is)
        << std::flush;
  };
  MERIDIAN_ASSIGN_OR_RETURN(run.ops, ChooseDevice(o.device, "stream run"));
  // A dataset sink's results go to a file (the state directory's, which a restore
  // cuts back to its checkpoint; without one, a temporary file), then to stdout as the
  // task's output (the dataset's shard); what the run counted then goes to stderr.
  std::unique_ptr<TempDir> temp_results;
  if (!spec.sink_dataset.empty() && run.state_dir.empty()) {
    MERIDIAN_ASSIGN_OR_RETURN(temp_results, TempDir::Make("meridian-stream"));
    run.results_file = temp_results->path() + "/results";
  }
  StopOnSignals();
  MERIDIAN_ASSIGN_OR_RETURN(ws::StreamRunReport report, ws::RunStream(spec, run, g_stop));
  if (!spec.sink_dataset.empty()) MERIDIAN_RETURN_IF_ERROR(ws::CopyResults(report.results_file, report.sink_bytes, out));
  std::ostream& counted = spec.sink_dataset.empty() ? out : err;
  const ws::StreamCounters& c = report.counters;
  if (o.json) {
    nlohmann::json j = {{"stream", spec.name},       {"device", run.ops->name()},       {"records", c.payloads},   {"accepted", c.accepted},
                        {"duplicates", c.duplicates}, {"late", c.late},         {"filtered", c.filtered},
                        {"malformed", c.malformed},   {"results", c.results},   {"anomalies", c.anomalies},
                        {"first_error", c.first_error}};
    j["sink_disconnects"] = report.sink_disconnects;
    if (!run.state_dir.empty()) {
      j["source_reconnects"] = report.source_reconnects;
      j["restored"] = report.restored;
      j["replayed"] = report.replayed;
      j["checkpoints"] = report.checkpoints;
      j["replay_missing"] = report.replay_missing;
      j["ended_before"] = report.ended_before;
    }
    counted << j.dump() << "\n";
  } else {
    counted << fmt::format(
        "stream {}: {} records read: {} accepted, {} duplicates, {} late, {} filtered, {} malformed; {} windows "
        "written ({} anomalies)\n",
        spec.name, c.payloads, c.accepted, c.duplicates, c.late, c.filtered, c.malformed, c.results, c.anomalies);
    if (!c.first_error.empty()) counted << "first malformed record: " << c.first_error << "\n";
  }
  return OkStatus();
}

Status RunSensorsSimulate(const SensorsSimulateOptions& o, std::ostream& out) {
  ws::SimulateOptions sim;
  sim.mqtt = Mqtt(o.mqtt);
  if (!o.topic_prefix.empty()) {
    sim.topic_prefix = o.topic_prefix;
  } else if (!o.site.empty()) {
    sim.topic_prefix = "sensors/" + o.site;
  }
  if (o.devices < 1 || o.devices > 1'000'000) return InvalidArgumentError("--devices: expected 1 to 1,000,000");
  if (o.records < 1 || o.records > 1'000'000'000 / o.devices) {
    return InvalidArgumentError("--records: expected at least 1, and at most 1e9 records in all");
  }
  if (!(o.rate >= 0)) return InvalidArgumentError("--rate: expected records a second, 0 for as fast as possible");
  sim.devices = o.devices;
  sim.records_per_device = o.records;
  sim.rate = o.rate;
  sim.seed = o.seed;
  MERIDIAN_ASSIGN_OR_RETURN(sim.period_ms, DurationMs(o.period, "--period"));
  MERIDIAN_ASSIGN_OR_RETURN(sim.jitter_ms, DurationMs(o.jitter, "--jitter"));
  if (o.print) {
    ws::SensorSimulator records(sim);
    model::SensorRecord r;
    while (records.Next(&r)) out << sim.topic_prefix << "/" << r.device << " " << ws::FormatRecord(r) << "\n";
    return OkStatus();
  }
  StopOnSignals();
  MERIDIAN_ASSIGN_OR_RETURN(int64_t sent, ws::SimulateSensors(sim, g_stop));
  out << fmt::format("published {} records from {} devices to {}/*\n", sent, sim.devices, sim.topic_prefix);
  return OkStatus();
}

}  // namespace meridian::cli
