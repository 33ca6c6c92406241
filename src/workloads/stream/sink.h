// A stream's results on their way to the sink's broker (docs/streams.md, offline
// autonomy): kept in order until the broker has acknowledged them, and sent by a
// thread of their own, so that a sink across a cut WAN link stops nothing but itself.
// It connects again (every `retry_ms`) after a lost connection, or one whose
// acknowledgements stopped for `stall_ms`, and sends again, in order, what was not
// acknowledged (a result may so arrive twice: its key is its device and window).
//
// Bounds: at most `max_pending` results wait; the runner stops reading its source
// while that many do (the broker's session queues the records meanwhile).
//
// Thread-safety: every method may be called from any thread; the sending thread is
// the object's own.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <iosfwd>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/status.h"
#include "workloads/stream/mqtt.h"

namespace meridian::workloads::stream {

struct ResultSinkOptions {
  MqttOptions mqtt;
  std::string topic;
  int64_t max_pending = 100'000;
  int64_t retry_ms = 1000;
  int64_t stall_ms = 10'000;
};

// The calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID), in microseconds.
int64_t ThreadCpuUs();

class ResultSink {
 public:
  // Starts sending `pending` (results an earlier run had not seen acknowledged) first.
  ResultSink(ResultSinkOptions options, std::vector<std::string> pending);
  ~ResultSink();
  ResultSink(const ResultSink&) = delete;
  ResultSink& operator=(const ResultSink&) = delete;

  // Queues a result (the caller keeps to max_pending: see Stats::full).
  void Push(std::string result);
  // What waits, in order: a checkpoint's.
  std::vector<std::string> Pending() const;
  // Waits until nothing waits (true) or timeout_ms passed.
  bool WaitEmpty(int64_t timeout_ms) const;
  // Stops the sending thread (what waits stays in Pending()).
  void Stop();

  struct Stats {
    int64_t pending = 0;       // results waiting (sent or not)
    bool full = false;         // pending reached max_pending
    int64_t acknowledged = 0;  // results the broker took
    int64_t disconnects = 0;   // connections lost
    Status last_drop;          // why the last one was lost (OK: none was)
    // Why the sink is not connected now (a failed or lost connection, until the next
    // is made); OK while connected.
    Status failure;
    // What stops it for good (the broker refused our credentials or the topic).
    Status error;
    int64_t cpu_us = 0;  // the sending thread's CPU time, once it has stopped
  };
  Stats stats() const;

 private:
  void Run();

  const ResultSinkOptions options_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::deque<std::string> queue_;  // GUARDED_BY(mu_): the first `sent_` are on the wire
  size_t sent_ = 0;                // GUARDED_BY(mu_)
  bool stop_ = false;              // GUARDED_BY(mu_)
  Status error_;                   // GUARDED_BY(mu_)
  Status failure_;                 // GUARDED_BY(mu_)
  int64_t acknowledged_ = 0;       // GUARDED_BY(mu_)
  int64_t disconnects_ = 0;        // GUARDED_BY(mu_)
  Status last_drop_;               // GUARDED_BY(mu_)
  int64_t cpu_us_ = 0;             // GUARDED_BY(mu_): set as the thread ends
  std::thread thread_;
};

// A dataset sink's results (docs/streams.md): one JSON line each, appended to a file in
// the order written; when the stream's job succeeds the file is its output, and so
// the dataset's shard. With a state directory each checkpoint holds the file's length,
// and a restore cuts the file back to it: the replay writes what came after again, so
// the file holds each result once.
//
// Bounds: at most max_bytes (ResourceExhausted past it, naming the bound).
class ResultFile {
 public:
  // Opens `path` (made 0600 when missing) and cuts it to keep_bytes: FailedPrecondition
  // when it holds fewer (the results before the checkpoint were written on another node).
  static StatusOr<std::unique_ptr<ResultFile>> Open(const std::string& path, int64_t keep_bytes, int64_t max_bytes);
  ~ResultFile();
  ResultFile(const ResultFile&) = delete;
  ResultFile& operator=(const ResultFile&) = delete;

  // Appends `result` and a newline in one write.
  Status Append(std::string_view result);
  int64_t bytes() const { return bytes_; }

 private:
  ResultFile() = default;
  std::string path_;
  int fd_ = -1;
  int64_t bytes_ = 0;
  int64_t max_bytes_ = 0;
};

// Copies the first `bytes` of the file at `path` to `out` (a dataset sink's results, as
// the task's output).
Status CopyResults(const std::string& path, int64_t bytes, std::ostream& out);

}  // namespace meridian::workloads::stream
