// ResultSink against a real mosquitto (Debian's, scripts/install-deps.sh) on loopback.
#include "workloads/stream/sink.h"

#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "common/net.h"
#include "common/subprocess.h"
#include "common/temp_dir.h"

namespace meridian::workloads::stream {
namespace {

// A broker of the test's own on a free loopback port (anonymous: nothing else can
// reach loopback in the test's run, and the sink's authentication is tested by
// tests/stream_test.sh against meridian up's brokers).
class TestBroker {
 public:
  ~TestBroker() {
    if (pid_ > 0 && kill(pid_, SIGTERM) == 0) waitpid(pid_, nullptr, 0);
  }
  Status Start() {
    const std::string mosquitto = FindProgram("mosquitto");
    if (mosquitto.empty()) return FailedPreconditionError("no mosquitto (scripts/install-deps.sh installs it)");
    MERIDIAN_ASSIGN_OR_RETURN(dir_, TempDir::Make("meridian-sink-test"));
    MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<TcpListener> probe, TcpListener::Listen("127.0.0.1", 0));
    const int port = probe->port();
    probe.reset();
    std::ofstream(dir_->path() + "/mosquitto.conf")
        << fmt::format("listener {} 127.0.0.1\nallow_anonymous true\npersistence false\nuser {}\n", port,
                       getenv("USER") != nullptr ? getenv("USER") : "root");
    MERIDIAN_ASSIGN_OR_RETURN(pid_, SpawnDetached({mosquitto, "-c", dir_->path() + "/mosquitto.conf"},
                                                  dir_->path() + "/mosquitto.log"));
    mqtt_.url = fmt::format("mqtt://127.0.0.1:{}", port);
    for (int i = 0; i < 100; ++i) {
      if (MqttClient::Connect(mqtt_).ok()) return OkStatus();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return UnavailableError("mosquitto did not start");
  }
  const MqttOptions& mqtt() const { return mqtt_; }

 private:
  std::unique_ptr<TempDir> dir_;
  int pid_ = 0;
  MqttOptions mqtt_;
};

// Waits until the sink's broker has acknowledged `n` results (at most 5 s).
bool AcknowledgedWithin(const ResultSink& sink, int64_t n) {
  for (int i = 0; i < 500 && sink.stats().acknowledged < n; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return sink.stats().acknowledged == n;
}

// A result after a quiet spell longer than the stall bound is not a stall: the bound
// runs from the oldest message on the wire. (Before the fix, each batch after 10 s
// without results dropped the connection and went again.)
TEST(ResultSinkTest, AResultAfterAQuietSpellIsNotTakenForAStall) {
  TestBroker broker;
  ASSERT_TRUE(broker.Start().ok());
  ResultSinkOptions o;
  o.mqtt = broker.mqtt();
  o.topic = "results/t";
  o.stall_ms = 300;
  ResultSink sink(o, {"{\"r\":0}"});
  ASSERT_TRUE(AcknowledgedWithin(sink, 1));
  for (int64_t i = 1; i <= 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // quieter than the stall bound
    sink.Push(fmt::format("{{\"r\":{}}}", i));
    ASSERT_TRUE(AcknowledgedWithin(sink, i + 1));
  }
  sink.Stop();
  const ResultSink::Stats st = sink.stats();
  EXPECT_EQ(st.acknowledged, 4);
  EXPECT_EQ(st.pending, 0);
  EXPECT_EQ(st.disconnects, 0) << st.last_drop.ToString();
}

}  // namespace
}  // namespace meridian::workloads::stream
