#include "workloads/stream/mqtt.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>

#include <fmt/format.h>
#include <mosquitto.h>

#include "spec/stream_spec.h"

namespace meridian::workloads::stream {
namespace {

constexpr int kKeepaliveSeconds = 30;
constexpr size_t kMaxPasswordBytes = 4096;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

StatusOr<std::string> ReadPassword(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError(fmt::format("MQTT password file '{}' cannot be read", path));
  std::string line;
  line.resize(kMaxPasswordBytes + 1);
  in.read(line.data(), static_cast<std::streamsize>(line.size()));
  line.resize(static_cast<size_t>(in.gcount()));
  if (line.size() > kMaxPasswordBytes) {
    return InvalidArgumentError(fmt::format("MQTT password file '{}' is longer than {} bytes", path,
                                            kMaxPasswordBytes));
  }
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
  if (line.find('\n') != std::string::npos) {
    return InvalidArgumentError(fmt::format("MQTT password file '{}' must hold one line", path));
  }
  return line;
}

Status MosquittoError(int rc, std::string_view what, const std::string& url) {
  const std::string msg = fmt::format("MQTT broker {}: {}: {}", url, what,
                                      rc == MOSQ_ERR_ERRNO ? std::strerror(errno) : mosquitto_strerror(rc));
  switch (rc) {
    case MOSQ_ERR_NO_CONN:
    case MOSQ_ERR_CONN_LOST:
    case MOSQ_ERR_ERRNO:
      return UnavailableError(msg);
    case MOSQ_ERR_NOMEM:
      return ResourceExhaustedError(msg);
    case MOSQ_ERR_PAYLOAD_SIZE:
    case MOSQ_ERR_OVERSIZE_PACKET:
    case MOSQ_ERR_INVAL:
      return InvalidArgumentError(msg);
    default:
      return InternalError(msg);
  }
}

}  // namespace

MqttOptions MqttOptionsFromEnvironment(std::string_view prefix) {
  auto env = [&](std::string_view name) { return Env(fmt::format("{}_{}", prefix, name).c_str()); };
  MqttOptions o;
  o.url = env("URL");
  o.user = env("USER");
  o.password_file = env("PASSWORD_FILE");
  o.ca_file = env("CA");
  o.cert_file = env("CERT");
  o.key_file = env("KEY");
  return o;
}

StatusOr<std::unique_ptr<MqttClient>> MqttClient::Connect(const MqttOptions& options, Handler handler) {
  static std::once_flag init;
  std::call_once(init, [] { mosquitto_lib_init(); });
  if (options.url.empty()) {
    return InvalidArgumentError("no MQTT broker: give --broker mqtt://HOST:PORT (or set MERIDIAN_MQTT_URL)");
  }
  MERIDIAN_ASSIGN_OR_RETURN(spec::MqttUrl url, spec::ParseMqttUrl(options.url));
  std::unique_ptr<MqttClient> c(new MqttClient());
  c->url_ = options.url;
  c->handler_ = std::move(handler);
  c->max_inflight_ = std::max(1, options.max_inflight);
  c->m_ = mosquitto_new(options.client_id.empty() ? nullptr : options.client_id.c_str(), options.clean_session,
                        c.get());
  if (c->m_ == nullptr) return ResourceExhaustedError("mosquitto_new failed");
  mosquitto_int_option(c->m_, MOSQ_OPT_PROTOCOL_VERSION, MQTT_PROTOCOL_V311);
  // Small messages go at once (Nagle's algorithm would hold a result back for the
  // broker's delayed acknowledgement).
  mosquitto_int_option(c->m_, MOSQ_OPT_TCP_NODELAY, 1);
  mosquitto_max_inflight_messages_set(c->m_, static_cast<unsigned>(c->max_inflight_));
  mosquitto_connect_callback_set(c->m_, &MqttClient::OnConnect);
  mosquitto_disconnect_callback_set(c->m_, &MqttClient::OnDisconnect);
  mosquitto_publish_callback_set(c->m_, &MqttClient::OnPublish);
  mosquitto_subscribe_callback_set(c->m_, &MqttClient::OnSubscribe);
  mosquitto_message_callback_set(c->m_, &MqttClient::OnMessage);
  if (!options.user.empty()) {
    std::string password;
    if (!options.password_file.empty()) {
      MERIDIAN_ASSIGN_OR_RETURN(password, ReadPassword(options.password_file));
    }
    int rc = mosquitto_username_pw_set(c->m_, options.user.c_str(),
                                       options.password_file.empty() ? nullptr : password.c_str());
    if (rc != MOSQ_ERR_SUCCESS) return MosquittoError(rc, "user", options.url);
  }
  if (url.tls) {
    int rc = mosquitto_tls_set(c->m_, options.ca_file.empty() ? nullptr : options.ca_file.c_str(),
                               options.ca_file.empty() ? "/etc/ssl/certs" : nullptr,
                               options.cert_file.empty() ? nullptr : options.cert_file.c_str(),
                               options.key_file.empty() ? nullptr : options.key_file.c_str(), nullptr);
    if (rc != MOSQ_ERR_SUCCESS) return MosquittoError(rc, "TLS files", options.url);
  }
  int rc = mosquitto_connect(c->m_, url.host.c_str(), url.port, kKeepaliveSeconds);
  if (rc != MOSQ_ERR_SUCCESS) return MosquittoError(rc, "connect", options.url);
  MERIDIAN_RETURN_IF_ERROR(
      c->WaitFor([&] { return c->connack_ >= 0 || c->disconnected_; }, options.connect_timeout_ms, "its CONNACK"));
  if (c->connack_ != 0) {
    const int code = c->connack_ >= 0 ? c->connack_ : c->disconnect_rc_;
    const std::string msg = fmt::format("MQTT broker {} refused the connection: {}", options.url,
                                        c->connack_ >= 0 ? mosquitto_connack_string(code) : mosquitto_strerror(code));
    // 4: bad user name or password, 5: not authorised.
    if (c->connack_ == 4 || c->connack_ == 5) return UnauthenticatedError(msg);
    return UnavailableError(msg);
  }
  return c;
}

Status MqttClient::EndSession(MqttOptions options) {
  options.clean_session = true;
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<MqttClient> c, Connect(options));
  c->Disconnect();
  return OkStatus();
}

MqttClient::~MqttClient() {
  if (m_ != nullptr) mosquitto_destroy(m_);
}

void MqttClient::OnConnect(mosquitto*, void* self, int rc) { static_cast<MqttClient*>(self)->connack_ = rc; }

void MqttClient::OnDisconnect(mosquitto*, void* self, int rc) {
  auto* c = static_cast<MqttClient*>(self);
  c->disconnected_ = true;
  c->disconnect_rc_ = rc;
}

void MqttClient::OnPublish(mosquitto*, void* self, int) { ++static_cast<MqttClient*>(self)->acked_; }

void MqttClient::OnSubscribe(mosquitto*, void* self, int mid, int count, const int* granted) {
  auto* c = static_cast<MqttClient*>(self);
  if (mid == c->suback_mid_) c->suback_qos_ = count > 0 ? granted[0] : 0x80;
}

void MqttClient::OnMessage(mosquitto*, void* self, const mosquitto_message* message) {
  auto* c = static_cast<MqttClient*>(self);
  ++c->received_;
  if (!c->handler_) return;
  c->handler_(message->topic ? std::string_view(message->topic) : std::string_view(),
              std::string_view(static_cast<const char*>(message->payload),
                               static_cast<size_t>(std::max(0, message->payloadlen))));
}

Status MqttClient::Poll(int timeout_ms, int max_messages) {
  const int64_t before = received_;
  int rc = mosquitto_loop(m_, timeout_ms, 1);
  while (rc == MOSQ_ERR_SUCCESS && received_ > before && received_ - before < max_messages) {
    const int64_t got = received_;
    rc = mosquitto_loop(m_, 0, 1);
    if (received_ == got) break;  // nothing more waiting
  }
  if (rc != MOSQ_ERR_SUCCESS) return MosquittoError(rc, "connection", url_);
  return OkStatus();
}

Status MqttClient::WaitFor(const std::function<bool()>& done, int64_t timeout_ms, std::string_view what) {
  const int64_t deadline = NowMs() + timeout_ms;
  while (!done()) {
    const int64_t left = deadline - NowMs();
    if (left <= 0) {
      return DeadlineExceededError(fmt::format("MQTT broker {}: no {} within {} ms", url_, what, timeout_ms));
    }
    int rc = mosquitto_loop(m_, static_cast<int>(std::min<int64_t>(left, 100)), 1);
    if (rc != MOSQ_ERR_SUCCESS && !done()) {
      if (connack_ < 0 && disconnected_) return OkStatus();  // the caller reads why
      return MosquittoError(rc, fmt::format("waiting for {}", what), url_);
    }
  }
  return OkStatus();
}

Status MqttClient::Subscribe(const std::string& topic) {
  suback_qos_ = -1;
  int rc = mosquitto_subscribe(m_, &suback_mid_, topic.c_str(), 1);
  if (rc != MOSQ_ERR_SUCCESS) return MosquittoError(rc, fmt::format("subscribe to '{}'", topic), url_);
  MERIDIAN_RETURN_IF_ERROR(WaitFor([&] { return suback_qos_ >= 0; }, 10'000, "SUBACK"));
  if (suback_qos_ > 2) {
    return PermissionDeniedError(fmt::format("MQTT broker {} refused the subscription to '{}'", url_, topic));
  }
  return OkStatus();
}

Status MqttClient::Publish(const std::string& topic, std::string_view payload) {
  if (unacked() >= max_inflight_) {
    MERIDIAN_RETURN_IF_ERROR(WaitFor([&] { return unacked() < max_inflight_; }, 30'000, "PUBACK"));
  }
  int rc = mosquitto_publish(m_, nullptr, topic.c_str(), static_cast<int>(payload.size()), payload.data(), 1, false);
  if (rc != MOSQ_ERR_SUCCESS) return MosquittoError(rc, fmt::format("publish to '{}'", topic), url_);
  ++published_;
  return OkStatus();
}

Status MqttClient::Drain(int64_t timeout_ms) { return WaitFor([&] { return unacked() == 0; }, timeout_ms, "PUBACK"); }

void MqttClient::Disconnect() {
  if (m_ == nullptr) return;
  mosquitto_disconnect(m_);
  mosquitto_loop(m_, 100, 1);
}

}  // namespace meridian::workloads::stream
