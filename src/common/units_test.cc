#include "common/units.h"

#include <gtest/gtest.h>

namespace meridian {
namespace {

struct Case {
  const char* text;
  int64_t want;
};

TEST(UnitsTest, ParsesBytes) {
  const Case cases[] = {
      {"2GiB", 2 * kGiB},  {"1.5GiB", 1'610'612'736}, {"512 MiB", 512 * kMiB},
      {"500MB", 500'000'000}, {"10gb", 10 * kGB},      {"0", 0},
      {"1024B", 1024},     {"40Gi", 40 * kGiB},        {"1TiB", kTiB},
  };
  for (const Case& c : cases) {
    StatusOr<int64_t> got = ParseBytes(c.text);
    ASSERT_TRUE(got.ok()) << c.text << ": " << got.status().ToString();
    EXPECT_EQ(*got, c.want) << c.text;
  }
}

TEST(UnitsTest, ParsesDurations) {
  const Case cases[] = {{"80ms", 80'000}, {"1.5s", 1'500'000}, {"30us", 30},
                        {"10m", 600'000'000}, {"10min", 600'000'000}, {"2h", 7'200'000'000},
                        {"1d", 86'400'000'000}, {"0", 0}};
  for (const Case& c : cases) {
    StatusOr<int64_t> got = ParseDurationUs(c.text);
    ASSERT_TRUE(got.ok()) << c.text << ": " << got.status().ToString();
    EXPECT_EQ(*got, c.want) << c.text;
  }
}

TEST(UnitsTest, ParsesBandwidthPricesAndMilli) {
  EXPECT_EQ(*ParseBandwidthBps("10Gbps"), 10 * kGbps);
  EXPECT_EQ(*ParseBandwidthBps("100Mbit/s"), 100'000'000);
  EXPECT_EQ(*ParseBandwidthBps("125MB/s"), 1'000'000'000);
  EXPECT_EQ(*ParsePriceMicroUsdPerHour("$3.5/h"), 3'500'000);
  EXPECT_EQ(*ParsePriceMicroUsdPerHour("0.526/hr"), 526'000);
  EXPECT_EQ(*ParsePriceMicroUsdPerGB("$0.09/GB"), 90'000);
  EXPECT_EQ(*ParsePriceMicroUsdPerGB("0"), 0);
  EXPECT_EQ(*ParseMicroUsd("$5"), 5'000'000);
  EXPECT_EQ(*ParseMicroUsd("0.25"), 250'000);
  EXPECT_EQ(*ParseMilli("0.5"), 500);
  EXPECT_EQ(*ParseMilli("500m"), 500);
  EXPECT_EQ(*ParseMilli("2"), 2000);
}

TEST(UnitsTest, RejectsBadInputWithAMessageSayingWhatWasExpected) {
  struct Bad {
    StatusOr<int64_t> got;
    const char* message_part;
  };
  const Bad cases[] = {
      {ParseBytes("2GB/s"), "unknown unit 'GB/s'"},
      {ParseBytes("-1GiB"), "must not be negative"},
      {ParseBytes("lots"), "expected a size"},
      {ParseBytes("12"), "has no unit"},
      {ParseDurationUs("80"), "has no unit"},
      {ParseDurationUs("80 parsecs"), "unknown unit 'parsecs'"},
      {ParseBandwidthBps("10 Gigs"), "unknown unit"},
      {ParsePriceMicroUsdPerHour("$3.5"), "expected an hourly price"},
      {ParsePriceMicroUsdPerHour("$3.5/GB"), "not per hour"},
      {ParsePriceMicroUsdPerHour("$-3/h"), "must not be negative"},
      {ParsePriceMicroUsdPerGB("$1/h"), "per GB"},
      {ParseMicroUsd("$5/h"), "amount in USD"},
      {ParseBytes("99999999999TiB"), "too large"},
      // Found by fuzz_delay_line: 3.3e30 minutes overflowed the 128-bit product.
      {ParseDurationUs("3333333333333333333333333333332m"), "too large"},
      {ParseBytes("99999999999999999999999999999999TiB"), "too large"},
  };
  for (const Bad& c : cases) {
    ASSERT_FALSE(c.got.ok()) << c.message_part;
    EXPECT_EQ(c.got.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(c.got.status().message().find(c.message_part), std::string::npos)
        << c.got.status().message();
  }
}

TEST(UnitsTest, Formats) {
  EXPECT_EQ(FormatBytes(1'610'612'736), "1.5 GiB");
  EXPECT_EQ(FormatBytes(100), "100 B");
  EXPECT_EQ(FormatDurationUs(350'000), "350 ms");
  EXPECT_EQ(FormatDurationUs(2'500'000), "2.5 s");
  EXPECT_EQ(FormatDurationUs(3 * kHourUs + 2 * kMinuteUs), "3h 02m");
  EXPECT_EQ(FormatBandwidthBps(10 * kGbps), "10 Gbps");
  EXPECT_EQ(FormatMicroUsd(12'340'000), "$12.34");
  EXPECT_EQ(FormatMicroUsd(1'200), "$0.0012");
  EXPECT_EQ(FormatMilli(500), "0.5");
}

TEST(UnitsTest, TransferTime) {
  EXPECT_EQ(TransferTimeUs(0, kGbps), 0);
  // 10 GiB over 1 Gbps: 85.9 s.
  EXPECT_EQ(TransferTimeUs(10 * kGiB, kGbps), 85'899'346);
  EXPECT_EQ(TransferTimeUs(1, 0), INT64_MAX);
}

}  // namespace
}  // namespace meridian
