// On-device sampling against the host Sampler (sample/sampler.h): greedy rows must agree exactly;
// sampled rows may differ only where float rounding moves a boundary, so a tiny mismatch rate is
// tolerated. Skips without a GPU.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_test_util.h"
#include "sample/philox.h"
#include "sample/sampler.h"
#include "sample/token_bitmask.h"

namespace kvasir {
namespace {

struct Knobs {
  float temperature, top_p, min_p;
  int top_k;
};

TEST(CudaSampling, MatchesHostSampler) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  auto be = create_cuda_backend(CudaBackendOptions{});
  ASSERT_TRUE(be.ok()) << be.status().message();
  Backend& gpu = **be;
  std::mt19937 rng(99);
  const std::vector<Knobs> knobs = {{0.0f, 1.0f, 0.0f, 0},  {0.7f, 1.0f, 0.0f, 0},   {1.0f, 1.0f, 0.0f, 50},
                                    {0.9f, 0.9f, 0.0f, 0},  {1.2f, 1.0f, 0.05f, 0},  {0.8f, 0.8f, 0.02f, 40},
                                    {1.0f, 1.0f, 0.0f, 1},  {1.5f, 0.5f, 0.0f, 0},   {0.0f, 0.5f, 0.1f, 10}};
  for (int vocab : {5000, 128256}) {
    const int rows = static_cast<int>(knobs.size()) * 8;
    std::vector<float> logits(static_cast<size_t>(rows) * vocab);
    std::normal_distribution<float> nd(0.0f, 3.0f);
    for (auto& x : logits) x = nd(rng);
    // A greedy row with a tie at the maximum: the lowest id must win.
    logits[5] = 50.0f;
    logits[17] = 50.0f;
    std::vector<SamplingParams> params(static_cast<size_t>(rows));
    std::vector<SamplingRequestState> states(static_cast<size_t>(rows));
    std::vector<DeviceSamplingRow> drows(static_cast<size_t>(rows));
    for (int r = 0; r < rows; ++r) {
      const Knobs& k = knobs[static_cast<size_t>(r) % knobs.size()];
      SamplingParams& p = params[static_cast<size_t>(r)];
      p.temperature = k.temperature;
      p.top_p = k.top_p;
      p.min_p = k.min_p;
      p.top_k = k.top_k;
      SamplingRequestState& st = states[static_cast<size_t>(r)];
      st.params = &p;
      st.num_generated_tokens = r * 3;
      st.rng_key = rng_key_for_request(std::nullopt, 7, static_cast<uint64_t>(r));
      drows[static_cast<size_t>(r)] = {k.temperature, k.top_p, k.min_p, k.top_k, st.rng_key,
                                       static_cast<uint64_t>(st.num_generated_tokens)};
    }
    cuda_test::DeviceTensor lg(DType::kF32, {rows, vocab});
    lg.set(logits);
    std::vector<int32_t> dev(static_cast<size_t>(rows), -1);
    ASSERT_TRUE(gpu.sample(lg.t, drows.data(), rows, dev.data()).ok());
    Sampler sampler(vocab);
    SamplerOutput host;
    sampler.sample(logits, states, &host);
    int mismatches = 0, sampled = 0;
    for (int r = 0; r < rows; ++r) {
      const bool greedy = params[static_cast<size_t>(r)].temperature == 0.0f;
      if (greedy) {
        EXPECT_EQ(dev[static_cast<size_t>(r)], host.sampled_token_ids[static_cast<size_t>(r)]) << "greedy row " << r;
      } else {
        ++sampled;
        mismatches += dev[static_cast<size_t>(r)] != host.sampled_token_ids[static_cast<size_t>(r)];
      }
    }
    EXPECT_EQ(dev[0], 5) << "ties go to the lowest id";
    EXPECT_LE(mismatches, std::max(1, sampled / 50)) << "vocab " << vocab << ": " << mismatches << " of " << sampled;
  }
}

// Grammar masks on device logits: every row sampled after the mask lands on an allowed token,
// rows the mask names nothing for are untouched, and the masked logits equal the host twin's.
TEST(CudaSampling, TokenBitmaskMatchesHost) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  auto be = create_cuda_backend(CudaBackendOptions{});
  ASSERT_TRUE(be.ok()) << be.status().message();
  Backend& gpu = **be;
  ASSERT_TRUE(gpu.supports_device_token_bitmask());
  const int vocab = 49200, rows = 6, words = token_bitmask_words(vocab);
  std::mt19937 rng(5);
  std::vector<float> logits(static_cast<size_t>(rows) * vocab);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (auto& x : logits) x = nd(rng);
  // Mask rows for logits rows 4, 1 and 3 (row 3 allows only a handful of tokens); -1 is skipped.
  const std::vector<int32_t> mask_rows{4, 1, 3, -1};
  std::vector<int32_t> bits(mask_rows.size() * static_cast<size_t>(words));
  for (auto& w : bits) w = static_cast<int32_t>(rng());
  for (int w = 0; w < words; ++w) bits[2 * static_cast<size_t>(words) + w] = 0;
  for (int t : {7, 4000, 49199}) bits[2 * static_cast<size_t>(words) + t / 32] |= 1 << (t % 32);
  cuda_test::DeviceTensor lg(DType::kF32, {rows, vocab});
  lg.set(logits);
  // As the runner does while the masks are filled: an op recorded and submitted first, then the
  // mask and the sampling recorded after it in the same step.
  cuda_test::DeviceTensor zero(DType::kF32, {rows, vocab});
  zero.set(std::vector<float>(logits.size(), 0.0f));
  gpu.add(lg.t, zero.t);
  gpu.submit();
  ASSERT_TRUE(gpu.apply_token_bitmask(lg.t, bits.data(), words, mask_rows.data(), static_cast<int>(mask_rows.size())).ok());
  std::vector<DeviceSamplingRow> drows(static_cast<size_t>(rows));
  for (int r = 0; r < rows; ++r) drows[static_cast<size_t>(r)] = {1.0f, 1.0f, 0.0f, 0, static_cast<uint64_t>(r), 0};
  std::vector<int32_t> dev(static_cast<size_t>(rows), -1);
  ASSERT_TRUE(gpu.sample(lg.t, drows.data(), rows, dev.data()).ok());
  std::vector<float> expect = logits;
  for (size_t i = 0; i + 1 < mask_rows.size(); ++i) {
    apply_token_bitmask(std::span<float>(expect.data() + static_cast<size_t>(mask_rows[i]) * vocab, vocab),
                        std::span<const int32_t>(bits.data() + i * words, static_cast<size_t>(words)));
  }
  EXPECT_EQ(cuda_test::read_back(gpu, lg.t), expect);
  for (size_t i = 0; i + 1 < mask_rows.size(); ++i) {
    const int tok = dev[static_cast<size_t>(mask_rows[i])];
    ASSERT_GE(tok, 0);
    EXPECT_TRUE((static_cast<uint32_t>(bits[i * words + tok / 32]) >> (tok % 32)) & 1u) << "row " << mask_rows[i];
  }
}

}  // namespace
}  // namespace kvasir
