#include "http/metrics.h"

#include <cmath>

#include <fmt/format.h>

namespace meridian::http {
namespace {

void AppendValue(std::string& out, double v) {
  if (std::isnan(v)) {
    out += "NaN";
  } else if (std::isinf(v)) {
    out += v > 0 ? "+Inf" : "-Inf";
  } else if (v == std::floor(v) && std::fabs(v) < 1e15) {
    fmt::format_to(std::back_inserter(out), "{}", static_cast<int64_t>(v));
  } else {
    fmt::format_to(std::back_inserter(out), "{}", v);
  }
}

// A label value with backslash, double quote and line feed escaped.
void AppendEscaped(std::string& out, std::string_view s, bool quotes) {
  for (char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && quotes) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
}

}  // namespace

void Exposition::Family(std::string_view name, std::string_view type, std::string_view help) {
  out_ += "# HELP ";
  out_ += name;
  out_ += ' ';
  AppendEscaped(out_, help, false);
  out_ += "\n# TYPE ";
  out_ += name;
  out_ += ' ';
  out_ += type;
  out_ += '\n';
}

void Exposition::Sample(std::string_view name, const Labels& labels, double value) {
  out_ += name;
  if (!labels.empty()) {
    out_ += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      if (i > 0) out_ += ',';
      out_ += labels[i].first;
      out_ += "=\"";
      AppendEscaped(out_, labels[i].second, true);
      out_ += '"';
    }
    out_ += '}';
  }
  out_ += ' ';
  AppendValue(out_, value);
  out_ += '\n';
}

void Exposition::Gauge(std::string_view name, std::string_view help, double value) {
  Family(name, "gauge", help);
  Sample(name, value);
}

void Exposition::Counter(std::string_view name, std::string_view help, double value) {
  Family(name, "counter", help);
  Sample(name, value);
}

const int64_t LatencyHistogram::kBoundsUs[kBuckets] = {50,     100,     250,     500,       1'000,     2'500,
                                                      5'000,  10'000,  25'000,  50'000,    100'000,   250'000,
                                                      500'000, 1'000'000, 2'500'000, 5'000'000, 10'000'000};

LatencyHistogram::LatencyHistogram() = default;

void LatencyHistogram::ObserveUs(int64_t us) {
  if (us < 0) us = 0;
  int b = 0;
  while (b < kBuckets && us > kBoundsUs[b]) ++b;
  buckets_[b].fetch_add(1, std::memory_order_relaxed);
  sum_us_.fetch_add(us, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
}

void LatencyHistogram::Write(Exposition& out, std::string_view name, std::string_view help) const {
  out.Family(name, "histogram", help);
  const std::string bucket = std::string(name) + "_bucket";
  // Read the buckets first and derive the count from them, so that a scrape racing
  // an observation still shows cumulative buckets that end at its count.
  uint64_t cumulative = 0;
  for (int b = 0; b < kBuckets; ++b) {
    cumulative += buckets_[b].load(std::memory_order_relaxed);
    out.Sample(bucket, {{"le", fmt::format("{}", static_cast<double>(kBoundsUs[b]) / 1e6)}},
               static_cast<double>(cumulative));
  }
  cumulative += buckets_[kBuckets].load(std::memory_order_relaxed);
  out.Sample(bucket, {{"le", "+Inf"}}, static_cast<double>(cumulative));
  out.Sample(std::string(name) + "_sum", static_cast<double>(sum_us_.load(std::memory_order_relaxed)) / 1e6);
  out.Sample(std::string(name) + "_count", static_cast<double>(cumulative));
}

}  // namespace meridian::http
