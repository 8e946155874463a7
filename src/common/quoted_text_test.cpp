#include "common/quoted_text.h"

#include <gtest/gtest.h>

#include <string>

namespace kvasir {
namespace {

TEST(QuotedText, PrintableTextIsUnchanged) {
  EXPECT_EQ(quoted_text("llama"), "llama");
  EXPECT_EQ(quoted_text("blk.0.attn_q.weight"), "blk.0.attn_q.weight");
  EXPECT_EQ(quoted_text("caf\xc3\xa9 \xe4\xb8\xad"), "caf\xc3\xa9 \xe4\xb8\xad");  // UTF-8 stays
  EXPECT_EQ(quoted_text(""), "");
}

TEST(QuotedText, ControlBytesAreEscaped) {
  EXPECT_EQ(quoted_text("ll\rama"), "ll\\rama");
  EXPECT_EQ(quoted_text("a\nb\tc"), "a\\nb\\tc");
  EXPECT_EQ(quoted_text(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(quoted_text("\x1b[2Jx\x7f"), "\\x1B[2Jx\\x7F");
  EXPECT_EQ(quoted_text("\xc2\x9b" "31m"), "\\u009B31m");  // C1 CSI
  EXPECT_EQ(quoted_text("a\\x41"), "a\\\\x41");  // a literal backslash cannot pose as an escape
  EXPECT_EQ(quoted_text("ab\xe2\x80\xae" "cd"), "ab\\u202Ecd");  // right-to-left override
}

TEST(QuotedText, InvalidUtf8IsEscapedBytewise) {
  EXPECT_EQ(quoted_text("a\xff" "b"), "a\\xFFb");
  EXPECT_EQ(quoted_text("\xe4\xb8"), "\\xE4\\xB8");  // truncated character
  EXPECT_EQ(quoted_text("\xc0\xaf"), "\\xC0\\xAF");  // overlong
}

TEST(QuotedText, LongTextIsCutAtACharacterBoundary) {
  const std::string big(100000, 'x');
  const std::string q = quoted_text(big, 16);
  EXPECT_EQ(q, std::string(16, 'x') + "...(100000 bytes)");
  // A 3-byte character straddling the cut is left out whole.
  EXPECT_EQ(quoted_text("ab\xe4\xb8\xad", 4), "ab...(5 bytes)");
  EXPECT_EQ(quoted_text("ab\xe4\xb8\xad", 5), "ab\xe4\xb8\xad");
}

TEST(QuotedText, OutputHasNoControlBytesForAnyByte) {
  for (int b = 0; b < 256; ++b) {
    const std::string q = quoted_text(std::string(1, static_cast<char>(b)) + "\xc2");
    for (unsigned char c : q) EXPECT_TRUE(c >= 0x20 && c != 0x7F) << b;
  }
}

}  // namespace
}  // namespace kvasir
