#include "kernels/builtins.h"

#include <algorithm>
#include <map>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string_view>
#include <unordered_map>

#include <fmt/format.h>

#include "kernels/chain.h"
#include "kernels/kernel_args.h"
#include "kernels/ops.h"

namespace meridian::kernels::builtin {
namespace {

constexpr std::string_view kHistogramHeader = "histogram ";
constexpr std::string_view kWordCountHeader = "wordcount\n";
constexpr int64_t kMaxGenerated = 100'000'000;
// What wordcount counts for each distinct word beside its text: the hash map's node
// and bucket, and the word's place in the sorted list.
constexpr int64_t kWordBytes = 128;
// What logstats counts for each distinct service and status beside their text: the
// map's node and its counts.
constexpr int64_t kStatsKeyBytes = 192;

// Calls fn(token) for each whitespace-separated token of `text`.
template <typename Fn>
Status ForEachToken(std::string_view text, Fn&& fn) {
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    size_t start = i;
    while (i < text.size() && !std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    if (i > start) MERIDIAN_RETURN_IF_ERROR(fn(text.substr(start, i - start)));
  }
  return OkStatus();
}

// What a kernel's table of distinct keys (words, services) makes its task hold
// beside its inputs, counted as each new key comes and refused once past what the
// task may hold.
class KeyBudget {
 public:
  KeyBudget(const KernelContext& ctx, int64_t per_key, std::string_view keys)
      : ctx_(ctx), inputs_(InputBytes(ctx)), per_key_(per_key), keys_(keys) {}
  // One more key, holding `text` bytes of text beside per_key.
  Status Added(int64_t text) {
    held_ += per_key_ + text;
    ++count_;
    if (ctx_.host_memory_bytes < 0 || held_ + inputs_ <= ctx_.host_memory_bytes) return OkStatus();
    return CheckHostMemory(ctx_, held_, fmt::format("{} {}", count_, keys_), /*so_far=*/true);
  }

 private:
  const KernelContext& ctx_;
  const int64_t inputs_;
  const int64_t per_key_;
  const std::string_view keys_;
  int64_t held_ = 0;
  int64_t count_ = 0;
};

// How many whitespace-separated tokens `text` has.
int64_t CountTokens(std::string_view text) {
  int64_t n = 0;
  ForEachToken(text, [&n](std::string_view) {
    ++n;
    return OkStatus();
  }).IgnoreError();
  return n;
}

// Refuses `count` numbers parsed from the inputs (8 bytes each) where the task may
// not hold them beside the inputs, before any is parsed.
Status CheckInputValues(const KernelContext& ctx, int64_t count) {
  return CheckHostMemory(ctx, count * 8, fmt::format("{} input values", count));
}

StatusOr<std::vector<int64_t>> InputInts(const KernelContext& ctx) {
  int64_t count = 0;
  for (const std::string& in : ctx.inputs) count += CountTokens(in);
  MERIDIAN_RETURN_IF_ERROR(CheckInputValues(ctx, count));
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(count));
  for (size_t k = 0; k < ctx.inputs.size(); ++k) {
    MERIDIAN_RETURN_IF_ERROR(ForEachToken(ctx.inputs[k], [&](std::string_view tok) -> Status {
      MERIDIAN_ASSIGN_OR_RETURN(int64_t v, ParseInt(tok, fmt::format("input {}", k)));
      out.push_back(v);
      return OkStatus();
    }));
  }
  return out;
}

// Adds `v` to `total`; false, and `total` unchanged, where the sum is past 64 bits.
// Counts merged from inputs are the tenant's numbers: they may be anything.
bool AddTo(int64_t& total, int64_t v) { return !__builtin_add_overflow(total, v, &total); }

Status CountsOverflow(size_t input) {
  return OutOfRangeError(fmt::format("input {}: the counts merged do not fit in 64 bits", input));
}

// A count read from a merged input: a whole number, not below zero.
StatusOr<int64_t> ParseCount(std::string_view tok, const std::string& what) {
  MERIDIAN_ASSIGN_OR_RETURN(int64_t c, ParseInt(tok, what));
  if (c < 0) return InvalidArgumentError(fmt::format("{}: a count is not below 0, got {}", what, c));
  return c;
}

std::string Int128String(__int128 v) {
  if (v == 0) return "0";
  bool negative = v < 0;
  std::string digits;
  while (v != 0) {
    int d = static_cast<int>(v % 10);
    digits.push_back(static_cast<char>('0' + (d < 0 ? -d : d)));
    v /= 10;
  }
  if (negative) digits.push_back('-');
  return std::string(digits.rbegin(), digits.rend());
}

}  // namespace

StatusOr<std::string> Noop(const KernelContext& ctx) {
  MERIDIAN_RETURN_IF_ERROR(CheckArgs(ctx, "noop", {}));
  return std::string();
}

StatusOr<std::string> Sum(const KernelContext& ctx) {
  MERIDIAN_RETURN_IF_ERROR(CheckArgs(ctx, "sum", {"from", "to", "range"}));
  MERIDIAN_ASSIGN_OR_RETURN(std::vector<int64_t> values, InputInts(ctx));
  MERIDIAN_ASSIGN_OR_RETURN(const Ops* ops, OpsFor(ctx));
  MERIDIAN_ASSIGN_OR_RETURN(__int128 total, ops->Sum(values));
  constexpr int64_t kBound = int64_t{1} << 40;
  MERIDIAN_ASSIGN_OR_RETURN(int64_t range, ArgInt(ctx, "range", 0, 0, kBound));
  MERIDIAN_ASSIGN_OR_RETURN(int64_t from, ArgInt(ctx, "from", 0, -kBound, kBound));
  MERIDIAN_ASSIGN_OR_RETURN(int64_t to, ArgInt(ctx, "to", from, -kBound, kBound));
  if (range > 0) {
    if (ctx.args.count("from") || ctx.args.count("to")) {
      return InvalidArgumentError("give either 'range' or 'from'/'to', not both");
    }
    from = static_cast<int64_t>(ctx.index) * range;
    to = from + range;
  }
  if (to < from) return InvalidArgumentError(fmt::format("argument 'to' ({}) is below 'from' ({})", to, from));
  // The integers in [from, to): (from + to - 1) * (to - from) / 2.
  total += (static_cast<__int128>(from) + to - 1) * (to - from) / 2;
  if (total > INT64_MAX || total < INT64_MIN) return OutOfRangeError("the sum does not fit in 64 bits");
  return std::to_string(static_cast<int64_t>(total));
}

StatusOr<std::string> Sort(const KernelContext& ctx) {
  MERIDIAN_RETURN_IF_ERROR(CheckArgs(ctx, "sort", {"generate", "seed", "min", "max", "output"}));
  MERIDIAN_ASSIGN_OR_RETURN(std::vector<int64_t> values, InputInts(ctx));
  MERIDIAN_ASSIGN_OR_RETURN(int64_t n, ArgInt(ctx, "generate", 0, 0, kMaxGenerated));
  MERIDIAN_ASSIGN_OR_RETURN(int64_t seed, ArgInt(ctx, "seed", ctx.index, 0, INT64_MAX));
  MERIDIAN_ASSIGN_OR_RETURN(int64_t lo, ArgInt(ctx, "min", 0, INT64_MIN / 2, INT64_MAX / 2));
  MERIDIAN_ASSIGN_OR_RETURN(int64_t hi, ArgInt(ctx, "max", 1'000'000'000, INT64_MIN / 2, INT64_MAX / 2));
  if (n > 0 && hi <= lo) return InvalidArgumentError("argument 'max' must be above 'min'");
  auto it = ctx.args.find("output");
  const std::string mode = it == ctx.args.end() ? "values" : it->second;
  if (mode != "values" && mode != "summary") {
    return InvalidArgumentError(fmt::format("argument 'output': expected values or summary, got '{}'", mode));
  }
  // The working set, checked before it is allocated: every value, and the text of
  // them all (the inputs' exactly, the generated at their widest), reserved at once.
  int64_t out_bytes = 0;
  if (mode == "values") {
    for (int64_t v : values) out_bytes += static_cast<int64_t>(fmt::formatted_size("{}", v)) + 1;
    if (n > 0) {
      const int64_t widest = static_cast<int64_t>(std::max(fmt::formatted_size("{}", lo), fmt::formatted_size("{}", hi - 1)));
      out_bytes += n * (widest + 1);
    }
  }
  const int64_t count = static_cast<int64_t>(values.size()) + n;
  MERIDIAN_RETURN_IF_ERROR(CheckHostMemory(
      ctx, count * static_cast<int64_t>(sizeof(int64_t)) + out_bytes,
      fmt::format("{} values to sort{}", count, mode == "values" ? " and write out" : "")));
  values.reserve(static_cast<size_t>(count));
  MERIDIAN_ASSIGN_OR_RETURN(const Ops* ops, OpsFor(ctx));
  MERIDIAN_RETURN_IF_ERROR(ops->Sort(values, static_cast<uint64_t>(seed), n, lo, hi, ctx.stop));
  if (mode == "summary") {
    __int128 sum = 0;
    for (int64_t v : values) sum += v;
    return fmt::format("count={} min={} max={} sum={}", values.size(), values.empty() ? 0 : values.front(),
                       values.empty() ? 0 : values.back(), Int128String(sum));
  }
  std::string out;
  out.reserve(static_cast<size_t>(out_bytes));
  for (int64_t v : values) fmt::format_to(std::back_inserter(out), "{}\n", v);
  return out;
}

StatusOr<std::string> Histogram(const KernelContext& ctx) {
  MERIDIAN_RETURN_IF_ERROR(CheckArgs(ctx, "histogram", {"bins", "min", "max", "generate", "seed"}));
  MERIDIAN_ASSIGN_OR_RETURN(int64_t bins, ArgInt(ctx, "bins", 10, 1, 4096));
  MERIDIAN_ASSIGN_OR_RETURN(double lo, ArgDouble(ctx, "min", 0.0));
  MERIDIAN_ASSIGN_OR_RETURN(double hi, ArgDouble(ctx, "max", 1.0));
  if (!(hi > lo)) return InvalidArgumentError("argument 'max' must be above 'min'");
  const Binning binning{bins, lo, hi};
  const double width = binning.width();
  // Each bin's edges are lo + width * b: a range past a double's (max - min is
  // infinite) or bins too narrow for one (a width of 0) would bin every value as NaN.
  if (!std::isfinite(width) || !(width > 0)) {
    return InvalidArgumentError(
        fmt::format("arguments 'min' ({}) and 'max' ({}): {} bins between them are not numbers a double holds", lo, hi, bins));
  }
  MERIDIAN_ASSIGN_OR_RETURN(int64_t n, ArgInt(ctx, "generate", 0, 0, kMaxGenerated));
  MERIDIAN_ASSIGN_OR_RETURN(int64_t seed, ArgInt(ctx, "seed", ctx.index, 0, INT64_MAX));
  std::vector<int64_t> counts(bins, 0);
  int64_t outside = 0;
  std::vector<double> values;
  const std::string header = fmt::format("histogram bins={} min={} max={}", bins, lo, hi);
  int64_t raw = 0;  // values to parse from inputs that are not partial histograms
  for (const std::string& in : ctx.inputs) {
    if (in.compare(0, kHistogramHeader.size(), kHistogramHeader) != 0) raw += CountTokens(in);
  }
  MERIDIAN_RETURN_IF_ERROR(CheckInputValues(ctx, raw));
  values.reserve(static_cast<size_t>(raw));
  for (size_t k = 0; k < ctx.inputs.size(); ++k) {
    std::string_view in = ctx.inputs[k];
    if (in.substr(0, kHistogramHeader.size()) == kHistogramHeader) {
      // A partial histogram: same binning required; add counts bin by bin.
      size_t eol = in.find('\n');
      std::string_view first = in.substr(0, eol);
      if (first.substr(0, header.size()) != header) {
        return InvalidArgumentError(fmt::format("input {}: '{}' was binned differently from '{}'", k, first, header));
      }
      size_t pos = first.find(" outside=");
      if (pos != std::string_view::npos) {
        MERIDIAN_ASSIGN_OR_RETURN(int64_t o, ParseCount(first.substr(pos + 9), fmt::format("input {} outside", k)));
        if (!AddTo(outside, o)) return CountsOverflow(k);
      }
      // Three fields a bin; more are refused as they come, not gathered first.
      const Status wrong_bins = InvalidArgumentError(fmt::format("input {}: expected {} bins", k, bins));
      const size_t want = static_cast<size_t>(bins) * 3;
      std::vector<std::string_view> fields;
      fields.reserve(want);
      MERIDIAN_RETURN_IF_ERROR(ForEachToken(eol == std::string_view::npos ? "" : in.substr(eol + 1),
                                            [&](std::string_view tok) -> Status {
                                              if (fields.size() == want) return wrong_bins;
                                              fields.push_back(tok);
                                              return OkStatus();
                                            }));
      if (fields.size() != want) return wrong_bins;
      for (int64_t b = 0; b < bins; ++b) {
        MERIDIAN_ASSIGN_OR_RETURN(int64_t c, ParseCount(fields[b * 3 + 2], fmt::format("input {} bin {}", k, b)));
        if (!AddTo(counts[b], c)) return CountsOverflow(k);
      }
      continue;
    }
    MERIDIAN_RETURN_IF_ERROR(ForEachToken(in, [&](std::string_view tok) -> Status {
      MERIDIAN_ASSIGN_OR_RETURN(double v, ParseDouble(tok, fmt::format("input {}", k)));
      values.push_back(v);
      return OkStatus();
    }));
  }
  if (n == 0 && ctx.inputs.empty()) return InvalidArgumentError("histogram needs inputs or 'generate: N'");
  // Samples centred in the range, six standard deviations wide (about normal).
  MERIDIAN_ASSIGN_OR_RETURN(const Ops* ops, OpsFor(ctx));
  MERIDIAN_RETURN_IF_ERROR(ops->Histogram(values, static_cast<uint64_t>(seed), n, binning, counts, outside, ctx.stop));
  int64_t total = outside;
  for (int64_t c : counts) {
    if (!AddTo(total, c)) return OutOfRangeError("the histogram's count does not fit in 64 bits");
  }
  std::string out = fmt::format("{} count={} outside={}\n", header, total, outside);
  for (int64_t b = 0; b < bins; ++b) {
    fmt::format_to(std::back_inserter(out), "{} {} {}\n", lo + width * b, lo + width * (b + 1), counts[b]);
  }
  return out;
}

StatusOr<std::string> WordCount(const KernelContext& ctx) {
  MERIDIAN_RETURN_IF_ERROR(CheckArgs(ctx, "wordcount", {"text"}));
  std::unordered_map<std::string, int64_t> counts;
  // Each new word holds kWordBytes and its text three times (the key, its sorted
  // copy and its line out).
  KeyBudget budget(ctx, kWordBytes, "distinct words");
  auto count_of = [&](std::string word) -> StatusOr<int64_t*> {
    const int64_t size = static_cast<int64_t>(word.size());
    auto [it, added] = counts.try_emplace(std::move(word), 0);
    if (added) MERIDIAN_RETURN_IF_ERROR(budget.Added(3 * size));
    return &it->second;
  };
  auto count_text = [&](std::string_view text) -> Status {
    std::string word;
    for (size_t i = 0; i <= text.size(); ++i) {
      unsigned char c = i < text.size() ? static_cast<unsigned char>(text[i]) : ' ';
      if (std::isalnum(c) || c == '_' || c >= 0x80) {
        word.push_back(static_cast<char>(std::tolower(c)));
      } else if (!word.empty()) {
        MERIDIAN_ASSIGN_OR_RETURN(int64_t* n, count_of(std::move(word)));
        ++*n;
        word.clear();
      }
    }
    return OkStatus();
  };
  for (size_t k = 0; k < ctx.inputs.size(); ++k) {
    std::string_view in = ctx.inputs[k];
    if (in.substr(0, kWordCountHeader.size()) != kWordCountHeader) {
      MERIDIAN_RETURN_IF_ERROR(count_text(in));
      continue;
    }
    // A merged count: words and their counts in turn, each pair added as it comes.
    std::string_view word;
    MERIDIAN_RETURN_IF_ERROR(ForEachToken(in.substr(kWordCountHeader.size()), [&](std::string_view tok) -> Status {
      if (word.empty()) {
        word = tok;
        return OkStatus();
      }
      MERIDIAN_ASSIGN_OR_RETURN(int64_t c, ParseCount(tok, fmt::format("input {} count of '{}'", k, word)));
      MERIDIAN_ASSIGN_OR_RETURN(int64_t* n, count_of(std::string(word)));
      if (!AddTo(*n, c)) return CountsOverflow(k);
      word = {};
      return OkStatus();
    }));
    if (!word.empty()) return InvalidArgumentError(fmt::format("input {}: a word count must pair words with counts", k));
  }
  if (auto it = ctx.args.find("text"); it != ctx.args.end()) MERIDIAN_RETURN_IF_ERROR(count_text(it->second));
  std::vector<std::pair<std::string, int64_t>> sorted(counts.begin(), counts.end());
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  std::string out(kWordCountHeader);
  for (const auto& [w, c] : sorted) fmt::format_to(std::back_inserter(out), "{} {}\n", w, c);
  return out;
}

StatusOr<std::string> LogStats(const KernelContext& ctx) {
  MERIDIAN_RETURN_IF_ERROR(CheckArgs(ctx, "logstats", {}));
  struct Stats {
    int64_t count = 0, latency_sum = 0, latency_max = 0, bytes = 0;
  };
  std::map<std::pair<std::string, std::string>, Stats> by_key;
  // Each new service and status holds kStatsKeyBytes and their text twice (the key
  // and its line out).
  KeyBudget budget(ctx, kStatsKeyBytes, "distinct services and statuses");
  auto stats_of = [&](std::string_view service, std::string_view status) -> StatusOr<Stats*> {
    auto [it, added] = by_key.try_emplace({std::string(service), std::string(status)});
    if (added) MERIDIAN_RETURN_IF_ERROR(budget.Added(2 * static_cast<int64_t>(service.size() + status.size())));
    return &it->second;
  };
  int64_t lines = 0, bad = 0;
  auto fields_of = [](std::string_view line) {
    std::vector<std::string_view> f;
    size_t i = 0;
    while (i < line.size()) {
      while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
      size_t start = i;
      while (i < line.size() && line[i] != ' ' && line[i] != '\t' && line[i] != '\r') ++i;
      if (i > start) f.push_back(line.substr(start, i - start));
    }
    return f;
  };
  auto number = [](std::string_view t, int64_t* out) {
    if (t.empty()) return false;
    int64_t v = 0;
    for (char c : t) {
      if (c < '0' || c > '9' || v > (INT64_MAX - 9) / 10) return false;
      v = v * 10 + (c - '0');
    }
    *out = v;
    return true;
  };
  for (size_t k = 0; k < ctx.inputs.size(); ++k) {
    if (ctx.stop.load()) return Status(StatusCode::kCancelled, "stopped");
    std::string_view in = ctx.inputs[k];
    const bool partial = in.substr(0, 9) == "logstats ";
    size_t pos = 0;
    bool first = true;
    while (pos < in.size()) {
      size_t eol = in.find('\n', pos);
      std::string_view line = in.substr(pos, eol == std::string_view::npos ? std::string_view::npos : eol - pos);
      pos = eol == std::string_view::npos ? in.size() : eol + 1;
      if (partial && first) {
        // "logstats lines=N bad=M": carry the counts over.
        first = false;
        for (std::string_view f : fields_of(line)) {
          int64_t v = 0;
          if (f.substr(0, 6) == "lines=" && number(f.substr(6), &v) && !AddTo(lines, v)) return CountsOverflow(k);
          if (f.substr(0, 4) == "bad=" && number(f.substr(4), &v) && !AddTo(bad, v)) return CountsOverflow(k);
        }
        continue;
      }
      std::vector<std::string_view> f = fields_of(line);
      if (f.empty()) continue;
      if (partial) {
        // service status count latency_sum bytes latency_max
        Stats add;
        if (f.size() != 6 || !number(f[2], &add.count) || !number(f[3], &add.latency_sum) ||
            !number(f[4], &add.bytes) || !number(f[5], &add.latency_max)) {
          return InvalidArgumentError(fmt::format("input {}: '{}' is not a logstats row", k, line));
        }
        MERIDIAN_ASSIGN_OR_RETURN(Stats* held, stats_of(f[0], f[1]));
        Stats& s = *held;
        if (!AddTo(s.count, add.count) || !AddTo(s.latency_sum, add.latency_sum) || !AddTo(s.bytes, add.bytes)) {
          return CountsOverflow(k);
        }
        s.latency_max = std::max(s.latency_max, add.latency_max);
        continue;
      }
      // A log line: timestamp service status latency_ms bytes.
      if (!AddTo(lines, 1)) return CountsOverflow(k);
      int64_t ts = 0, latency = 0, bytes = 0;
      if (f.size() != 5 || !number(f[0], &ts) || !number(f[3], &latency) || !number(f[4], &bytes)) {
        if (!AddTo(bad, 1)) return CountsOverflow(k);
        continue;
      }
      MERIDIAN_ASSIGN_OR_RETURN(Stats* held, stats_of(f[1], f[2]));
      Stats& s = *held;
      if (!AddTo(s.count, 1) || !AddTo(s.latency_sum, latency) || !AddTo(s.bytes, bytes)) return CountsOverflow(k);
      s.latency_max = std::max(s.latency_max, latency);
    }
  }
  std::string out = fmt::format("logstats lines={} bad={}\n", lines, bad);
  for (const auto& [key, s] : by_key) {
    fmt::format_to(std::back_inserter(out), "{} {} {} {} {} {}\n", key.first, key.second, s.count, s.latency_sum,
                   s.bytes, s.latency_max);
  }
  return out;
}

StatusOr<std::string> MatMul(const KernelContext& ctx) {
  MERIDIAN_RETURN_IF_ERROR(CheckArgs(ctx, "matmul", {"n", "seed", "repeat"}));
  MERIDIAN_ASSIGN_OR_RETURN(int64_t n, ArgInt(ctx, "n", 256, 1, kMaxGpuMatMulN));
  MERIDIAN_ASSIGN_OR_RETURN(int64_t seed, ArgInt(ctx, "seed", ctx.index, 0, INT64_MAX));
  MERIDIAN_ASSIGN_OR_RETURN(int64_t repeat, ArgInt(ctx, "repeat", 1, 1, 100'000));
  // The CPU holds A, B and C in the agent's memory (a GPU, in the device's).
  if (ctx.gpu < 0 && n <= kMaxCpuMatMulN) {
    MERIDIAN_RETURN_IF_ERROR(CheckHostMemory(ctx, 3 * n * n * static_cast<int64_t>(sizeof(double)),
                                             fmt::format("three {} x {} matrices", n, n)));
  }
  MERIDIAN_ASSIGN_OR_RETURN(const Ops* ops, OpsFor(ctx));
  MERIDIAN_ASSIGN_OR_RETURN(MatMulResult r, ops->MatMul(n, static_cast<uint64_t>(seed), repeat, ctx.stop));
  // Checksums only: the output is the same on every run (the CPU and a GPU agree
  // to rounding, since they add in different orders).
  return fmt::format("matmul n={} sum={:.9e} frobenius={:.9e}", n, r.sum, r.frobenius);
}

StatusOr<std::string> ChainVerify(const KernelContext& ctx) {
  MERIDIAN_RETURN_IF_ERROR(CheckArgs(ctx, "chain-verify", {}));
  if (ctx.inputs.empty()) return InvalidArgumentError("chain-verify needs inputs: shards of blocks, or reports to merge");
  MERIDIAN_ASSIGN_OR_RETURN(const Ops* ops, OpsFor(ctx));
  std::vector<chain::Report> parts;
  for (size_t k = 0; k < ctx.inputs.size(); ++k) {
    const std::string& in = ctx.inputs[k];
    StatusOr<chain::Report> r = chain::IsReport(in) ? chain::ParseReport(in) : chain::Verify(in, *ops, ctx.stop);
    if (!r.ok()) return r.status().WithPrefix(fmt::format("input {}", k));
    parts.push_back(*std::move(r));
  }
  MERIDIAN_ASSIGN_OR_RETURN(chain::Report merged, chain::Merge(std::move(parts)));
  return chain::FormatReport(merged);
}

}  // namespace meridian::kernels::builtin
