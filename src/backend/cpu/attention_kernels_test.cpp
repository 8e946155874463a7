// The AVX-512 attention kernels equal the AVX2 ones bit for bit (attention_kernels.h): scores,
// exponentials with their sum, and weighted sums, over float32 and float16 cache rows scattered
// through a cache, for key counts on and off the vector widths, head sizes on and off the 64-wide
// path, and GQA groups of 1 to 8 query heads. The pair entry points (two tokens over the union of
// their key ranges) equal the AVX2 single-token kernels run per token over its own range, in both
// sets, for overlapping, nested, shifted and disjoint ranges.
#include "backend/cpu/attention_kernels.h"

#include <gtest/gtest.h>

#include <immintrin.h>

#include <array>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/quant/cpu_isa.h"

namespace kvasir::cpu {
namespace {

uint16_t to_half(float x) { return _cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT); }

// A cache of `rows` rows of hd values, and a random order of rows (the keys of one range).
template <typename T>
struct Rows {
  std::vector<T> cache;
  std::vector<int64_t> offsets;
};

template <typename T>
Rows<T> make_rows(std::mt19937& rng, int len, int hd) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int rows = len + 7;
  Rows<T> r;
  r.cache.resize(static_cast<size_t>(rows) * hd);
  for (auto& v : r.cache) {
    if constexpr (std::is_same_v<T, float>) v = nd(rng);
    else v = to_half(nd(rng));
  }
  std::vector<int64_t> order(static_cast<size_t>(rows));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  for (int j = 0; j < len; ++j) r.offsets.push_back(order[static_cast<size_t>(j)] * hd);
  return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

template <typename T>
void check_bit_identical() {
  if (!cpu_supports(CpuIsa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU: only the AVX2 kernels run here";
  const AttentionKernels<T>& narrow = attention_kernels_avx2<T>();
  const AttentionKernels<T>* wide = attention_kernels_avx512<T>();
  ASSERT_NE(wide, nullptr);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int lens[] = {1, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100, 129, 300};
  const int hds[] = {8, 24, 64, 80, 128, 256};
  for (int hd : hds) {
    for (int len : lens) {
      const Rows<T> k = make_rows<T>(rng, len, hd);
      const Rows<T> v = make_rows<T>(rng, len, hd);
      for (int heads : {1, 2, 3, 4, 7}) {
        std::vector<float> qs(static_cast<size_t>(heads) * hd);
        for (auto& x : qs) x = nd(rng);
        std::vector<float> a(static_cast<size_t>(heads) * len), b(a.size(), -1.0f);
        narrow.scores(qs.data(), heads, k.cache.data(), k.offsets.data(), len, hd, 0.1767767f, a.data());
        wide->scores(qs.data(), heads, k.cache.data(), k.offsets.data(), len, hd, 0.1767767f, b.data());
        ASSERT_TRUE(same_bits(a, b)) << "scores, hd " << hd << " len " << len << " heads " << heads;
      }
      std::vector<float> q(static_cast<size_t>(hd));
      for (auto& x : q) x = nd(rng);
      std::vector<float> s_narrow(static_cast<size_t>(len)), s_wide(static_cast<size_t>(len));
      narrow.scores(q.data(), 1, k.cache.data(), k.offsets.data(), len, hd, 0.1767767f, s_narrow.data());
      wide->scores(q.data(), 1, k.cache.data(), k.offsets.data(), len, hd, 0.1767767f, s_wide.data());

      // Shifted by their max as attention does, so some exponentials underflow toward 0.
      float mx = s_narrow[0];
      for (float x : s_narrow) mx = std::max(mx, x);
      const float sum_narrow = narrow.exp_sum(s_narrow.data(), len, mx);
      const float sum_wide = wide->exp_sum(s_wide.data(), len, mx);
      ASSERT_TRUE(same_bits(s_narrow, s_wide)) << "exp, len " << len;
      ASSERT_EQ(std::memcmp(&sum_narrow, &sum_wide, sizeof(float)), 0) << "exp sum, len " << len;

      if (hd % 16 != 0) continue;
      for (int group : {1, 2, 3, 4, 5, 8}) {
        std::vector<float> p(static_cast<size_t>(group) * len);
        for (auto& x : p) x = std::abs(nd(rng));
        std::vector<float> o_narrow(static_cast<size_t>(group) * hd), o_wide(o_narrow.size(), -1.0f);
        std::vector<float*> on(static_cast<size_t>(group)), ow(static_cast<size_t>(group));
        for (int g = 0; g < group; ++g) {
          on[static_cast<size_t>(g)] = o_narrow.data() + static_cast<size_t>(g) * hd;
          ow[static_cast<size_t>(g)] = o_wide.data() + static_cast<size_t>(g) * hd;
        }
        narrow.weighted_sum(v.cache.data(), v.offsets.data(), len, p.data(), group, hd, on.data());
        wide->weighted_sum(v.cache.data(), v.offsets.data(), len, p.data(), group, hd, ow.data());
        ASSERT_TRUE(same_bits(o_narrow, o_wide)) << "weighted sum, hd " << hd << " len " << len << " group " << group;
      }
    }
  }
}

// Two tokens' key ranges [r0, r1) within a union of len keys: the shapes neighbouring tokens
// take (equal, one key longer at either end, shifted by a key: a sliding window), nested ones,
// disjoint ones, and random ones.
std::vector<std::array<int32_t, 4>> pair_ranges(std::mt19937& rng, int32_t len) {
  std::vector<std::array<int32_t, 4>> rs{{0, len, 0, len}};
  if (len > 1) {
    rs.push_back({0, len - 1, 0, len});
    rs.push_back({0, len, 1, len});
    rs.push_back({1, len, 0, len - 1});
    rs.push_back({0, len - 1, 1, len});
    rs.push_back({0, len / 2, len / 2, len});
  }
  if (len > 20) rs.push_back({9, len - 3, 2, len});
  std::uniform_int_distribution<int32_t> pick(0, len - 1);
  for (int i = 0; i < 4; ++i) {
    std::array<int32_t, 4> r{};
    for (int t = 0; t < 2; ++t) {
      int32_t a = pick(rng), b = pick(rng);
      if (a > b) std::swap(a, b);
      r[2 * t] = a;
      r[2 * t + 1] = b + 1;
    }
    rs.push_back(r);
  }
  return rs;
}

template <typename T>
void check_pairs_equal_single_tokens() {
  const AttentionKernels<T>& narrow = attention_kernels_avx2<T>();
  std::vector<const AttentionKernels<T>*> sets{&narrow};
  if (cpu_supports(CpuIsa::kAvx512)) sets.push_back(attention_kernels_avx512<T>());
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int lens[] = {1, 2, 3, 7, 8, 9, 10, 17, 33, 64, 65, 100, 129, 300};
  for (int hd : {8, 24, 32, 64, 80, 128, 256}) {
    for (int len : lens) {
      const Rows<T> k = make_rows<T>(rng, len, hd);
      const Rows<T> v = make_rows<T>(rng, len, hd);
      for (const auto& r : pair_ranges(rng, len)) {
        const int32_t r0[2] = {r[0], r[2]}, r1[2] = {r[1], r[3]};
        const int32_t n[2] = {r[1] - r[0], r[3] - r[2]};
        for (int group = 1; group <= 7; ++group) {
          std::vector<float> qs[2], want[2], p[2], want_o[2];
          for (int t = 0; t < 2; ++t) {
            qs[t].resize(static_cast<size_t>(group) * hd);
            for (auto& x : qs[t]) x = nd(rng);
            want[t].resize(static_cast<size_t>(group) * n[t]);
            narrow.scores(qs[t].data(), group, k.cache.data(), k.offsets.data() + r0[t], n[t], hd, 0.125f,
                          want[t].data());
            p[t].resize(want[t].size());
            for (auto& x : p[t]) x = std::abs(nd(rng));
            want_o[t].resize(static_cast<size_t>(group) * hd);
            if (hd % 16 != 0) continue;
            std::vector<float*> o(static_cast<size_t>(group));
            for (int g = 0; g < group; ++g) o[static_cast<size_t>(g)] = want_o[t].data() + static_cast<size_t>(g) * hd;
            narrow.weighted_sum(v.cache.data(), v.offsets.data() + r0[t], n[t], p[t].data(), group, hd, o.data());
          }
          const float* q[2] = {qs[0].data(), qs[1].data()};
          const float* pp[2] = {p[0].data(), p[1].data()};
          for (const AttentionKernels<T>* set : sets) {
            const char* name = set == &narrow ? "avx2" : "avx512";
            std::vector<float> got[2];
            for (int t = 0; t < 2; ++t) got[t].assign(want[t].size(), -1.0f);
            float* out[2] = {got[0].data(), got[1].data()};
            set->scores_pair(q, group, k.cache.data(), k.offsets.data(), len, r0, r1, hd, 0.125f, out);
            for (int t = 0; t < 2; ++t) {
              ASSERT_TRUE(same_bits(want[t], got[t])) << name << " scores_pair token " << t << ", hd " << hd
                                                      << " len " << len << " ranges [" << r[0] << "," << r[1]
                                                      << ") [" << r[2] << "," << r[3] << ") group " << group;
            }
            if (hd % 16 != 0) continue;
            std::vector<float> got_o[2];
            std::vector<float*> o[2];
            for (int t = 0; t < 2; ++t) {
              got_o[t].assign(want_o[t].size(), -1.0f);
              for (int g = 0; g < group; ++g) o[t].push_back(got_o[t].data() + static_cast<size_t>(g) * hd);
            }
            float* const* oo[2] = {o[0].data(), o[1].data()};
            set->weighted_sum_pair(v.cache.data(), v.offsets.data(), r0, r1, pp, group, hd, oo);
            for (int t = 0; t < 2; ++t) {
              ASSERT_TRUE(same_bits(want_o[t], got_o[t]))
                  << name << " weighted_sum_pair token " << t << ", hd " << hd << " len " << len << " ranges ["
                  << r[0] << "," << r[1] << ") [" << r[2] << "," << r[3] << ") group " << group;
            }
          }
        }
      }
    }
  }
}

TEST(AttentionKernels, PairsEqualEachTokenAloneOnFloatRows) { check_pairs_equal_single_tokens<float>(); }
TEST(AttentionKernels, PairsEqualEachTokenAloneOnHalfRows) { check_pairs_equal_single_tokens<uint16_t>(); }

TEST(AttentionKernels, Avx512EqualsAvx2BitForBitOnFloatRows) { check_bit_identical<float>(); }
TEST(AttentionKernels, Avx512EqualsAvx2BitForBitOnHalfRows) { check_bit_identical<uint16_t>(); }

TEST(AttentionKernels, Fp8CachesKeepTheAvx2Set) {
  EXPECT_EQ(attention_kernels_avx512<E4m3Code>(), nullptr);
  EXPECT_EQ(attention_kernels_avx512<E5m2Code>(), nullptr);
  EXPECT_EQ(&attention_kernels<E4m3Code>(), &attention_kernels_avx2<E4m3Code>());
}

TEST(AttentionKernels, TheProcessRunsTheWidestSetItMay) {
  const bool wide = active_isa() != CpuIsa::kAvx2;
  EXPECT_EQ(&attention_kernels<float>() == attention_kernels_avx512<float>(), wide);
}

}  // namespace
}  // namespace kvasir::cpu
