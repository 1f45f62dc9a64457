// Number formatting for people (common/format.h).
#include "common/format.h"

#include <gtest/gtest.h>

namespace mlcd {
namespace {

TEST(Format, FixedDigitsAfterThePoint) {
  EXPECT_EQ(Fixed(83.456, 2), "83.46");
  EXPECT_EQ(Fixed(83.456), "83.46");  // 2 by default
  EXPECT_EQ(Fixed(0.5, 0), "0");      // round half to even, as printf does
  EXPECT_EQ(Fixed(1.5, 0), "2");
  EXPECT_EQ(Fixed(2, 3), "2.000");
  EXPECT_EQ(Fixed(-0.04, 1), "-0.0");
  EXPECT_EQ(Fixed(123456789.125, 1), "123456789.1");
  EXPECT_EQ(Fixed(1e20, 0), "100000000000000000000");
}

}  // namespace
}  // namespace mlcd
