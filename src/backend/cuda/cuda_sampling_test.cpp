// On-device sampling against the host Sampler (sample/sampler.h): greedy rows must agree exactly;
// sampled rows may differ only where float rounding moves a boundary, so a tiny mismatch rate is
// tolerated. Skips without a GPU.
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_test_util.h"
#include "sample/philox.h"
#include "sample/rejection_sampler.h"
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

// Speculative verify on the device (sample_and_verify: the sampling kernel, then verify_drafts.cu)
// against the host rule (append_verify_rows, the host Sampler, num_emitted_tokens) over many
// requests of random logits and knobs. Drafts copy the host's own samples for a random prefix and
// then differ, so every acceptance length occurs. Greedy requests must agree exactly; sampled ones
// may differ only where float rounding moves a sampling boundary (as MatchesHostSampler).
TEST(CudaSampling, DraftVerifyMatchesHostRule) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  auto be = create_cuda_backend(CudaBackendOptions{});
  ASSERT_TRUE(be.ok()) << be.status().message();
  Backend& gpu = **be;
  std::mt19937 rng(2024);
  const std::vector<Knobs> knobs = {{0.0f, 1.0f, 0.0f, 0}, {0.8f, 0.9f, 0.0f, 0},  {1.0f, 1.0f, 0.0f, 20},
                                    {1.0f, 1.0f, 0.05f, 0}, {0.0f, 0.5f, 0.1f, 10}, {0.6f, 0.95f, 0.02f, 50}};
  const int vocab = 32000, num_requests = 96, max_drafts = 4;
  int greedy_requests = 0, sampled_requests = 0, sampled_mismatches = 0, accepted_total = 0;
  std::vector<int> emitted_seen(max_drafts + 2, 0);
  for (int round = 0; round < 3; ++round) {
    // Rows: request i owns 1 + k_i consecutive rows; a few padding rows at the end, covered by no request.
    std::vector<DraftVerifyRow> reqs;
    std::vector<SamplingParams> params(num_requests);
    std::vector<DeviceSamplingRow> drows;
    int num_rows = 0;
    for (int i = 0; i < num_requests; ++i) {
      const int k = static_cast<int>(rng() % (max_drafts + 1));
      reqs.push_back({num_rows, k, 0, 0});
      const Knobs& kn = knobs[static_cast<size_t>(i) % knobs.size()];
      SamplingParams& p = params[static_cast<size_t>(i)];
      p.temperature = kn.temperature, p.top_p = kn.top_p, p.min_p = kn.min_p, p.top_k = kn.top_k;
      num_rows += 1 + k;
    }
    const int num_padding = 3;
    std::vector<float> logits(static_cast<size_t>(num_rows + num_padding) * vocab);
    std::normal_distribution<float> nd(0.0f, 2.0f);
    for (auto& x : logits) x = nd(rng);
    // The host rule's samples first (row j of a request sees drafts 0..j-1 as output; with no
    // penalties the draws depend only on the knobs, the key and the position g + j).
    std::vector<SamplingRequestState> states;
    std::vector<std::vector<int32_t>> outputs(num_requests);
    for (int i = 0; i < num_requests; ++i) {
      const DraftVerifyRow& r = reqs[static_cast<size_t>(i)];
      const uint64_t key = rng_key_for_request(std::nullopt, 11, static_cast<uint64_t>(round * 1000 + i));
      const int g = static_cast<int>(rng() % 50);
      for (int j = 0; j <= r.num_drafts; ++j) {
        const Knobs& kn = knobs[static_cast<size_t>(i) % knobs.size()];
        drows.push_back({kn.temperature, kn.top_p, kn.min_p, kn.top_k, key, static_cast<uint64_t>(g + j)});
      }
      SamplingRequestState st;
      st.params = &params[static_cast<size_t>(i)];
      st.num_generated_tokens = g;
      st.rng_key = key;
      states.push_back(st);
    }
    for (int p = 0; p < num_padding; ++p) drows.push_back({});
    std::vector<SamplingRequestState> rows;
    for (int i = 0; i < num_requests; ++i) {
      DraftVerifyRequest v;
      v.state = states[static_cast<size_t>(i)];
      v.num_drafts = reqs[static_cast<size_t>(i)].num_drafts;
      // Output so far: g placeholder tokens then the drafts (spans only count here).
      outputs[static_cast<size_t>(i)].assign(static_cast<size_t>(v.state.num_generated_tokens + v.num_drafts), 0);
      v.state.output_token_ids = outputs[static_cast<size_t>(i)];
      append_verify_rows(v, &rows);
    }
    Sampler sampler(vocab);
    SamplerOutput host;
    std::vector<float> host_logits(logits.begin(), logits.begin() + static_cast<long>(num_rows) * vocab);  // edited in place
    sampler.sample(host_logits, rows, &host);
    // Drafts: the host samples for a random prefix, then a token that differs.
    std::vector<int32_t> drafts;
    for (int i = 0; i < num_requests; ++i) {
      DraftVerifyRow& r = reqs[static_cast<size_t>(i)];
      r.draft_offset = static_cast<int32_t>(drafts.size());
      const int agree = static_cast<int>(rng() % (r.num_drafts + 1));
      for (int j = 0; j < r.num_drafts; ++j) {
        const int32_t s = host.sampled_token_ids[static_cast<size_t>(r.first_row + j)];
        drafts.push_back(j < agree ? s : (s + 1) % vocab);
      }
    }
    cuda_test::DeviceTensor lg(DType::kF32, {num_rows + num_padding, vocab});
    lg.set(logits);
    std::vector<int32_t> dev_tokens(static_cast<size_t>(num_rows + num_padding), -1), dev_counts(num_requests, -1);
    ASSERT_TRUE(gpu.sample_and_verify(lg.t, drows.data(), num_rows + num_padding, reqs.data(), num_requests,
                                      drafts.data(), static_cast<int>(drafts.size()), dev_tokens.data(),
                                      dev_counts.data())
                    .ok());
    size_t packed = 0;
    for (int i = 0; i < num_requests; ++i) {
      const DraftVerifyRow& r = reqs[static_cast<size_t>(i)];
      const std::span<const int32_t> samples(host.sampled_token_ids.data() + r.first_row,
                                             static_cast<size_t>(r.num_drafts) + 1);
      const std::span<const int32_t> d(drafts.data() + r.draft_offset, static_cast<size_t>(r.num_drafts));
      const int want = num_emitted_tokens(d, samples);
      const int got = dev_counts[static_cast<size_t>(i)];
      ASSERT_GE(got, 1);
      ASSERT_LE(got, r.num_drafts + 1);
      const std::vector<int32_t> got_tokens(dev_tokens.begin() + static_cast<long>(packed),
                                            dev_tokens.begin() + static_cast<long>(packed) + got);
      const std::vector<int32_t> want_tokens(samples.begin(), samples.begin() + want);
      packed += static_cast<size_t>(got);
      if (params[static_cast<size_t>(i)].temperature == 0.0f) {
        ++greedy_requests;
        EXPECT_EQ(got_tokens, want_tokens) << "greedy request " << i << " round " << round;
      } else {
        ++sampled_requests;
        sampled_mismatches += got_tokens != want_tokens;
      }
      // Whatever was sampled, the device kept exactly the drafts that equal its own tokens.
      for (int j = 0; j + 1 < got; ++j) EXPECT_EQ(got_tokens[static_cast<size_t>(j)], d[static_cast<size_t>(j)]);
      accepted_total += got - 1;
      ++emitted_seen[static_cast<size_t>(got)];
    }
  }
  EXPECT_LE(sampled_mismatches, std::max(1, sampled_requests / 25)) << sampled_mismatches << " of " << sampled_requests;
  EXPECT_GT(greedy_requests, 0);
  EXPECT_GT(accepted_total, 0);
  for (int e = 1; e <= max_drafts + 1; ++e) EXPECT_GT(emitted_seen[static_cast<size_t>(e)], 0) << "emitted " << e;
}

// The backend's refusals name the bad request rows.
TEST(CudaSampling, DraftVerifyRefusesOverlappingRequests) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  auto be = create_cuda_backend(CudaBackendOptions{});
  ASSERT_TRUE(be.ok()) << be.status().message();
  cuda_test::DeviceTensor lg(DType::kF32, {4, 100});
  lg.set(std::vector<float>(400, 0.0f));
  const std::vector<DeviceSamplingRow> rows(4);
  const std::vector<DraftVerifyRow> reqs{{0, 2, 0, 0}, {1, 0, 2, 0}};
  const std::vector<int32_t> drafts{1, 2};
  std::vector<int32_t> tokens(4), counts(2);
  const Status st = (*be)->sample_and_verify(lg.t, rows.data(), 4, reqs.data(), 2, drafts.data(), 2, tokens.data(),
                                             counts.data());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("request 1"), std::string::npos) << st.message();
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

// Overlapped steps: sample_async leaves a step's tokens on the device, the next step's
// embedding_fed reads them there (graphs of the fed step replayed), and collect_sampled brings
// each step's tokens back in order, also after a synchronous read-back came between.
TEST(CudaSampling, AsyncSamplesFeedTheNextEmbeddingAndComeBackInOrder) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  ::setenv("KVASIR_CUDA_OVERLAP_STEPS", "1", 1);  // read when the backend is made
  auto be = create_cuda_backend(CudaBackendOptions{});
  ::unsetenv("KVASIR_CUDA_OVERLAP_STEPS");
  ASSERT_TRUE(be.ok()) << be.status().message();
  Backend& gpu = **be;
  ASSERT_TRUE(gpu.capabilities().sampled_token_feedback);
  const int vocab = 3000, d = 64, rows = 6;
  std::mt19937 rng(5);
  const std::vector<float> table_v = cuda_test::random_values(rng, static_cast<size_t>(vocab) * d);
  cuda_test::DeviceTensor table(DType::kBF16, {vocab, d});
  table.set(table_v);
  std::vector<DeviceSamplingRow> greedy(static_cast<size_t>(rows));  // temperature 0
  // Greedy logits whose argmax in row r is want[r].
  auto logits_for = [&](const std::vector<int32_t>& want) {
    std::vector<float> l(static_cast<size_t>(rows) * vocab, 0.0f);
    for (int r = 0; r < rows; ++r) l[static_cast<size_t>(r) * vocab + static_cast<size_t>(want[static_cast<size_t>(r)])] = 9.0f;
    return l;
  };
  // One logits tensor per step: a host copy into a tensor the device may still read would race
  // (the backend's stream does not wait for the default stream).
  cuda_test::DeviceTensor lg(DType::kF32, {rows, vocab}), lg_b(DType::kF32, {rows, vocab});
  cuda_test::DeviceTensor emb(DType::kBF16, {4, d});
  for (int round = 0; round < 4; ++round) {  // graphs are captured from the second sighting on
    const std::vector<int32_t> a = {11 + round, 250, 999, 7, 2999, 1234};
    const std::vector<int32_t> b = {3, 4 + round, 5, 6, 7, 8};
    gpu.synchronize();  // the previous round's steps no longer read the logits
    lg.set(logits_for(a));
    lg_b.set(logits_for(b));
    ASSERT_TRUE(gpu.sample_async(lg.t, greedy.data(), rows).ok());
    // The next step, recorded before a's tokens are back: tokens 0, 2, 3 come from a's rows 4, 0, 2.
    const std::vector<int32_t> ids = {0, 77, 0, 0}, sources = {4, -1, 0, 2};
    gpu.embedding_fed(table.t, ids.data(), sources.data(), 4, 1.0f, emb.t);
    ASSERT_TRUE(gpu.sample_async(lg_b.t, greedy.data(), rows).ok());
    EXPECT_FALSE(gpu.sample_async(lg_b.t, greedy.data(), rows).ok()) << "a third uncollected step was accepted";
    std::vector<int32_t> got(static_cast<size_t>(rows), -1);
    ASSERT_TRUE(gpu.collect_sampled(got.data()).ok());
    EXPECT_EQ(got, a);
    // A synchronous read-back between two collects.
    const std::vector<float> e = cuda_test::read_back(gpu, emb.t);
    const std::vector<int32_t> want_ids = {a[4], 77, a[0], a[2]};
    for (int t = 0; t < 4; ++t) {
      for (int c = 0; c < d; ++c) {
        ASSERT_EQ(e[static_cast<size_t>(t) * d + static_cast<size_t>(c)],
                  table_v[static_cast<size_t>(want_ids[static_cast<size_t>(t)]) * d + static_cast<size_t>(c)])
            << "round " << round << " token " << t;
      }
    }
    ASSERT_TRUE(gpu.collect_sampled(got.data()).ok());
    EXPECT_EQ(got, b);
    EXPECT_FALSE(gpu.collect_sampled(got.data()).ok()) << "collected a step that was never left on the device";
  }
}

}  // namespace
}  // namespace kvasir
