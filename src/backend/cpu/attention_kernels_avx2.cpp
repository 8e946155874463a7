// The AVX2 attention kernels (attention_kernels.h), and the choice of set per process.
#include <immintrin.h>

#include <cmath>

#include "backend/cpu/attention_kernels.h"
#include "backend/cpu/cache_row_vec.h"
#include "backend/cpu/fp8_cache_codes.h"
#include "backend/cpu/quant/cpu_isa.h"
#include "backend/cpu/vec_exp.h"

namespace kvasir::cpu {
namespace {

// Keys and values sit in scattered blocks of the paged cache, far past the hardware prefetcher's
// reach: fetch the row kPrefetchRows ahead while working on this one.
constexpr int kPrefetchRows = 8;

template <typename T>
void prefetch_row(const T* row, int hd) {
  const char* b = reinterpret_cast<const char*>(row);
  for (size_t off = 0; off < static_cast<size_t>(hd) * sizeof(T); off += 64) _mm_prefetch(b + off, _MM_HINT_T0);
}

// Eight keys at a time against one query head (dot8); a head at a time, the range's keys staying
// in L1 for the group's other heads.
template <typename T>
void head_scores(const float* q, const T* kc, const int64_t* offsets, int32_t len, int hd, float scale, bool prefetch,
                 float* out) {
  if (hd % 8 != 0) {
    for (int32_t j = 0; j < len; ++j) out[j] = dot(q, kc + offsets[j], hd) * scale;
    return;
  }
  const __m256 s = _mm256_set1_ps(scale);
  const T* keys[8];
  for (int32_t j = 0; j < len; j += 8) {
    const int n = len - j < 8 ? len - j : 8;
    for (int i = 0; i < 8; ++i) {
      if (prefetch && j + i + kPrefetchRows < len) prefetch_row(kc + offsets[j + i + kPrefetchRows], hd);
      keys[i] = kc + offsets[j + (i < n ? i : n - 1)];
    }
    const __m256 v = _mm256_mul_ps(dot8(q, keys, hd), s);
    if (n == 8) {
      _mm256_storeu_ps(out + j, v);
    } else {
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, v);
      for (int i = 0; i < n; ++i) out[j + i] = lanes[i];
    }
  }
}

template <typename T>
void scores(const float* q, int group, const T* kc, const int64_t* offsets, int32_t len, int hd, float scale,
            float* out) {
  for (int g = 0; g < group; ++g) {
    head_scores(q + static_cast<int64_t>(g) * hd, kc, offsets, len, hd, scale, g == 0, out + static_cast<int64_t>(g) * len);
  }
}

float exp_sum(float* sc, int32_t len, float mx) {
  const __m256 m = _mm256_set1_ps(mx);
  __m256 acc = _mm256_setzero_ps();
  int32_t j = 0;
  for (; j + 8 <= len; j += 8) {
    const __m256 v = exp8(_mm256_sub_ps(_mm256_loadu_ps(sc + j), m));
    _mm256_storeu_ps(sc + j, v);
    acc = _mm256_add_ps(acc, v);
  }
  float sum = hsum(acc);
  for (; j < len; ++j) {
    sc[j] = std::exp(sc[j] - mx);
    sum += sc[j];
  }
  return sum;
}

// o_g = sum_j p[g][j] * v_j for a block of G query heads. Each value row is loaded once per 16
// columns and the G outputs stay in registers across the keys.
// The loops over G are unrolled by hand (pragmas): GCC at -O2 otherwise keeps acc on the stack,
// and each FMA then waits on a store and a reload (measured: the attention's hottest lines).
template <int G, typename T>
void weighted_sum_block(const T* vc, const int64_t* offsets, int32_t len, const float* p, int hd, float* const* o) {
  for (int d = 0; d < hd; d += 16) {
    __m256 acc[G][2];
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) acc[g][0] = acc[g][1] = _mm256_setzero_ps();
    for (int32_t j = 0; j < len; ++j) {
      if (d == 0 && j + kPrefetchRows < len) prefetch_row(vc + offsets[j + kPrefetchRows], hd);
      const T* v = vc + offsets[j] + d;
      const __m256 v0 = load8(v), v1 = load8(v + 8);
#pragma GCC unroll 8
      for (int g = 0; g < G; ++g) {
        const __m256 w = _mm256_broadcast_ss(p + static_cast<size_t>(g) * len + j);
        acc[g][0] = _mm256_fmadd_ps(w, v0, acc[g][0]);
        acc[g][1] = _mm256_fmadd_ps(w, v1, acc[g][1]);
      }
    }
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      _mm256_storeu_ps(o[g] + d, acc[g][0]);
      _mm256_storeu_ps(o[g] + d + 8, acc[g][1]);
    }
  }
}

template <typename T>
void weighted_sum(const T* vc, const int64_t* offsets, int32_t len, const float* p, int group, int hd,
                  float* const* o) {
  for (int g0 = 0; g0 < group; g0 += 4) {
    const float* pg = p + static_cast<size_t>(g0) * len;
    switch (group - g0 < 4 ? group - g0 : 4) {
      case 1: weighted_sum_block<1, T>(vc, offsets, len, pg, hd, o + g0); break;
      case 2: weighted_sum_block<2, T>(vc, offsets, len, pg, hd, o + g0); break;
      case 3: weighted_sum_block<3, T>(vc, offsets, len, pg, hd, o + g0); break;
      default: weighted_sum_block<4, T>(vc, offsets, len, pg, hd, o + g0); break;
    }
  }
}

// The pair entry points as each token alone: the reference the AVX-512 set's joint passes match.
template <typename T>
void scores_pair(const float* const* q, int group, const T* kc, const int64_t* offsets, int32_t, const int32_t* r0,
                 const int32_t* r1, int hd, float scale, float* const* out) {
  for (int t = 0; t < 2; ++t) scores(q[t], group, kc, offsets + r0[t], r1[t] - r0[t], hd, scale, out[t]);
}

template <typename T>
void weighted_sum_pair(const T* vc, const int64_t* offsets, const int32_t* r0, const int32_t* r1,
                       const float* const* p, int group, int hd, float* const* const* o) {
  for (int t = 0; t < 2; ++t) weighted_sum(vc, offsets + r0[t], r1[t] - r0[t], p[t], group, hd, o[t]);
}

template <typename T>
constexpr AttentionKernels<T> kAvx2{scores<T>, exp_sum, weighted_sum<T>, scores_pair<T>, weighted_sum_pair<T>};

}  // namespace

template <typename T>
const AttentionKernels<T>& attention_kernels_avx2() {
  return kAvx2<T>;
}

template <typename T>
const AttentionKernels<T>& attention_kernels() {
  static const AttentionKernels<T>* chosen = [] {
    const AttentionKernels<T>* wide = active_isa() != CpuIsa::kAvx2 ? attention_kernels_avx512<T>() : nullptr;
    return wide != nullptr ? wide : &attention_kernels_avx2<T>();
  }();
  return *chosen;
}

#define KVASIR_ATTENTION_KERNELS(T)                                    \
  template const AttentionKernels<T>& attention_kernels_avx2<T>(); \
  template const AttentionKernels<T>& attention_kernels<T>();
KVASIR_ATTENTION_KERNELS(float)
KVASIR_ATTENTION_KERNELS(uint16_t)
KVASIR_ATTENTION_KERNELS(E4m3Code)
KVASIR_ATTENTION_KERNELS(E5m2Code)
#undef KVASIR_ATTENTION_KERNELS

}  // namespace kvasir::cpu
