#include "common/utf8.h"

#include <gtest/gtest.h>

namespace kvasir {
namespace {

TEST(Utf8, ValidatesStrictly) {
  EXPECT_TRUE(utf8_valid("h\xc3\xa9llo \xf0\x9f\x98\x80"));
  EXPECT_FALSE(utf8_valid("\xc0\xaf"));          // overlong
  EXPECT_FALSE(utf8_valid("\xed\xa0\x80"));      // surrogate
  EXPECT_FALSE(utf8_valid("\xf4\x90\x80\x80"));  // > U+10FFFF
  EXPECT_FALSE(utf8_valid("\xe2\x82"));          // truncated
}

TEST(Utf8, CompletePrefixStopsBeforeAPartialCharacter) {
  std::string s = "ab\xf0\x9f\x98\x80";
  for (size_t cut = 0; cut <= s.size(); ++cut) {
    size_t p = utf8_complete_prefix(s.substr(0, cut));
    EXPECT_TRUE(utf8_valid(s.substr(0, p)));
    EXPECT_EQ(p, cut < 2 ? cut : (cut < 6 ? 2u : 6u));
  }
}

TEST(Utf8, SanitizeReplacesEachBadByte) {
  EXPECT_EQ(utf8_sanitize("a\xff" "b"), "a\xef\xbf\xbd" "b");
  std::string out;
  utf8_append(out, 0x1F600);
  EXPECT_EQ(out, "\xf0\x9f\x98\x80");
}

}  // namespace
}  // namespace kvasir
