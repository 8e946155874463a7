#include "sample/token_bitmask.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace kvasir {
namespace {

TEST(TokenBitmask, ClearsExactlyTheDisallowedTokens) {
  const int vocab = 70;  // three words, the last partly used
  std::vector<int32_t> words(static_cast<size_t>(token_bitmask_words(vocab)), -1);
  words[0] = 0;                        // tokens 0..31 banned
  words[1] = static_cast<int32_t>(0x5u);  // tokens 32 and 34 allowed
  std::vector<float> row(vocab, 1.0f);
  apply_token_bitmask(row, words);
  for (int t = 0; t < vocab; ++t) {
    const bool allowed = t >= 64 || t == 32 || t == 34;
    EXPECT_EQ(std::isinf(row[static_cast<size_t>(t)]), !allowed) << t;
  }
}

TEST(TokenBitmask, ShortMaskBansTheRestOfTheRow) {
  std::vector<int32_t> words{-1};
  std::vector<float> row(40, 0.5f);
  apply_token_bitmask(row, words);
  for (int t = 0; t < 32; ++t) EXPECT_EQ(row[static_cast<size_t>(t)], 0.5f);
  for (int t = 32; t < 40; ++t) EXPECT_TRUE(std::isinf(row[static_cast<size_t>(t)]));
}

TEST(TokenBitmask, AllOnesLeavesTheRowAlone) {
  std::vector<int32_t> words(2, -1);
  std::vector<float> row(64, 2.0f);
  apply_token_bitmask(row, words);
  for (float v : row) EXPECT_EQ(v, 2.0f);
}

}  // namespace
}  // namespace kvasir
