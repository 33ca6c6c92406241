#include "netsim/delay_line.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>

namespace meridian::netsim {
namespace {

// An IPv4 packet from `source` to `destination` ("10.200.3.2") carrying `payload`.
std::string Packet(uint32_t source, uint32_t destination, const std::string& payload = "") {
  std::string p(20, '\0');
  p[0] = 0x45;
  const size_t total = p.size() + payload.size();
  p[2] = static_cast<char>(total >> 8);
  p[3] = static_cast<char>(total & 0xff);
  for (int i = 0; i < 4; ++i) {
    p[12 + i] = static_cast<char>(source >> (24 - 8 * i));
    p[16 + i] = static_cast<char>(destination >> (24 - 8 * i));
  }
  return p + payload;
}
constexpr uint32_t Site(uint32_t n) { return 10u << 24 | 200u << 16 | n << 8 | 2u; }

TEST(DelayRulesTest, ParsesSubnetsDelaysAndJitter) {
  auto rules = ParseDelayRules("# the factory's link\n10.200.3.7/24 0ms 20ms\n\n10.200.1.2 1.5ms 0ms  # one host\n");
  ASSERT_TRUE(rules.ok()) << rules.status().message();
  ASSERT_EQ(rules->size(), 2u);
  EXPECT_EQ((*rules)[0].network, Site(3) & 0xffffff00u);
  EXPECT_EQ((*rules)[0].prefix_length, 24);
  EXPECT_EQ((*rules)[0].delay_us, 0);
  EXPECT_EQ((*rules)[0].jitter_us, 20'000);
  EXPECT_TRUE((*rules)[0].Matches(Site(3)));
  EXPECT_FALSE((*rules)[0].Matches(Site(2)));
  EXPECT_EQ((*rules)[1].prefix_length, 32);
  EXPECT_EQ((*rules)[1].delay_us, 1'500);
  EXPECT_TRUE((*rules)[1].Matches(Site(1)));
  EXPECT_FALSE((*rules)[1].Matches(Site(1) + 1));
}

TEST(DelayRulesTest, ABadLineIsNamed) {
  struct Case {
    std::string text;
    std::string error;
  };
  for (const Case& c : std::vector<Case>{
           {"10.200.3.0/24 0ms", "line 1: want 'SUBNET DELAY JITTER' (e.g. 10.200.3.0/24 0ms 20ms), got 2 words"},
           {"\n10.200.300.0/24 0ms 1ms", "line 2: '10.200.300.0' is not an IPv4 address"},
           {"10.200.3.0/33 0ms 1ms", "line 1: '/33' is not a prefix length (0 to 32)"},
           {"10.200.3.0/ 0ms 1ms", "line 1: '/' is not a prefix length (0 to 32)"},
           {"10.200.3.0/24 0ms 20 parsecs", "line 1: want 'SUBNET DELAY JITTER' (e.g. 10.200.3.0/24 0ms 20ms), got 4 words"},
           {"10.200.3.0/24 0ms 11s", "line 1: a delay or jitter is 0 to 10s"},
       }) {
    auto rules = ParseDelayRules(c.text);
    ASSERT_FALSE(rules.ok()) << c.text;
    EXPECT_EQ(rules.status().message(), c.error);
  }
  std::string many;
  for (int i = 0; i <= 256; ++i) many += "10.0.0.1 0ms 1ms\n";
  EXPECT_EQ(ParseDelayRules(many).status().message(), "line 257: more than 256 rules");
}

TEST(DelayLineTest, ReadsTheEndsOfAnIpv4Packet) {
  auto ends = ReadIpv4Ends(Packet(Site(3), Site(1), "payload"));
  ASSERT_TRUE(ends.ok());
  EXPECT_EQ(ends->source, Site(3));
  EXPECT_EQ(ends->destination, Site(1));
  EXPECT_EQ(ReadIpv4Ends("short").status().message(), "5 bytes: shorter than an IPv4 header");
  std::string v6 = Packet(Site(3), Site(1));
  v6[0] = 0x60;
  EXPECT_EQ(ReadIpv4Ends(v6).status().message(), "IP version 6, not 4");
  std::string truncated = Packet(Site(3), Site(1), "payload");
  truncated.resize(24);
  EXPECT_EQ(ReadIpv4Ends(truncated).status().message(), "header of 20 bytes and length 27 in a 24-byte packet");
}

TEST(DelayLineTest, APacketWaitsEachMatchingLinksDelay) {
  DelayLine line({});
  line.SetRules(*ParseDelayRules("10.200.3.0/24 5ms 0ms\n10.200.1.0/24 2ms 0ms\n"));
  ASSERT_TRUE(line.Admit(Packet(Site(3), Site(2), "a"), 1'000));  // crosses the factory's link: 5 ms
  ASSERT_TRUE(line.Admit(Packet(Site(3), Site(1), "b"), 1'000));  // both links: 7 ms
  ASSERT_TRUE(line.Admit(Packet(Site(2), Site(4), "c"), 1'000));  // neither: at once
  EXPECT_EQ(line.NextDueUs(), 1'000);
  std::vector<std::string> due = line.TakeDue(1'000);
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].back(), 'c');
  EXPECT_EQ(line.NextDueUs(), 6'000);
  EXPECT_TRUE(line.TakeDue(5'999).empty());
  due = line.TakeDue(6'000);
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0], Packet(Site(3), Site(2), "a"));  // written back as it came
  EXPECT_EQ(line.NextDueUs(), 8'000);
  ASSERT_EQ(line.TakeDue(8'000).size(), 1u);
  EXPECT_EQ(line.NextDueUs(), std::nullopt);
  EXPECT_EQ(line.stats().packets, 3);
  EXPECT_EQ(line.stats().delayed, 2);
  EXPECT_EQ(line.stats().added_us_total, 12'000);
  EXPECT_EQ(line.stats().added_us_max, 7'000);
  EXPECT_EQ(line.stats().bytes, 63);
}

// The waits of `n` packets, each its own flow, admitted at 0 on a 10 ms jitter.
std::vector<int64_t> JitteredWaits(uint64_t seed, int n) {
  DelayLine::Options options;
  options.seed = seed;
  DelayLine line(options);
  line.SetRules(*ParseDelayRules("10.200.3.0/24 1ms 10ms"));
  for (int i = 0; i < n; ++i) EXPECT_TRUE(line.Admit(Packet(Site(3), Site(100) + static_cast<uint32_t>(i)), 0));
  std::vector<int64_t> waits;
  while (auto next = line.NextDueUs()) {
    for (size_t k = line.TakeDue(*next).size(); k > 0; --k) waits.push_back(*next);
  }
  return waits;
}

TEST(DelayLineTest, JitterSpreadsWaitsOverItsRange) {
  const std::vector<int64_t> waits = JitteredWaits(1, 2'000);
  ASSERT_EQ(waits.size(), 2'000u);
  const auto [lo, hi] = std::minmax_element(waits.begin(), waits.end());
  EXPECT_GE(*lo, 1'000);
  EXPECT_LE(*hi, 11'000);
  // Uniform over [1 ms, 11 ms]: 2,000 draws come within 0.1 ms of both ends.
  EXPECT_LE(*lo, 1'100);
  EXPECT_GE(*hi, 10'900);
  int64_t sum = 0;
  for (int64_t w : waits) sum += w;
  EXPECT_NEAR(static_cast<double>(sum) / 2'000, 6'000, 250);
  EXPECT_EQ(JitteredWaits(1, 50), JitteredWaits(1, 50));  // a seed replays
  EXPECT_NE(JitteredWaits(1, 50), JitteredWaits(2, 50));
}

TEST(DelayLineTest, AFlowKeepsItsOrderAndDoesNotHoldOthersBack) {
  DelayLine line({});
  line.SetRules(*ParseDelayRules("10.200.3.0/24 0ms 50ms"));
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(line.Admit(Packet(Site(3), Site(1), std::to_string(i)), i * 100));
  }
  // Another flow, from a site without jitter, admitted last, leaves at once.
  ASSERT_TRUE(line.Admit(Packet(Site(2), Site(1), "other"), 20'000));
  std::vector<std::string> now = line.TakeDue(20'000);
  ASSERT_FALSE(now.empty());
  EXPECT_EQ(now.back(), Packet(Site(2), Site(1), "other"));
  std::vector<std::string> all(now.begin(), now.end() - 1);
  for (const std::string& p : line.TakeDue(std::numeric_limits<int64_t>::max())) all.push_back(p);
  ASSERT_EQ(all.size(), 200u);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(all[i], Packet(Site(3), Site(1), std::to_string(i))) << i;
}

TEST(DelayLineTest, AFullLineDropsAndOtherPacketsPassAtOnce) {
  DelayLine::Options options;
  options.max_packets = 3;
  options.max_bytes = 1'000;
  DelayLine line(options);
  line.SetRules(*ParseDelayRules("10.200.3.0/24 10ms 0ms"));
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(line.Admit(Packet(Site(3), Site(1)), 0));
  EXPECT_FALSE(line.Admit(Packet(Site(3), Site(1)), 0));
  EXPECT_EQ(line.stats().dropped, 1);
  EXPECT_EQ(line.held(), 3u);
  ASSERT_EQ(line.TakeDue(10'000).size(), 3u);
  EXPECT_FALSE(line.Admit(Packet(Site(3), Site(1), std::string(1'000, 'x')), 0));  // over max_bytes
  EXPECT_EQ(line.stats().dropped, 2);
  // What is not IPv4 is written back at once.
  EXPECT_TRUE(line.Admit(std::string("\x60\x00\x00\x00", 4), 500));
  EXPECT_EQ(line.TakeDue(500).size(), 1u);
  EXPECT_EQ(line.stats().not_ipv4, 1);
  EXPECT_EQ(line.stats().packets, 4);
}

}  // namespace
}  // namespace meridian::netsim
