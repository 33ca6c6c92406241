// Prometheus's text exposition format (version 0.0.4), which every Prometheus server
// and `promtool check metrics` read: families of samples with labels, written at
// scrape time from what a process already counts; and histograms of durations,
// counted lock-free where things happen.
//
// Names follow Prometheus's conventions (docs/observability.md): `meridian_` first,
// base units (seconds, bytes), `_total` on counters.
//
// Thread-safety: an Exposition is one scrape's, used by one thread. A
// LatencyHistogram may be observed from any number of threads while it is written.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace meridian::http {

using Labels = std::vector<std::pair<std::string_view, std::string>>;

class Exposition {
 public:
  // Starts a family: its HELP and TYPE ("counter", "gauge", "histogram") lines. Its
  // samples follow, before the next family.
  void Family(std::string_view name, std::string_view type, std::string_view help);
  void Sample(std::string_view name, const Labels& labels, double value);
  void Sample(std::string_view name, double value) { Sample(name, {}, value); }
  // A family of one sample without labels.
  void Gauge(std::string_view name, std::string_view help, double value);
  void Counter(std::string_view name, std::string_view help, double value);

  const std::string& text() const { return out_; }

 private:
  std::string out_;
};

// A histogram of durations, in seconds, over fixed buckets from 50 us to 10 s.
class LatencyHistogram {
 public:
  LatencyHistogram();
  void ObserveUs(int64_t us);
  // Writes the family `name` (its _bucket, _sum and _count series).
  void Write(Exposition& out, std::string_view name, std::string_view help) const;
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }

 private:
  static constexpr int kBuckets = 17;
  static const int64_t kBoundsUs[kBuckets];
  std::atomic<uint64_t> buckets_[kBuckets + 1] = {};  // the last: above every bound
  std::atomic<uint64_t> count_{0};
  std::atomic<int64_t> sum_us_{0};
};

// The content type of the text format.
inline constexpr std::string_view kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace meridian::http
