// An MQTT 3.1.1 client over libmosquitto (Debian's libmosquitto-dev), for the stream
// runner's source and sink and the sensor simulator: connect (user and password,
// TLS when the URL is mqtts://), subscribe and publish at QoS 1, and a loop that
// hands each message to a handler.
//
// Security: the broker authenticates its clients (docs/streams.md: `meridian up`'s
// brokers and the tests' allow no anonymous client); the password is read from a
// file, never from the command line. With mqtts:// the broker's certificate is
// checked against the CA file, and a client certificate is shown when given.
//
// Bounds: at most `max_inflight` published messages wait for their PUBACK; Publish
// runs the loop until one is acknowledged rather than queue more. What the client
// receives is bounded by the broker's message_size_limit.
//
// Thread-safety: one thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

struct mosquitto;
struct mosquitto_message;

namespace meridian::workloads::stream {

struct MqttOptions {
  std::string url;            // mqtt://HOST:PORT or mqtts://HOST:PORT
  std::string user;           // empty: none
  std::string password_file;  // the password, one line; empty: none
  std::string ca_file;        // mqtts: the broker's CA (empty: the system's)
  std::string cert_file;      // mqtts: this client's certificate and key, if any
  std::string key_file;
  std::string client_id;      // empty: one the library makes up
  bool clean_session = true;  // false: the broker keeps this client id's subscriptions and QoS 1 messages
  int max_inflight = 1000;
  int64_t connect_timeout_ms = 10'000;
};

// The MQTT options every stream command takes by default from the environment:
// MERIDIAN_MQTT_URL, MERIDIAN_MQTT_USER, MERIDIAN_MQTT_PASSWORD_FILE, MERIDIAN_MQTT_CA,
// MERIDIAN_MQTT_CERT, MERIDIAN_MQTT_KEY (what `meridian up` gives an edge site's tasks);
// with another prefix, PREFIX_URL and so on (MERIDIAN_MQTT_SINK: the broker of the site
// a stream's sink names).
MqttOptions MqttOptionsFromEnvironment(std::string_view prefix = "MERIDIAN_MQTT");

class MqttClient {
 public:
  using Handler = std::function<void(std::string_view topic, std::string_view payload)>;

  // Connects and waits for the broker's CONNACK: Unauthenticated when it refuses the
  // user or password, Unavailable when it cannot be reached in time. `handler` gets
  // the messages from then on: with a persistent session (clean_session false) the
  // broker sends what it queued as soon as it has accepted the connection.
  static StatusOr<std::unique_ptr<MqttClient>> Connect(const MqttOptions& options, Handler handler = {});
  // Ends the persistent session of options.client_id at the broker (it stops queuing
  // for it): a clean connection with that id, at once closed.
  static Status EndSession(MqttOptions options);
  ~MqttClient();
  MqttClient(const MqttClient&) = delete;
  MqttClient& operator=(const MqttClient&) = delete;

  void SetHandler(Handler handler) { handler_ = std::move(handler); }
  // Subscribes at QoS 1 and waits for the SUBACK (PermissionDenied when refused).
  Status Subscribe(const std::string& topic);
  // Publishes at QoS 1.
  Status Publish(const std::string& topic, std::string_view payload);
  // Runs the network loop for up to timeout_ms: sends, receives, calls the handler.
  // libmosquitto reads about one message a turn: with max_messages > 1 it turns again
  // at once while messages keep coming, up to that many.
  Status Poll(int timeout_ms, int max_messages = 1);
  // Runs the loop until every published message is acknowledged.
  Status Drain(int64_t timeout_ms);
  void Disconnect();

  int64_t unacked() const { return published_ - acked_; }
  int64_t acked() const { return acked_; }
  int max_inflight() const { return max_inflight_; }
  int64_t received() const { return received_; }

 private:
  MqttClient() = default;
  static void OnConnect(mosquitto*, void* self, int rc);
  static void OnDisconnect(mosquitto*, void* self, int rc);
  static void OnPublish(mosquitto*, void* self, int mid);
  static void OnSubscribe(mosquitto*, void* self, int mid, int count, const int* granted);
  static void OnMessage(mosquitto*, void* self, const mosquitto_message* message);
  Status WaitFor(const std::function<bool()>& done, int64_t timeout_ms, std::string_view what);

  mosquitto* m_ = nullptr;
  std::string url_;
  Handler handler_;
  int max_inflight_ = 1000;
  int connack_ = -1;       // the broker's CONNACK code, -1 before it
  bool disconnected_ = false;
  int disconnect_rc_ = 0;
  int suback_mid_ = -1;
  int suback_qos_ = -1;
  int64_t published_ = 0;
  int64_t acked_ = 0;
  int64_t received_ = 0;
};

}  // namespace meridian::workloads::stream
