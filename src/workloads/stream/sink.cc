#include "workloads/stream/sink.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ostream>

#include <fmt/format.h>

#include "common/net.h"

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
  st.last_drop = last_drop_;
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
  int64_t progress_ms = 0;  // when the broker last acknowledged, we connected, or sent after a quiet spell
  auto drop = [&](Status why) {
    client->Disconnect();
    client.reset();
    std::lock_guard<std::mutex> lock(mu_);
    sent_ = 0;  // what was on the wire goes again, in order
    ++disconnects_;
    failure_ = why.WithPrefix("the sink's broker");
    last_drop_ = failure_;
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
    // The stall clock runs from the oldest message on the wire: a first result after a
    // quiet spell starts it afresh (else a stream whose results come every 10 s or
    // more took each batch for a stall, dropped the connection and sent it again).
    if (!batch.empty() && client->unacked() == 0) progress_ms = NowMs();
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

StatusOr<std::unique_ptr<ResultFile>> ResultFile::Open(const std::string& path, int64_t keep_bytes,
                                                       int64_t max_bytes) {
  std::unique_ptr<ResultFile> f(new ResultFile());
  f->path_ = path;
  f->max_bytes_ = max_bytes;
  f->fd_ = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);
  struct stat st {};
  if (f->fd_ < 0 || fstat(f->fd_, &st) != 0) {
    return UnavailableError(fmt::format("cannot open the results file {}: {}", path, std::strerror(errno)));
  }
  if (st.st_size < keep_bytes) {
    return FailedPreconditionError(fmt::format(
        "the results file {} holds {} bytes, the checkpoint counts {}: the results written before it are not on "
        "this node (the stream ran on another, lost with it); a dataset sink's results cannot be made again "
        "without them",
        path, st.st_size, keep_bytes));
  }
  // What came after the checkpoint is written again by the replay.
  if (st.st_size > keep_bytes && ftruncate(f->fd_, keep_bytes) != 0) {
    return UnavailableError(fmt::format("cannot cut {} back to its checkpoint: {}", path, std::strerror(errno)));
  }
  f->bytes_ = keep_bytes;
  return f;
}

ResultFile::~ResultFile() {
  if (fd_ >= 0) close(fd_);
}

Status ResultFile::Append(std::string_view result) {
  if (bytes_ + static_cast<int64_t>(result.size()) + 1 > max_bytes_) {
    return ResourceExhaustedError(fmt::format(
        "a dataset sink's results would pass {} MiB (what a task's output may be); end the stream sooner "
        "(end_after_idle), or send its results to an MQTT topic",
        max_bytes_ >> 20));
  }
  std::string line;
  line.reserve(result.size() + 1);
  line.append(result);
  line += '\n';
  if (!WriteAll(fd_, line)) return UnavailableError(fmt::format("cannot append to {}: {}", path_, std::strerror(errno)));
  bytes_ += static_cast<int64_t>(line.size());
  return OkStatus();
}

Status CopyResults(const std::string& path, int64_t bytes, std::ostream& out) {
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return UnavailableError(fmt::format("cannot read the results file {}: {}", path, std::strerror(errno)));
  char buf[1 << 16];
  int64_t left = bytes;
  while (left > 0) {
    const ssize_t n = read(fd, buf, static_cast<size_t>(std::min<int64_t>(left, sizeof(buf))));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.write(buf, n);
    left -= n;
  }
  close(fd);
  if (left > 0) return DataLossError(fmt::format("the results file {} ended {} bytes short", path, left));
  out.flush();
  if (!out) return UnavailableError("cannot write the results to stdout");
  return OkStatus();
}

}  // namespace meridian::workloads::stream
