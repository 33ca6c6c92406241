// meridian bench stream (docs/streams.md): a mosquitto on loopback started for the
// run, simulated sensors publishing to it at QoS 1 as fast as it takes them, and in
// the same run:
//   - the broker alone: a subscriber that only counts (no processing);
//   - a stream with a filter, 1 s windows and detect on: records a second, and per
//     second of the stream thread's CPU;
//   - latency: sensors paced at --latency-rate with event time = publish time; each
//     window's result, as its subscriber receives it, less its end (when the record
//     that closes it is published).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "common/net.h"
#include "common/subprocess.h"
#include "common/temp_dir.h"
#include "security/pki.h"
#include "spec/stream_spec.h"
#include "workloads/stream/runner.h"

namespace meridian::cli {
namespace {

namespace fs = std::filesystem;
namespace ws = workloads::stream;

int64_t SteadyUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A broker of the run's own: loopback, one user, unbounded queues (a backlog is
// what the figures measure, not a loss).
class Broker {
 public:
  static StatusOr<std::unique_ptr<Broker>> Start() {
    const std::string mosquitto = FindProgram("mosquitto");
    if (mosquitto.empty()) return FailedPreconditionError("bench stream needs mosquitto (scripts/install-deps.sh)");
    auto b = std::unique_ptr<Broker>(new Broker());
    MERIDIAN_ASSIGN_OR_RETURN(b->dir_, TempDir::Make("meridian-bench-stream"));
    const fs::path d = b->dir_->path();
    MERIDIAN_ASSIGN_OR_RETURN(std::string password, security::RandomHex(16));
    MERIDIAN_RETURN_IF_ERROR(WritePrivateFile(d / "password", password + "\n", true));
    MERIDIAN_RETURN_IF_ERROR(AddMqttUser(d / "passwd", "bench", password, true));
    MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<TcpListener> probe, TcpListener::Listen("127.0.0.1", 0));
    const int port = probe->port();
    probe.reset();
    MERIDIAN_RETURN_IF_ERROR(WriteFileAtomically(
        d / "mosquitto.conf",
        fmt::format("listener {} 127.0.0.1\nallow_anonymous false\npassword_file {}\npersistence false\n"
                    "max_queued_messages 0\nmax_inflight_messages 1000\nset_tcp_nodelay true\nuser {}\n",
                    port, (d / "passwd").string(), getenv("USER") != nullptr ? getenv("USER") : "root")));
    MERIDIAN_ASSIGN_OR_RETURN(b->pid_, SpawnDetached({mosquitto, "-c", (d / "mosquitto.conf").string()},
                                                     (d / "mosquitto.log").string()));
    b->mqtt_.url = fmt::format("mqtt://127.0.0.1:{}", port);
    b->mqtt_.user = "bench";
    b->mqtt_.password_file = (d / "password").string();
    for (int i = 0; i < 100; ++i) {
      if (ws::MqttClient::Connect(b->mqtt_).ok()) return b;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return UnavailableError(fmt::format("bench stream: mosquitto did not start; see {}/mosquitto.log", d.string()));
  }
  ~Broker() {
    if (pid_ > 0) kill(pid_, SIGTERM);
  }
  const ws::MqttOptions& mqtt() const { return mqtt_; }

 private:
  Broker() = default;
  std::unique_ptr<TempDir> dir_;
  int pid_ = 0;
  ws::MqttOptions mqtt_;
};

model::StreamSpec BenchSpec(const std::string& source, const std::string& sink, int64_t out_of_orderness_ms) {
  StatusOr<model::StreamSpec> spec = spec::ParseStreamSpec(
      fmt::format("kind: stream\nname: bench\nsource: {{topic: '{}'}}\nsink: {{topic: '{}'}}\n"
                  "operators:\n  - filter: {{min: -40, max: 125}}\n"
                  "  - window: {{size: 1s, out_of_orderness: {}ms}}\n  - detect: {{threshold: 3, history: 8}}\n",
                  source, sink, out_of_orderness_ms),
      "bench");
  MERIDIAN_CHECK_MSG(spec.ok(), spec.status().ToString());
  return *spec;
}

// Runs the stream on a thread of its own until `records` were read and a second passed.
struct StreamThread {
  std::thread thread;
  std::atomic<bool> subscribed{false};
  std::atomic<bool> stop{false};
  StatusOr<ws::StreamRunReport> report = InternalError("not run");

  // Exactly-once on, as in a stream job: a state directory of the run's own.
  void Start(const model::StreamSpec& spec, const ws::MqttOptions& mqtt, const std::string& state_dir) {
    thread = std::thread([this, spec, mqtt, state_dir] {
      ws::StreamRunOptions run;
      run.mqtt = mqtt;
      run.state_dir = state_dir;
      run.stop_after_idle_ms = 1000;
      run.on_subscribed = [this] { subscribed = true; };
      report = ws::RunStream(spec, run, stop);
      subscribed = true;  // even on failure: no one waits forever
    });
    while (!subscribed) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  StatusOr<ws::StreamRunReport> Join() {
    thread.join();
    return report;
  }
};

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}

}  // namespace

Status RunBenchStream(const BenchStreamOptions& o, std::ostream& out) {
  if (o.devices < 1 || o.devices > 100'000) return InvalidArgumentError("--devices: expected 1 to 100,000");
  if (o.records < o.devices || o.records > 100'000'000) {
    return InvalidArgumentError("--records: expected at least one per device, at most 100,000,000");
  }
  if (!(o.latency_rate > 0) || o.latency_rate > 1e6) return InvalidArgumentError("--latency-rate: expected 1 to 1e6");
  if (o.latency_seconds < 2 || o.latency_seconds > 3600) return InvalidArgumentError("--latency-seconds: 2 to 3600");
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<Broker> broker, Broker::Start());
  const int64_t per_device = o.records / o.devices;
  const int64_t total = per_device * o.devices;
  std::atomic<bool> never{false};
  auto sensors = [&](const std::string& prefix) {
    ws::SimulateOptions sim;
    sim.mqtt = broker->mqtt();
    sim.topic_prefix = prefix;
    sim.devices = o.devices;
    sim.records_per_device = per_device;
    sim.rate = 0;
    sim.period_ms = 100;
    return sim;
  };

  // 1. The broker alone: publish, and a subscriber that counts.
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<ws::MqttClient> counter, ws::MqttClient::Connect(broker->mqtt()));
  MERIDIAN_RETURN_IF_ERROR(counter->Subscribe("bench/plain/#"));
  std::atomic<int64_t> last_plain_us{0};
  Status counted;
  std::thread count_thread([&] {
    const int64_t deadline = SteadyUs() + 600'000'000;
    while (counter->received() < total && SteadyUs() < deadline) {
      counted = counter->Poll(50);
      if (!counted.ok()) return;
    }
    last_plain_us = SteadyUs();
  });
  const int64_t plain_start = SteadyUs();
  StatusOr<int64_t> sent = ws::SimulateSensors(sensors("bench/plain"), never);
  count_thread.join();
  MERIDIAN_RETURN_IF_ERROR(sent.status());
  MERIDIAN_RETURN_IF_ERROR(counted);
  if (counter->received() < total) {
    return DataLossError(fmt::format("bench stream: the plain subscriber got {} of {} records", counter->received(), total));
  }
  counter.reset();
  const double plain_s = static_cast<double>(last_plain_us - plain_start) / 1e6;
  const double broker_rate = static_cast<double>(total) / plain_s;

  // 2. The stream, windows and detect on.
  StreamThread stream;
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<TempDir> state, TempDir::Make("meridian-bench-stream-state"));
  stream.Start(BenchSpec("bench/stream/#", "bench/results", 200), broker->mqtt(), state->path() + "/throughput");
  const int64_t stream_start = SteadyUs();
  MERIDIAN_RETURN_IF_ERROR(ws::SimulateSensors(sensors("bench/stream"), never).status());
  MERIDIAN_ASSIGN_OR_RETURN(ws::StreamRunReport report, stream.Join());
  if (report.counters.accepted != total) {
    return DataLossError(fmt::format("bench stream: the stream accepted {} of {} records ({} late, {} duplicates)",
                                     report.counters.accepted, total, report.counters.late,
                                     report.counters.duplicates));
  }
  const double stream_s = static_cast<double>(report.last_record_steady_us - stream_start) / 1e6;
  const double stream_rate = static_cast<double>(total) / stream_s;
  const double per_core = static_cast<double>(total) / (static_cast<double>(report.cpu_us) / 1e6);

  // 3. Latency: paced sensors, event time = publish time, no out-of-orderness; a
  // window closes with the first record past its end.
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<ws::MqttClient> results, ws::MqttClient::Connect(broker->mqtt()));
  MERIDIAN_RETURN_IF_ERROR(results->Subscribe("bench/latency-results"));
  std::vector<double> latencies_ms;
  std::atomic<int64_t> published_until_ms{INT64_MAX};
  std::atomic<bool> results_done{false};
  results->SetHandler([&](std::string_view, std::string_view payload) {
    StatusOr<model::WindowResult> r = ws::ParseResult(payload);
    // Windows written at the end of input (after the sensors stopped) closed by no record.
    if (r.ok() && r->window_end_ms <= published_until_ms.load()) {
      latencies_ms.push_back(static_cast<double>(WallMs() - r->window_end_ms));
    }
  });
  Status results_status;
  std::thread results_thread([&] {
    while (!results_done) {
      results_status = results->Poll(20);
      if (!results_status.ok()) return;
    }
  });
  StreamThread paced;
  paced.Start(BenchSpec("bench/latency/#", "bench/latency-results", 0), broker->mqtt(), state->path() + "/latency");
  ws::SimulateOptions sim = sensors("bench/latency");
  sim.rate = o.latency_rate;
  sim.records_per_device = std::max<int64_t>(1, static_cast<int64_t>(o.latency_rate) * o.latency_seconds / o.devices);
  sim.event_time_now = true;
  MERIDIAN_RETURN_IF_ERROR(ws::SimulateSensors(sim, never).status());
  published_until_ms = WallMs() - 1;
  MERIDIAN_RETURN_IF_ERROR(paced.Join().status());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  results_done = true;
  results_thread.join();
  MERIDIAN_RETURN_IF_ERROR(results_status);
  const double p50 = Percentile(latencies_ms, 0.5);
  const double p99 = Percentile(latencies_ms, 0.99);
  const double ratio = stream_rate / broker_rate;

  if (o.json) {
    nlohmann::json j = {{"records", total},
                        {"devices", o.devices},
                        {"records_per_second", stream_rate},
                        {"records_per_second_per_core", per_core},
                        {"broker_records_per_second", broker_rate},
                        {"ratio", ratio},
                        {"windows", report.counters.results},
                        {"checkpoints", report.checkpoints},
                        {"anomalies", report.counters.anomalies},
                        {"latency_rate", o.latency_rate},
                        {"latency_windows", latencies_ms.size()},
                        {"latency_p50_ms", p50},
                        {"latency_p99_ms", p99}};
    out << j.dump(2) << "\n";
    return OkStatus();
  }
  out << fmt::format("{} records from {} devices, QoS 1 through a local mosquitto\n", total, o.devices);
  out << fmt::format("  broker alone (a subscriber that counts):  {:>10.0f} records/s\n", broker_rate);
  out << fmt::format("  stream (filter, 1 s windows, detect, exactly-once: {} checkpoints):\n", report.checkpoints);
  out << fmt::format("                                            {:>10.0f} records/s  ({:.0f} per core-second of "
                     "the stream)\n",
                     stream_rate, per_core);
  out << fmt::format("  ratio: {:.2f} of the broker's rate ({} windows, {} anomalies)\n", ratio,
                     report.counters.results, report.counters.anomalies);
  out << fmt::format("  publish -> window result at {:.0f} records/s: p50 {:.1f} ms, p99 {:.1f} ms ({} windows)\n",
                     o.latency_rate, p50, p99, latencies_ms.size());
  return OkStatus();
}

}  // namespace meridian::cli
