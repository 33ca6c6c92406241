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

}  // namespace
}  // namespace meridian
