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

TEST(StringsTest, ToUtf8ReplacesEachByteThatIsNotUtf8) {
  EXPECT_EQ(ToUtf8("caf\xc3\xa9"), "caf\xc3\xa9");
  EXPECT_EQ(ToUtf8("a\xff" "b"), "a\xef\xbf\xbd" "b");
  // A sequence cut short (a tail cut inside a character), then text again.
  EXPECT_EQ(ToUtf8("\xe2\x82" "x"), "\xef\xbf\xbd\xef\xbf\xbd" "x");
  EXPECT_EQ(ToUtf8("\xc3"), "\xef\xbf\xbd");
  EXPECT_EQ(ToUtf8("\xed\xa0\x80"), "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(ToUtf8(std::string_view("\0\xfe\xf0\x9f\x98\x80", 6)),
            std::string_view("\0\xef\xbf\xbd\xf0\x9f\x98\x80", 8));
  EXPECT_TRUE(IsUtf8(ToUtf8("\xc0\xaf\xf8\x88\x80\x80\x80")));
  EXPECT_EQ(FirstNonUtf8("ok \xc3\xa9 \xff"), 6u);
  EXPECT_EQ(FirstNonUtf8("ok"), std::string_view::npos);
}

}  // namespace
}  // namespace meridian
