#include "common/status.h"

#include <gtest/gtest.h>

namespace meridian {
namespace {

StatusOr<int> Half(int x) {
  if (x % 2 != 0) return InvalidArgumentError("odd");
  return x / 2;
}

Status UseReturnIfError(int x, int* out) {
  MERIDIAN_ASSIGN_OR_RETURN(int h, Half(x));
  MERIDIAN_RETURN_IF_ERROR(h > 100 ? OutOfRangeError("too big") : OkStatus());
  *out = h;
  return OkStatus();
}

TEST(StatusTest, OkByDefault) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.ToString(), "OK");
}

TEST(StatusTest, CarriesCodeAndMessage) {
  Status s = UnavailableError("peer gone");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.ToString(), "UNAVAILABLE: peer gone");
  EXPECT_EQ(s.WithPrefix("agent 3").message(), "agent 3: peer gone");
  EXPECT_TRUE(OkStatus().WithPrefix("x").ok());
}

TEST(StatusTest, MacrosPropagate) {
  int out = 0;
  EXPECT_TRUE(UseReturnIfError(8, &out).ok());
  EXPECT_EQ(out, 4);
  EXPECT_EQ(UseReturnIfError(7, &out).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(UseReturnIfError(400, &out).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(out, 4);
}

TEST(StatusTest, StatusOrValueOrError) {
  StatusOr<int> v = Half(10);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 5);
  StatusOr<int> e = Half(3);
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.status().message(), "odd");
}

TEST(StatusDeathTest, ValueOfErrorStopsTheProcess) {
  StatusOr<int> e = Half(3);
  EXPECT_DEATH((void)e.value(), "odd");
  EXPECT_DEATH(MERIDIAN_CHECK(1 + 1 == 3), "1 \\+ 1 == 3");
}

}  // namespace
}  // namespace meridian
