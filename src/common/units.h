// Units of the resources Meridian accounts for, as integers with the unit last in
// the name: bytes, microseconds (`_us`), bits per second (`_bps`), micro-USD
// (`_micro_usd`), milli-resources (`_milli`). Never floating point for amounts.
//
// Parsing accepts what people write in specs ("2GiB", "80ms", "10Gbps", "$3.5/h",
// "$0.09/GB", "500m") and rejects anything else with a message saying what was
// expected. Decimal fractions are exact: "1.5GiB" is 1610612736 bytes.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace meridian {

inline constexpr int64_t kKiB = int64_t{1} << 10;
inline constexpr int64_t kMiB = int64_t{1} << 20;
inline constexpr int64_t kGiB = int64_t{1} << 30;
inline constexpr int64_t kTiB = int64_t{1} << 40;
inline constexpr int64_t kGB = 1'000'000'000;

inline constexpr int64_t kMillisecondUs = 1'000;
inline constexpr int64_t kSecondUs = 1'000'000;
inline constexpr int64_t kMinuteUs = 60 * kSecondUs;
inline constexpr int64_t kHourUs = 60 * kMinuteUs;
inline constexpr int64_t kDayUs = 24 * kHourUs;

inline constexpr int64_t kMicroUsdPerUsd = 1'000'000;
inline constexpr int64_t kGbps = 1'000'000'000;
inline constexpr int32_t kMilliPerUnit = 1000;

// "2GiB", "512MiB", "1.5 GB", "0". Binary (KiB..TiB) and decimal (KB..TB) units; B.
StatusOr<int64_t> ParseBytes(std::string_view text);
// "80ms", "1.5s", "30us", "10m" / "10min", "2h", "1d". A unit is required.
StatusOr<int64_t> ParseDurationUs(std::string_view text);
// "10Gbps", "100Mbit/s", "125MB/s" (bytes) -> bits per second.
StatusOr<int64_t> ParseBandwidthBps(std::string_view text);
// "$3.5/h", "3.5/hr", "$0.25/hour" -> micro-USD per hour.
StatusOr<int64_t> ParsePriceMicroUsdPerHour(std::string_view text);
// "$0.09/GB" -> micro-USD per GB (10^9 bytes); "$0" is free.
StatusOr<int64_t> ParsePriceMicroUsdPerGB(std::string_view text);
// "$5", "5", "$0.25" -> micro-USD.
StatusOr<int64_t> ParseMicroUsd(std::string_view text);
// "0.5" -> 500, "500m" -> 500, "2" -> 2000.
StatusOr<int64_t> ParseMilli(std::string_view text);

std::string FormatBytes(int64_t bytes);             // "1.5 GiB"
std::string FormatDurationUs(int64_t us);           // "350 ms", "2.5 s", "1h 02m"
std::string FormatBandwidthBps(int64_t bps);        // "10 Gbps"
std::string FormatMicroUsd(int64_t micro_usd);      // "$12.34", "$0.0012"
std::string FormatMilli(int64_t milli);             // "0.5", "2"

// Seconds to move `bytes` at `bps`, in microseconds, rounded up; 0 bytes -> 0.
int64_t TransferTimeUs(int64_t bytes, int64_t bps);

}  // namespace meridian
