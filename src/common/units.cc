#include "common/units.h"

#include <array>
#include <cctype>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace meridian {
namespace {

struct Decimal {
  __int128 digits = 0;  // value = digits / 10^frac_digits
  int frac_digits = 0;
  bool too_many_digits = false;  // more digits than any value in range needs
};

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Splits "1.5GiB" into a non-negative decimal and the rest ("GiB").
bool SplitNumber(std::string_view text, Decimal* number, std::string_view* unit) {
  size_t i = 0;
  bool any_digit = false;
  bool dot = false;
  while (i < text.size()) {
    char c = text[i];
    if (c >= '0' && c <= '9') {
      if (number->digits > (__int128{1} << 100)) {
        number->too_many_digits = true;
      } else {
        number->digits = number->digits * 10 + (c - '0');
        if (dot) ++number->frac_digits;
      }
      any_digit = true;
    } else if (c == '.' && !dot) {
      dot = true;
    } else {
      break;
    }
    ++i;
  }
  if (!any_digit || number->frac_digits > 12) return false;
  *unit = Trim(text.substr(i));
  return true;
}

__int128 Pow10(int n) {
  __int128 r = 1;
  while (n-- > 0) r *= 10;
  return r;
}

// Scales `number` by `factor` and rounds to the nearest integer; false on overflow.
bool Scale(const Decimal& number, int64_t factor, int64_t* out) {
  __int128 div = Pow10(number.frac_digits);
  __int128 scaled = 0;
  if (__builtin_mul_overflow(number.digits, __int128{factor}, &scaled)) return false;
  __int128 v = (scaled + div / 2) / div;
  if (v > std::numeric_limits<int64_t>::max()) return false;
  *out = static_cast<int64_t>(v);
  return true;
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

struct UnitFactor {
  std::string_view name;
  int64_t factor;
};

StatusOr<int64_t> ParseWithUnits(std::string_view text, std::string_view what,
                                 const UnitFactor* units, size_t n_units, bool case_sensitive,
                                 std::string_view expected) {
  std::string_view t = Trim(text);
  if (!t.empty() && t.front() == '-') {
    return InvalidArgumentError(fmt::format("{} must not be negative, got '{}'", what, text));
  }
  Decimal number;
  std::string_view unit;
  if (!SplitNumber(t, &number, &unit)) {
    return InvalidArgumentError(
        fmt::format("expected {} such as {}, got '{}'", what, expected, text));
  }
  for (size_t i = 0; i < n_units; ++i) {
    bool match = case_sensitive ? unit == units[i].name : EqualsIgnoreCase(unit, units[i].name);
    if (!match) continue;
    int64_t out = 0;
    if (number.too_many_digits || !Scale(number, units[i].factor, &out)) {
      return InvalidArgumentError(fmt::format("{} '{}' is too large", what, text));
    }
    return out;
  }
  if (unit.empty()) {
    return InvalidArgumentError(
        fmt::format("{} '{}' has no unit; expected one such as {}", what, text, expected));
  }
  return InvalidArgumentError(
      fmt::format("unknown unit '{}' in {} '{}'; expected one such as {}", unit, what, text,
                  expected));
}

// Strips an optional leading '$' and a required "/suffix" naming the denominator.
bool StripPrice(std::string_view text, std::string_view* amount, std::string_view* per) {
  std::string_view t = Trim(text);
  if (!t.empty() && t.front() == '$') t.remove_prefix(1);
  size_t slash = t.find('/');
  if (slash == std::string_view::npos) {
    *amount = Trim(t);
    *per = {};
    return false;
  }
  *amount = Trim(t.substr(0, slash));
  *per = Trim(t.substr(slash + 1));
  return true;
}

StatusOr<int64_t> ParseUsdAmount(std::string_view amount, std::string_view text,
                                 std::string_view what, std::string_view example) {
  if (!amount.empty() && amount.front() == '-') {
    return InvalidArgumentError(fmt::format("{} must not be negative, got '{}'", what, text));
  }
  static constexpr UnitFactor kUnits[] = {{"", kMicroUsdPerUsd}};
  StatusOr<int64_t> v = ParseWithUnits(amount, what, kUnits, 1, true, example);
  if (!v.ok()) {
    return InvalidArgumentError(fmt::format("expected {} such as {}, got '{}'", what, example, text));
  }
  return v;
}

std::string TrimZeros(std::string s) {
  if (s.find('.') == std::string::npos) return s;
  while (!s.empty() && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

}  // namespace

StatusOr<int64_t> ParseBytes(std::string_view text) {
  static constexpr UnitFactor kUnits[] = {
      {"B", 1},           {"KiB", kKiB},          {"MiB", kMiB},
      {"GiB", kGiB},      {"TiB", kTiB},          {"KB", 1'000},
      {"MB", 1'000'000},  {"GB", kGB},            {"TB", 1'000 * kGB},
      {"Ki", kKiB},       {"Mi", kMiB},           {"Gi", kGiB},
      {"Ti", kTiB},
  };
  Decimal number;
  std::string_view unit;
  std::string_view t = Trim(text);
  if (SplitNumber(t, &number, &unit) && unit.empty() && number.digits == 0) return int64_t{0};
  return ParseWithUnits(text, "a size", kUnits, std::size(kUnits), false, "'2GiB' or '500MB'");
}

StatusOr<int64_t> ParseDurationUs(std::string_view text) {
  static constexpr UnitFactor kUnits[] = {
      {"us", 1},          {"ms", kMillisecondUs}, {"s", kSecondUs},    {"m", kMinuteUs},
      {"min", kMinuteUs}, {"h", kHourUs},         {"d", 24 * kHourUs},
  };
  Decimal number;
  std::string_view unit;
  if (SplitNumber(Trim(text), &number, &unit) && unit.empty() && number.digits == 0) {
    return int64_t{0};
  }
  return ParseWithUnits(text, "a duration", kUnits, std::size(kUnits), true, "'80ms', '30s' or '2h'");
}

StatusOr<int64_t> ParseBandwidthBps(std::string_view text) {
  static constexpr UnitFactor kUnits[] = {
      {"bps", 1},
      {"Kbps", 1'000},
      {"Mbps", 1'000'000},
      {"Gbps", kGbps},
      {"Tbps", 1'000 * kGbps},
      {"bit/s", 1},
      {"Kbit/s", 1'000},
      {"Mbit/s", 1'000'000},
      {"Gbit/s", kGbps},
      {"B/s", 8},
      {"KB/s", 8'000},
      {"MB/s", 8'000'000},
      {"GB/s", 8 * kGbps},
  };
  return ParseWithUnits(text, "a bandwidth", kUnits, std::size(kUnits), true,
                        "'10Gbps', '100Mbps' or '125MB/s'");
}

StatusOr<int64_t> ParsePriceMicroUsdPerHour(std::string_view text) {
  std::string_view amount, per;
  if (!StripPrice(text, &amount, &per)) {
    return InvalidArgumentError(
        fmt::format("expected an hourly price such as '$3.5/h', got '{}'", text));
  }
  if (per != "h" && per != "hr" && per != "hour") {
    return InvalidArgumentError(fmt::format(
        "expected an hourly price such as '$3.5/h', got '{}' (per '{}', not per hour)", text, per));
  }
  return ParseUsdAmount(amount, text, "an hourly price", "'$3.5/h'");
}

StatusOr<int64_t> ParsePriceMicroUsdPerGB(std::string_view text) {
  std::string_view amount, per;
  if (!StripPrice(text, &amount, &per)) {
    if (Trim(amount) == "0") return int64_t{0};
    return InvalidArgumentError(
        fmt::format("expected a price per GB such as '$0.09/GB', got '{}'", text));
  }
  if (per != "GB") {
    return InvalidArgumentError(
        fmt::format("expected a price per GB such as '$0.09/GB', got '{}' (per '{}')", text, per));
  }
  return ParseUsdAmount(amount, text, "a price per GB", "'$0.09/GB'");
}

StatusOr<int64_t> ParseMicroUsd(std::string_view text) {
  std::string_view t = Trim(text);
  if (!t.empty() && t.front() == '$') t.remove_prefix(1);
  if (t.find('/') != std::string_view::npos) {
    return InvalidArgumentError(fmt::format("expected an amount in USD such as '$5', got '{}'", text));
  }
  static constexpr UnitFactor kUnits[] = {{"", kMicroUsdPerUsd}};
  return ParseWithUnits(t, "an amount in USD", kUnits, 1, true, "'$5'");
}

StatusOr<int64_t> ParseMilli(std::string_view text) {
  static constexpr UnitFactor kUnits[] = {{"", kMilliPerUnit}, {"m", 1}};
  return ParseWithUnits(text, "a quantity", kUnits, std::size(kUnits), true, "'0.5' or '500m'");
}

std::string FormatBytes(int64_t bytes) {
  static constexpr std::array<std::string_view, 5> kNames = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  size_t i = 0;
  while (i + 1 < kNames.size() && std::fabs(v) >= 1024.0) {
    v /= 1024.0;
    ++i;
  }
  if (i == 0) return fmt::format("{} B", bytes);
  return fmt::format("{} {}", TrimZeros(fmt::format("{:.2f}", v)), kNames[i]);
}

std::string FormatDurationUs(int64_t us) {
  if (us < 0) return "-" + FormatDurationUs(-us);
  if (us < kMillisecondUs) return fmt::format("{} us", us);
  if (us < kSecondUs) return fmt::format("{} ms", TrimZeros(fmt::format("{:.1f}", us / 1e3)));
  if (us < kMinuteUs) return fmt::format("{} s", TrimZeros(fmt::format("{:.2f}", us / 1e6)));
  int64_t total_s = (us + kSecondUs / 2) / kSecondUs;
  if (us < kHourUs) return fmt::format("{}m {:02}s", total_s / 60, total_s % 60);
  int64_t total_m = (us + kMinuteUs / 2) / kMinuteUs;
  return fmt::format("{}h {:02}m", total_m / 60, total_m % 60);
}

std::string FormatBandwidthBps(int64_t bps) {
  if (bps >= kGbps) return fmt::format("{} Gbps", TrimZeros(fmt::format("{:.2f}", bps / 1e9)));
  if (bps >= 1'000'000) return fmt::format("{} Mbps", TrimZeros(fmt::format("{:.2f}", bps / 1e6)));
  if (bps >= 1'000) return fmt::format("{} Kbps", TrimZeros(fmt::format("{:.2f}", bps / 1e3)));
  return fmt::format("{} bps", bps);
}

std::string FormatMicroUsd(int64_t micro_usd) {
  if (micro_usd < 0) return "-" + FormatMicroUsd(-micro_usd);
  if (micro_usd == 0) return "$0";
  if (micro_usd < 10'000) return fmt::format("${:.4f}", micro_usd / 1e6);
  return fmt::format("${:.2f}", micro_usd / 1e6);
}

std::string FormatMilli(int64_t milli) {
  return TrimZeros(fmt::format("{:.3f}", milli / 1000.0));
}

int64_t TransferTimeUs(int64_t bytes, int64_t bps) {
  if (bytes <= 0) return 0;
  if (bps <= 0) return std::numeric_limits<int64_t>::max();
  __int128 bits_us = static_cast<__int128>(bytes) * 8 * kSecondUs;
  __int128 t = (bits_us + bps - 1) / bps;
  if (t > std::numeric_limits<int64_t>::max()) return std::numeric_limits<int64_t>::max();
  return static_cast<int64_t>(t);
}

}  // namespace meridian
