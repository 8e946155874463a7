// The AVX-512 attention kernels equal the AVX2 ones bit for bit (attention_kernels.h): scores,
// exponentials with their sum, and weighted sums, over float32 and float16 cache rows scattered
// through a cache, for key counts on and off the vector widths, head sizes on and off the 64-wide
// path, and GQA groups of 1 to 8 query heads.
#include "backend/cpu/attention_kernels.h"

#include <gtest/gtest.h>

#include <immintrin.h>

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
