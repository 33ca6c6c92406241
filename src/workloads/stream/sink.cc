#include "workloads/stream/sink.h"

#include <time.h>

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

namespace meridian::workloads::stream {
namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Errors that another try would meet again: the broker refused who we are, or what
// we asked; or the options are wrong.
bool Permanent(const Status& s) {
  return s.code() == StatusCode::kUnauthenticated || s.code() == StatusCode::kPermissionDenied ||
         s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kNotFound;
}

}  // namespace

int64_t ThreadCpuUs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t{ts.tv_sec} * 1'000'000 + ts.tv_nsec / 1000;
}

ResultSink::ResultSink(ResultSinkOptions options, std::vector<std::string> pending) : options_(std::move(options)) {
  for (std::string& r : pending) queue_.push_back(std::move(r));
  thread_ = std::thread([this] { Run(); });
}

ResultSink::~ResultSink() { Stop(); }

void ResultSink::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ResultSink::Push(std::string result) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(result));
  }
  cv_.notify_all();
}

std::vector<std::string> ResultSink::Pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::vector<std::string>(queue_.begin(), queue_.end());
}

bool ResultSink::WaitEmpty(int64_t timeout_ms) const {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return queue_.empty() || !error_.ok(); }) &&
         queue_.empty();
}

ResultSink::Stats ResultSink::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats st;
  st.pending = static_cast<int64_t>(queue_.size());
  st.full = st.pending >= options_.max_pending;
  st.acknowledged = acknowledged_;
  st.disconnects = disconnects_;
  st.failure = failure_;
  st.error = error_;
  st.cpu_us = cpu_us_;
  return st;
}

void ResultSink::Run() {
  struct CpuAtExit {
    ResultSink* self;
    ~CpuAtExit() {
      const int64_t used = ThreadCpuUs();
      std::lock_guard<std::mutex> lock(self->mu_);
      self->cpu_us_ = used;
    }
  } cpu_at_exit{this};
  std::unique_ptr<MqttClient> client;
  int64_t acked_seen = 0;
  int64_t progress_ms = 0;  // when the broker last acknowledged (or we connected)
  auto drop = [&](Status why) {
    client->Disconnect();
    client.reset();
    std::lock_guard<std::mutex> lock(mu_);
    sent_ = 0;  // what was on the wire goes again, in order
    ++disconnects_;
    failure_ = why.WithPrefix("the sink's broker");
  };
  while (true) {
    if (!client) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stop_) return;
      }
      StatusOr<std::unique_ptr<MqttClient>> c = MqttClient::Connect(options_.mqtt);
      std::unique_lock<std::mutex> lock(mu_);
      if (!c.ok()) {
        if (Permanent(c.status())) {
          error_ = c.status().WithPrefix("the sink");
          cv_.notify_all();
          return;
        }
        failure_ = c.status().WithPrefix("the sink's broker");
        cv_.wait_for(lock, std::chrono::milliseconds(options_.retry_ms), [&] { return stop_; });
        continue;
      }
      client = std::move(*c);
      failure_ = OkStatus();
      sent_ = 0;
      acked_seen = 0;
      progress_ms = NowMs();
    }
    // What is not on the wire yet, within the client's window.
    std::vector<std::string> batch;
    bool idle = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (stop_) break;
      const int64_t room = client->max_inflight() - client->unacked();
      while (sent_ < queue_.size() && static_cast<int64_t>(batch.size()) < room) batch.push_back(queue_[sent_++]);
      idle = batch.empty() && client->unacked() == 0;
      // Nothing to send or to hear back: wait for a result (the loop still runs now
      // and then, for the connection's keepalive).
      if (idle) cv_.wait_for(lock, std::chrono::milliseconds(200), [&] { return stop_ || sent_ < queue_.size(); });
    }
    Status s = OkStatus();
    for (const std::string& r : batch) {
      s = client->Publish(options_.topic, r);
      if (!s.ok()) break;
    }
    if (s.ok()) s = client->Poll(idle ? 0 : 2);
    if (!s.ok()) {
      drop(s);
      continue;
    }
    const int64_t acked = client->acked();
    if (acked > acked_seen) {
      // A broker acknowledges QoS 1 messages in the order it received them (MQTT 3.1.1, 4.6).
      std::lock_guard<std::mutex> lock(mu_);
      const size_t n = std::min<size_t>(static_cast<size_t>(acked - acked_seen), sent_);
      queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(n));
      sent_ -= n;
      acknowledged_ += static_cast<int64_t>(n);
      acked_seen = acked;
      progress_ms = NowMs();
      cv_.notify_all();
    } else if (client->unacked() > 0 && NowMs() - progress_ms > options_.stall_ms) {
      // A broker that stopped answering, or a link cut without a word.
      drop(UnavailableError(fmt::format("no acknowledgement for {} ms", options_.stall_ms)));
    }
  }
  if (client) client->Disconnect();
}

}  // namespace meridian::workloads::stream
