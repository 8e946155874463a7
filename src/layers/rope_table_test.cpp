// RoPE tables: the longrope variant (short and long per-dimension factors, magnitude scaling,
// the per-sequence choice) against the formula transformers uses; yarn against transformers'
// own numbers (_compute_yarn_parameters, 5.x), with and without truncate.
#include "layers/rope_table.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

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

RopeScaling gpt_oss_yarn(bool truncate) {
  RopeScaling s;
  s.type = RopeScalingType::kYarn;
  s.factor = 32.0;
  s.original_max_position_embeddings = 4096;
  s.beta_fast = 32.0;
  s.beta_slow = 1.0;
  s.truncate = truncate;
  return s;
}

void expect_table(const RopeTable& t, const std::vector<float>& want) {
  ASSERT_EQ(t.inv_freq.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(t.inv_freq[i], want[i], 2e-6 * want[i]) << i;
  EXPECT_NEAR(t.attention_factor, 1.3465735902799727, 1e-6);  // 0.1 ln 32 + 1
}

TEST(RopeTable, YarnTruncatesTheCorrectionRangeUnlessToldNot) {
  // gpt-oss's rope_parameters (theta 150000) over 16 dims: only dims 3 and 4 sit on the ramp,
  // where rounding its ends out changes them.
  expect_table(make_rope_table(150000.0, 16, gpt_oss_yarn(false)),
               {1.0f, 0.22541800141334534f, 0.05081327259540558f, 0.006794959306716919f,
                0.0004564839182421565f, 1.818833698052913e-05f, 4.099978468730114e-06f,
                9.242089618055616e-07f});
  expect_table(make_rope_table(150000.0, 16, gpt_oss_yarn(true)),
               {1.0f, 0.22541800141334534f, 0.05081327259540558f, 0.007755465339869261f,
                0.0009144543437287211f, 1.818833698052913e-05f, 4.099978468730114e-06f,
                9.242089618055616e-07f});
}

TEST(RopeTable, YarnClampsTheRangeToTheWholeDimensionCount) {
  // theta 100 over 8 dims: the range's top (6) lies past the 4 frequencies; transformers clamps
  // it to rotary_dim - 1, not to the last frequency, so the ramp is still rising at dim 3.
  expect_table(make_rope_table(100.0, 8, gpt_oss_yarn(true)), {1.0f, 0.316227764f, 0.100000001f, 0.0239641368f});
  expect_table(make_rope_table(100.0, 8, gpt_oss_yarn(false)), {1.0f, 0.316227764f, 0.100000001f, 0.0277359355f});
}

}  // namespace
}  // namespace kvasir
