// RoPE tables: the longrope variant (short and long per-dimension factors, magnitude scaling,
// the per-sequence choice) against the formula transformers uses.
#include "layers/rope_table.h"

#include <gtest/gtest.h>

#include <cmath>

namespace kvasir {
namespace {

TEST(RopeTable, LongropeDividesEachFrequencyByItsFactor) {
  RopeScaling s;
  s.type = RopeScalingType::kLongrope;
  s.short_factor = {1.0, 2.0, 4.0};
  s.long_factor = {3.0, 5.0, 7.0};
  s.original_max_position_embeddings = 16;
  s.factor = 4.0;
  s.attention_factor = 1.25;
  const RopeTable t = make_rope_table(10000.0, 6, s);
  const RopeTable plain = make_rope_table(10000.0, 6, RopeScaling{});
  ASSERT_EQ(t.inv_freq.size(), 3u);
  ASSERT_EQ(t.long_inv_freq.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_FLOAT_EQ(t.inv_freq[i], plain.inv_freq[i] / static_cast<float>(s.short_factor[i]));
    EXPECT_FLOAT_EQ(t.long_inv_freq[i], plain.inv_freq[i] / static_cast<float>(s.long_factor[i]));
  }
  EXPECT_FLOAT_EQ(t.attention_factor, 1.25f);
  // transformers: long factors once the sequence is longer than the original length.
  EXPECT_EQ(&t.inv_freq_for(16), &t.inv_freq);
  EXPECT_EQ(&t.inv_freq_for(17), &t.long_inv_freq);
  EXPECT_EQ(&plain.inv_freq_for(1 << 20), &plain.inv_freq);
}

}  // namespace
}  // namespace kvasir
