#include "backend/cpu/quant/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/quant/dequantize.h"
#include "backend/cpu/quant/kernels.h"
#include "backend/cpu/quant/quant_test_util.h"
#include "quant/block_formats.h"
#include "quant/dequantize.h"

namespace kvasir::cpu {
namespace {

using quant::bits_from_f32;
using testing::block_size;
using testing::matmul_types;
using testing::random_floats;
using testing::random_weights;
using testing::runnable_isas;

struct Shape {
  int64_t m, k, n;
};

// Shapes per block size: odd m (partial row tiles), n = 1 (decode), 3 / 17 / 64 (prefill tiles
// with remainders), k from one block to 4096.
std::vector<Shape> shapes_for(DType t) {
  if (block_size(t) == 256) {
    return {{67, 256, 1}, {5, 4096, 3}, {17, 768, 17}, {33, 1536, 64}, {130, 512, 5}, {3, 256, 2}};
  }
  return {{67, 256, 1}, {5, 4096, 3}, {17, 576, 17}, {33, 1536, 64}, {130, 32, 5}, {3, 96, 2}, {9, 1000 / 8 * 8, 4}};
}

// Reference in double over the dequantized weights and the given activations.
template <typename X>
std::vector<double> reference(const std::vector<float>& wf, const std::vector<X>& x, const Shape& s,
                              std::vector<double>* abs_sum) {
  std::vector<double> y(static_cast<size_t>(s.n * s.m));
  abs_sum->assign(y.size(), 0.0);
  for (int64_t j = 0; j < s.n; ++j) {
    for (int64_t r = 0; r < s.m; ++r) {
      double acc = 0, mag = 0;
      for (int64_t i = 0; i < s.k; ++i) {
        const double p = static_cast<double>(wf[r * s.k + i]) * x[j * s.k + i];
        acc += p;
        mag += std::fabs(p);
      }
      y[j * s.m + r] = acc;
      (*abs_sum)[j * s.m + r] = mag;
    }
  }
  return y;
}

// x with each row replaced by what the quantized path sees: its quantized-then-dequantized values
// (kQ16: the sum of both planes, in double).
std::vector<double> fake_quantized(const std::vector<float>& x, const Shape& s, bool k_format, ActQuant mode) {
  std::vector<double> out(x.size());
  const size_t bytes = k_format ? ActKLayout::row_bytes(s.k) : Act32Layout::row_bytes(s.k);
  const int64_t block = k_format ? 256 : 32;
  const int planes = mode == ActQuant::kQ16 ? 2 : 1;
  std::vector<uint8_t> row(bytes * static_cast<size_t>(planes));
  for (int64_t j = 0; j < s.n; ++j) {
    const float* xr = x.data() + j * s.k;
    if (planes == 2) {
      if (k_format) {
        quantize_actk_planes_ref(xr, s.k, row.data());
      } else {
        quantize_act32_planes_ref(xr, s.k, row.data());
      }
    } else if (k_format) {
      quantize_actk_ref(xr, s.k, row.data());
    } else {
      quantize_act32_ref(xr, s.k, row.data());
    }
    for (int p = 0; p < planes; ++p) {
      const uint8_t* r = row.data() + static_cast<size_t>(p) * bytes;
      const auto* q = reinterpret_cast<const int8_t*>(r);
      const auto* d = reinterpret_cast<const float*>(r + s.k);
      const int64_t d_stride = k_format ? 1 : 2;  // Act32 interleaves (d, s)
      for (int64_t i = 0; i < s.k; ++i) {
        out[j * s.k + i] += static_cast<double>(d[i / block * d_stride]) * static_cast<double>(q[i]);
      }
    }
  }
  return out;
}

// x rounded to bf16 as the fast modes' BF16-weight tile sees it (quantize_act_bf16_ref).
std::vector<float> bf16_rounded(const std::vector<float>& x, const Shape& s) {
  std::vector<float> out(x.size());
  std::vector<uint8_t> row(ActBf16Layout::row_bytes(s.k));
  for (int64_t j = 0; j < s.n; ++j) {
    quantize_act_bf16_ref(x.data() + j * s.k, s.k, row.data());
    for (int64_t i = 0; i < s.k; ++i) {
      uint16_t h;
      std::memcpy(&h, row.data() + 2 * i, 2);
      out[j * s.k + i] = quant::bf16_to_f32(h);
    }
  }
  return out;
}

// True where matmul runs `t` with bf16 activations (vdpbf16ps).
bool bf16_activations(DType t, CpuIsa isa, ActQuant mode) {
  return t == DType::kBF16 && mode == ActQuant::kQ8 && isa != CpuIsa::kAvx2 && cpu_has_avx512_bf16();
}

bool has_int8_kernel(DType t) {
  return t == DType::kQ4_0 || t == DType::kQ4_1 || t == DType::kQ5_0 || t == DType::kQ5_1 || t == DType::kQ8_0 ||
         t == DType::kQ4_K || t == DType::kQ5_K || t == DType::kQ6_K;
}

class MatmulTest : public ::testing::TestWithParam<DType> {};

TEST_P(MatmulTest, MatchesF32ReferenceOnEveryIsaAndMode) {
  const DType t = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(t) * 7919u + 1);
  ThreadPool pool2(2), pool1(1);
  MatmulScratch scratch;
  for (const Shape& s : shapes_for(t)) {
    if (s.k % block_size(t) != 0) continue;
    ASSERT_TRUE(matmul_supported(t, s.k).ok());
    const std::vector<uint8_t> w = random_weights(t, s.m, s.k, rng);
    const std::vector<float> x = random_floats(static_cast<size_t>(s.n * s.k), rng);
    std::vector<float> wf(static_cast<size_t>(s.m * s.k));
    const size_t rb = *row_bytes(t, s.k);
    for (int64_t r = 0; r < s.m; ++r) quant::dequantize_row(t, w.data() + r * rb, wf.data() + r * s.k, s.k);
    std::vector<double> mag, mag_q8, mag_q16;
    const std::vector<double> ref = reference(wf, x, s, &mag);
    const bool int8 = has_int8_kernel(t);
    const bool k_format = block_size(t) == 256;
    const std::vector<double> ref_q8 =
        int8 ? reference(wf, fake_quantized(x, s, k_format, ActQuant::kQ8), s, &mag_q8) : ref;
    const std::vector<double> ref_q16 =
        int8 ? reference(wf, fake_quantized(x, s, k_format, ActQuant::kQ16), s, &mag_q16) : ref;
    if (!int8) mag_q8 = mag_q16 = mag;
    std::vector<double> mag_bf16;
    const std::vector<double> ref_bf16 =
        t == DType::kBF16 ? reference(wf, bf16_rounded(x, s), s, &mag_bf16) : std::vector<double>();

    for (CpuIsa isa : runnable_isas()) {
      for (ActQuant mode : {ActQuant::kF32, ActQuant::kQ8, ActQuant::kQ16}) {
        for (ThreadPool* pool : {&pool1, &pool2}) {
          const char* mode_name = mode == ActQuant::kQ8 ? " q8" : mode == ActQuant::kQ16 ? " q16" : " f32";
          const std::string what = std::string(dtype_name(t)) + " " + std::string(isa_name(isa)) + mode_name +
                                   " m=" + std::to_string(s.m) + " k=" + std::to_string(s.k) +
                                   " n=" + std::to_string(s.n) + " threads=" + std::to_string(pool->num_threads());
          std::vector<float> y(static_cast<size_t>(s.n * s.m), NAN);
          matmul(isa, w.data(), t, s.m, s.k, x.data(), s.n, y.data(), *pool, mode, scratch);
          const bool quant = mode != ActQuant::kF32 && int8;
          const bool bf16 = bf16_activations(t, isa, mode);
          const std::vector<double>& exact = bf16 ? ref_bf16 : !quant ? ref : mode == ActQuant::kQ8 ? ref_q8 : ref_q16;
          const std::vector<double>& bound = bf16 ? mag_bf16 : !quant ? mag : mode == ActQuant::kQ8 ? mag_q8 : mag_q16;
          double err2 = 0, ref2 = 0;
          for (size_t i = 0; i < y.size(); ++i) {
            // Per element: only summation order (and, for q8, the int8 rounding already in
            // `exact`) may differ.
            ASSERT_NEAR(y[i], exact[i], 1e-5 * bound[i] + 1e-30) << what << " at " << i;
            err2 += (y[i] - ref[i]) * (y[i] - ref[i]);
            ref2 += ref[i] * ref[i];
          }
          // Against the true f32 product, int8 activations cost ~0.4% (rms); allow 1%, or 3% when
          // there are too few outputs for the rms to settle. 16-bit activations: ~256x less.
          const double q8_bound = y.size() >= 64 ? 1e-2 : 3e-2;
          // bf16 activations: 2^-9 relative per value at most, ~1e-3 rms in the product.
          const double bound_rel = bf16 ? 5e-3 : !quant ? 1e-5 : mode == ActQuant::kQ8 ? q8_bound : q8_bound / 128;
          EXPECT_LT(std::sqrt(err2 / ref2), bound_rel) << what;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, MatmulTest, ::testing::ValuesIn(matmul_types()),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(dtype_name(info.param));
                         });

// A row's result must not depend on the batch it is computed in (nor on the thread count):
// requests produce the same tokens alone or batched.
TEST_P(MatmulTest, RowResultsAreBatchInvariant) {
  const DType t = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(t) + 99);
  const int64_t m = 37, k = block_size(t) == 256 ? 512 : 576, n = 21;  // n >= 16: AMX batches too
  const std::vector<uint8_t> w = random_weights(t, m, k, rng);
  const std::vector<float> x = random_floats(static_cast<size_t>(n * k), rng);
  ThreadPool pool1(1), pool2(2);
  MatmulScratch scratch;
  for (CpuIsa isa : runnable_isas()) {
    for (ActQuant mode : {ActQuant::kF32, ActQuant::kQ8, ActQuant::kQ16}) {
      std::vector<float> batch(static_cast<size_t>(n * m));
      matmul(isa, w.data(), t, m, k, x.data(), n, batch.data(), pool2, mode, scratch);
      for (int64_t j = 0; j < n; ++j) {
        std::vector<float> one(static_cast<size_t>(m));
        matmul(isa, w.data(), t, m, k, x.data() + j * k, 1, one.data(), j % 2 ? pool1 : pool2, mode, scratch);
        for (int64_t r = 0; r < m; ++r) {
          ASSERT_EQ(bits_from_f32(one[r]), bits_from_f32(batch[j * m + r]))
              << dtype_name(t) << " " << isa_name(isa) << " mode=" << static_cast<int>(mode) << " row " << j
              << " out " << r;
        }
      }
    }
  }
}

// matmul_grouped runs many products in one region; each must equal its own matmul call bit for
// bit (MoE experts of a layer rely on it for batch invariance), including empty problems and
// problems large enough for the AMX tiles.
TEST_P(MatmulTest, GroupedEqualsOneCallPerProblem) {
  const DType t = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(t) + 7);
  const int64_t k = block_size(t) == 256 ? 512 : 96;
  const int64_t ms[] = {5, 37, 1, 12, 64, 9};
  const int64_t ns[] = {1, 0, 3, 17, 2, 40};
  std::vector<std::vector<uint8_t>> ws;
  std::vector<std::vector<float>> xs;
  for (int i = 0; i < 6; ++i) {
    ws.push_back(random_weights(t, ms[i], k, rng));
    xs.push_back(random_floats(static_cast<size_t>(ns[i] * k), rng));
  }
  ThreadPool pool1(1), pool3(3);
  MatmulScratch scratch;
  for (CpuIsa isa : runnable_isas()) {
    for (ActQuant mode : {ActQuant::kF32, ActQuant::kQ16}) {
      for (ThreadPool* pool : {&pool1, &pool3}) {
        std::vector<std::vector<float>> grouped(6), single(6);
        MatmulProblem problems[6];
        for (int i = 0; i < 6; ++i) {
          grouped[i].assign(static_cast<size_t>(ns[i] * ms[i]), -1.0f);
          single[i].assign(grouped[i].size(), -2.0f);
          problems[i] = {ws[i].data(), ms[i], xs[i].data(), ns[i], grouped[i].data()};
          matmul(isa, ws[i].data(), t, ms[i], k, xs[i].data(), ns[i], single[i].data(), *pool, mode, scratch);
        }
        matmul_grouped(isa, problems, 6, t, k, *pool, mode, scratch);
        for (int i = 0; i < 6; ++i) {
          for (size_t j = 0; j < grouped[i].size(); ++j) {
            ASSERT_EQ(bits_from_f32(grouped[i][j]), bits_from_f32(single[i][j]))
                << dtype_name(t) << " " << isa_name(isa) << " mode=" << static_cast<int>(mode) << " problem " << i
                << " element " << j;
          }
        }
      }
    }
  }
}

// Problems reading the same rows as the one before them (a layer's q / k / v, gate / up) share
// one quantization of those rows; every output still equals its own matmul call, also when a
// problem with other rows sits between two sharing runs and at batch sizes that take AMX tiles.
TEST_P(MatmulTest, GroupedProblemsSharingRowsEqualOneCallPerProblem) {
  const DType t = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(t) + 11);
  const int64_t k = block_size(t) == 256 ? 512 : 96;
  const int64_t ms[] = {40, 13, 13, 7, 33, 33};
  for (int64_t n : {int64_t{1}, int64_t{5}, int64_t{48}}) {
    const std::vector<float> a = random_floats(static_cast<size_t>(n * k), rng);
    const std::vector<float> b = random_floats(static_cast<size_t>(n * k), rng);
    const float* xs[] = {a.data(), a.data(), a.data(), b.data(), a.data(), a.data()};
    std::vector<std::vector<uint8_t>> ws;
    for (int64_t m : ms) ws.push_back(random_weights(t, m, k, rng));
    ThreadPool pool(3);
    MatmulScratch scratch;
    for (CpuIsa isa : runnable_isas()) {
      for (ActQuant mode : {ActQuant::kF32, ActQuant::kQ8, ActQuant::kQ16}) {
        std::vector<std::vector<float>> grouped(6), single(6);
        MatmulProblem problems[6];
        for (int i = 0; i < 6; ++i) {
          grouped[i].assign(static_cast<size_t>(n * ms[i]), -1.0f);
          single[i].assign(grouped[i].size(), -2.0f);
          problems[i] = {ws[i].data(), ms[i], xs[i], n, grouped[i].data()};
          matmul(isa, ws[i].data(), t, ms[i], k, xs[i], n, single[i].data(), pool, mode, scratch);
        }
        matmul_grouped(isa, problems, 6, t, k, pool, mode, scratch);
        for (int i = 0; i < 6; ++i) {
          for (size_t j = 0; j < grouped[i].size(); ++j) {
            ASSERT_EQ(bits_from_f32(grouped[i][j]), bits_from_f32(single[i][j]))
                << dtype_name(t) << " " << isa_name(isa) << " mode=" << static_cast<int>(mode) << " n=" << n
                << " problem " << i << " element " << j;
          }
        }
      }
    }
  }
}

// The AMX tiles (large batches) must give the AVX-512 kernels' bits: a row's result may not
// depend on the batch size that picked the kernel. Random shapes around the tile edges.
TEST(Matmul, AmxMatchesAvx512Bitwise) {
  if (!cpu_supports(CpuIsa::kAmx)) GTEST_SKIP() << "no usable AMX-INT8 on this machine (cpuid or OS permission)";
  std::mt19937 rng(2024);
  ThreadPool pool1(1), pool2(2);
  MatmulScratch scratch;
  const int64_t ks[] = {32, 64, 96, 128, 160, 576, 1536};
  int cases = 0;
  for (DType t : {DType::kQ4_1, DType::kQ8_0, DType::kQ4_0}) {
    for (int it = 0; it < 14; ++it) {
      const int64_t k = ks[it % 7];
      const int64_t m = 1 + static_cast<int64_t>(rng() % 70);
      const int64_t fixed_n[] = {16, 17, 300, 31, 1, 48};
      const int64_t n = it < 6 ? fixed_n[it] : 1 + static_cast<int64_t>(rng() % 300);
      const std::vector<uint8_t> w = random_weights(t, m, k, rng);
      std::vector<float> x = random_floats(static_cast<size_t>(n * k), rng);
      // Some rows with large and tiny magnitudes, so block scales vary widely.
      for (int64_t i = 0; i < k && n > 2; ++i) {
        x[static_cast<size_t>(k + i)] *= 1000.0f;
        x[static_cast<size_t>(2 * k + i)] *= 1e-3f;
      }
      for (ActQuant mode : {ActQuant::kQ8, ActQuant::kQ16}) {
        std::vector<float> ya(static_cast<size_t>(n * m)), yb(static_cast<size_t>(n * m));
        matmul(CpuIsa::kAmx, w.data(), t, m, k, x.data(), n, ya.data(), it % 2 ? pool1 : pool2, mode, scratch);
        matmul(CpuIsa::kAvx512, w.data(), t, m, k, x.data(), n, yb.data(), pool2, mode, scratch);
        for (size_t i = 0; i < ya.size(); ++i) {
          ASSERT_EQ(bits_from_f32(ya[i]), bits_from_f32(yb[i]))
              << dtype_name(t) << " m=" << m << " k=" << k << " n=" << n << " mode=" << static_cast<int>(mode)
              << " row " << i / m << " out " << i % m << ": " << ya[i] << " vs " << yb[i];
        }
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, 84);
}

TEST(Matmul, RejectsBadShapesAndTypes) {
  EXPECT_FALSE(matmul_supported(DType::kQ4_0, 48).ok());
  EXPECT_FALSE(matmul_supported(DType::kQ4_K, 640).ok());
  EXPECT_FALSE(matmul_supported(DType::kI32, 64).ok());
  EXPECT_FALSE(matmul_supported(DType::kF16, 0).ok());
  EXPECT_TRUE(matmul_supported(DType::kF16, 7).ok());
}

TEST(Matmul, ScratchDoesNotGrowAfterWarmUp) {
  std::mt19937 rng(5);
  ThreadPool pool(2);
  MatmulScratch scratch;
  const int64_t m = 40, k = 512, n = 8;
  const std::vector<uint8_t> w = random_weights(DType::kQ4_1, m, k, rng);
  const std::vector<float> x = random_floats(static_cast<size_t>(n * k), rng);
  std::vector<float> y(static_cast<size_t>(n * m));
  scratch.reserve(matmul_scratch_bytes(DType::kQ4_1, k, n, pool.num_threads(), ActQuant::kQ8));
  const size_t cap = scratch.capacity();
  for (int64_t nn : {int64_t{8}, int64_t{1}, int64_t{5}}) {
    matmul(w.data(), DType::kQ4_1, m, k, x.data(), nn, y.data(), pool, ActQuant::kQ8, scratch);
    EXPECT_EQ(scratch.capacity(), cap);
  }
}

}  // namespace
}  // namespace kvasir::cpu
