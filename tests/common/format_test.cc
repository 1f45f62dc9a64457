// Formatting for people (common/format.h): numbers, and data-derived text made safe to print.
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

// ESC, BEL and backspace in a tar member's name reached terminals and logs raw.
TEST(Format, ControlCharactersAreShownEscaped) {
  EXPECT_EQ(EscapeControlChars("a\x1b[31mred\x07\b"), "a\\x1b[31mred\\x07\\x08");
  EXPECT_EQ(EscapeControlChars(std::string("nul\0del\x7f", 8)), "nul\\x00del\\x7f");
  EXPECT_EQ(EscapeControlChars("one\ntwo\tthree\r"), "one\\ntwo\\tthree\\r");
  EXPECT_EQ(EscapeControlChars("one\ntwo\tthree\r", LineBreaks::kKeep), "one\ntwo\tthree\\r");
  EXPECT_EQ(EscapeControlChars("x\x1by", LineBreaks::kKeep), "x\\x1by");
  // C1 controls in UTF-8 (U+009B is an 8-bit CSI to some terminals) and bytes that are not
  // UTF-8 are escaped; printable UTF-8 is left alone, so is a backslash.
  EXPECT_EQ(EscapeControlChars("a\xc2\x9b"
                               "2J"),
            "a\\u009b2J");
  EXPECT_EQ(EscapeControlChars("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \\x1b"),
            "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \\x1b");
  EXPECT_EQ(EscapeControlChars("\x9b\xff\xc3"), "\\x9b\\xff\\xc3");
  EXPECT_EQ(EscapeControlChars("\xc0\xaf \xed\xa0\x80"), "\\xc0\\xaf \\xed\\xa0\\x80");
  EXPECT_EQ(EscapeControlChars(""), "");
}

TEST(Format, HasControlCharsFindsC0DelAndC1) {
  EXPECT_FALSE(HasControlChars("shard-000/abc_123 caf\xc3\xa9"));
  EXPECT_TRUE(HasControlChars("a\x1b"));
  EXPECT_TRUE(HasControlChars("a\tb"));
  EXPECT_TRUE(HasControlChars("\x7f"));
  EXPECT_TRUE(HasControlChars("\xc2\x85"));
  EXPECT_FALSE(HasControlChars("\xc2\xa0"));  // a no-break space is printable
}

}  // namespace
}  // namespace mlcd
