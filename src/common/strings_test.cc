#include "common/strings.h"

#include <string_view>
#include <vector>

#include <gtest/gtest.h>

namespace meridian {
namespace {

TEST(StringsTest, JoinWithOrReadsAsChoices) {
  EXPECT_EQ(JoinWithOr(std::vector<std::string>{}), "");
  EXPECT_EQ(JoinWithOr(std::vector<std::string>{"A100"}), "A100");
  EXPECT_EQ(JoinWithOr(std::vector<std::string>{"A100", "T4"}), "A100 or T4");
  EXPECT_EQ(JoinWithOr(std::vector<std::string_view>{"cloud", "dc", "edge"}), "cloud, dc or edge");
}

TEST(StringsTest, IsUtf8TakesWellFormedTextOnly) {
  for (std::string_view good : {"", "plain ascii", "caf\xc3\xa9", "\xe2\x82\xac 5", "\xf0\x9f\x98\x80",
                                "\xf4\x8f\xbf\xbf", "\xed\x9f\xbf"}) {
    EXPECT_TRUE(IsUtf8(good)) << good;
  }
  for (std::string_view bad : {"\xc1", "digit\xc1-model", "\x80", "\xc3", "\xe2\x82", "\xc0\xaf", "\xe0\x80\xaf",
                               "\xf0\x80\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xf8\x88\x80\x80\x80",
                               "\xff", "\xc3\x28"}) {
    EXPECT_FALSE(IsUtf8(bad)) << testing::PrintToString(bad);
  }
}

}  // namespace
}  // namespace meridian
