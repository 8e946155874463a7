// The AVX-512 attention kernels (attention_kernels.h) for float32 and float16 caches: the AVX2
// set's arithmetic, lane for lane, in registers twice as wide.
// - scores: two query heads per register (head g in the low eight lanes, g + 1 in the high
//   eight), each key chunk broadcast to both halves, so each half runs dot8's FMA chain; the
//   shuffle tree is dot8's hadd/permute tree done within each half, so every score is dot8's to
//   the bit. (Two keys per register instead needs an insert per FMA and ran no faster than AVX2.)
// - exp_sum: 16 exponentials per instruction (exp8's polynomial, op for op), summed into eight
//   lanes in key order as the AVX2 loop does.
// - weighted_sum: each output lane is the same FMA chain over the keys; 64 columns of up to four
//   heads stay in registers, so a value row is read once per key instead of once per 16 columns.
// - scores_pair: both tokens' heads two per register (a group of three: six heads, three full
//   registers), each key chunk loaded once for all of them; each lane dot8's chain and tree.
// - weighted_sum_pair: up to three heads of each token per pass, a shared value row read once
//   for both; each token's chains run over its own keys only (the edges in their own loops).
// Built with AVX-512 flags and called only after the run-time check (attention_kernels()); like
// the quant kernels it uses no standard-library inline functions, which would carry these flags
// into other files' calls (the tails call the AVX2 set).
#include <immintrin.h>

#include "backend/cpu/attention_kernels.h"
#include "backend/cpu/vec_exp.h"  // exp_poly's constants only: exp8 is not called here

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace kvasir::cpu {
namespace {

#define KVASIR_INLINE inline __attribute__((always_inline))

constexpr int kPrefetchRows = 8;

template <typename T>
KVASIR_INLINE void prefetch_row(const T* row, int hd) {
  const char* b = reinterpret_cast<const char*>(row);
  for (long off = 0; off < static_cast<long>(hd) * static_cast<long>(sizeof(T)); off += 64) {
    _mm_prefetch(b + off, _MM_HINT_T0);
  }
}

// 16 values of a cache row widened to float32 (exactly, as the AVX2 loads do).
KVASIR_INLINE __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
KVASIR_INLINE __m512 load16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
// Eight values of row a in the low half, eight of row b in the high half.
KVASIR_INLINE __m512 load8_pair(const float* a, const float* b) {
  return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(a)), _mm256_loadu_ps(b), 1);
}
KVASIR_INLINE __m512 load8_pair(const uint16_t* a, const uint16_t* b) {
  const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a));
  const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b));
  return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1));
}

// The same eight values of a row in both halves.
KVASIR_INLINE __m512 load8_both(const float* p) { return _mm512_broadcast_f32x8(_mm256_loadu_ps(p)); }
KVASIR_INLINE __m512 load8_both(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

// _mm256_hadd_ps(a, b) in each 256-bit half: [a0+a1, a2+a3, b0+b1, b2+b3] per 128-bit lane.
KVASIR_INLINE __m512 hadd_halves(__m512 a, __m512 b) {
  return _mm512_add_ps(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
}

// dot8's hadd/permute tree within each 256-bit half of acc[0..7], times scale: in each half,
// lane i is key i's score for that half's head.
KVASIR_INLINE __m512 reduce8_halves(const __m512* acc, __m512 scale) {
  const __m512 h0123 = hadd_halves(hadd_halves(acc[0], acc[1]), hadd_halves(acc[2], acc[3]));
  const __m512 h4567 = hadd_halves(hadd_halves(acc[4], acc[5]), hadd_halves(acc[6], acc[7]));
  // dot8's permute2f128 pair per half: x = [h0123.L0, h4567.L0 | h0123.L2, h4567.L2], y the odd
  // 128-bit lanes likewise.
  const __m512 even = _mm512_shuffle_f32x4(h0123, h4567, _MM_SHUFFLE(2, 0, 2, 0));
  const __m512 odd = _mm512_shuffle_f32x4(h0123, h4567, _MM_SHUFFLE(3, 1, 3, 1));
  const __m512 x = _mm512_shuffle_f32x4(even, even, _MM_SHUFFLE(3, 1, 2, 0));
  const __m512 y = _mm512_shuffle_f32x4(odd, odd, _MM_SHUFFLE(3, 1, 2, 0));
  return _mm512_mul_ps(_mm512_add_ps(x, y), scale);
}

// Scores of two heads (q0 in the low eight lanes, q1 in the high eight) and, with kSingle, of a
// third (q2, in eight-lane registers) for keys j .. j + 7 (the last n < 8 repeated past the
// range's end). Each key chunk is loaded once, broadcast to both halves, and feeds every head's
// FMA: each head runs dot8's FMA chain and dot8's shuffle tree, so its scores are dot8's.
// HD: the head size when the queries fit in registers (64, 128), else 0.
template <int HD, bool kSingle, typename T>
KVASIR_INLINE void heads_scores8(const float* q0, const float* q1, const float* q2, const T* kc,
                                 const int64_t* offsets, int32_t j, int n, int hd, __m512 scale, float* out0,
                                 float* out1, float* out2) {
  __m512 acc[8];
  __m256 acc2[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    acc[i] = _mm512_setzero_ps();
    if (kSingle) acc2[i] = _mm256_setzero_ps();
  }
  if (HD > 0) {
    __m512 qv[HD > 0 ? HD / 8 : 1];
#pragma GCC unroll 16
    for (int c = 0; c < HD / 8; ++c) qv[c] = load8_pair(q0 + 8 * c, q1 + 8 * c);
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
      const T* key = kc + offsets[j + (i < n ? i : n - 1)];
#pragma GCC unroll 16
      for (int c = 0; c < HD / 8; ++c) {
        const __m512 k = load8_both(key + 8 * c);
        acc[i] = _mm512_fmadd_ps(qv[c], k, acc[i]);
        if (kSingle) acc2[i] = _mm256_fmadd_ps(_mm256_loadu_ps(q2 + 8 * c), _mm512_castps512_ps256(k), acc2[i]);
      }
    }
  } else {
    const T* keys[8];
    for (int i = 0; i < 8; ++i) keys[i] = kc + offsets[j + (i < n ? i : n - 1)];
    for (int d = 0; d < hd; d += 8) {
      const __m512 qv = load8_pair(q0 + d, q1 + d);
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) {
        const __m512 k = load8_both(keys[i] + d);
        acc[i] = _mm512_fmadd_ps(qv, k, acc[i]);
        if (kSingle) acc2[i] = _mm256_fmadd_ps(_mm256_loadu_ps(q2 + d), _mm512_castps512_ps256(k), acc2[i]);
      }
    }
  }
  const __mmask8 keep = static_cast<__mmask8>((1u << n) - 1u);
  const __m512 v = reduce8_halves(acc, scale);
  _mm256_mask_storeu_ps(out0 + j, keep, _mm512_castps512_ps256(v));
  _mm256_mask_storeu_ps(out1 + j, keep, _mm512_extractf32x8_ps(v, 1));
  if (kSingle) {
    // The single head's eight accumulators in the low halves; the high halves are discarded.
    __m512 lo[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) lo[i] = _mm512_castps256_ps512(acc2[i]);
    _mm256_mask_storeu_ps(out2 + j, keep, _mm512_castps512_ps256(reduce8_halves(lo, scale)));
  }
}

template <int HD, bool kSingle, typename T>
void heads_scores(const float* q0, const float* q1, const float* q2, const T* kc, const int64_t* offsets, int32_t len,
                  int hd, float scale, bool prefetch, float* out0, float* out1, float* out2) {
  const __m512 s = _mm512_set1_ps(scale);
  for (int32_t j = 0; j < len; j += 8) {
    if (prefetch) {
      for (int i = 0; i < 8; ++i) {
        if (j + i + kPrefetchRows < len) prefetch_row(kc + offsets[j + i + kPrefetchRows], hd);
      }
    }
    heads_scores8<HD, kSingle>(q0, q1, q2, kc, offsets, j, len - j < 8 ? len - j : 8, hd, s, out0, out1, out2);
  }
}

// Heads in pairs, the last three together when the count is odd (one pass over the keys for a
// group of 3); a group of one through the AVX2 set (the same order, one head per register).
template <int HD, typename T>
void scores_hd(const float* q, int group, const T* kc, const int64_t* offsets, int32_t len, int hd, float scale,
               float* out) {
  if (group == 1) {
    attention_kernels_avx2<T>().scores(q, 1, kc, offsets, len, hd, scale, out);
    return;
  }
  auto qh = [&](int g) { return q + static_cast<long>(g) * hd; };
  auto oh = [&](int g) { return out + static_cast<long>(g) * len; };
  int g = 0;
  for (; group - g >= 2 && group - g != 3; g += 2) {
    heads_scores<HD, false>(qh(g), qh(g + 1), nullptr, kc, offsets, len, hd, scale, g == 0, oh(g), oh(g + 1), nullptr);
  }
  if (group - g == 3) {
    heads_scores<HD, true>(qh(g), qh(g + 1), qh(g + 2), kc, offsets, len, hd, scale, g == 0, oh(g), oh(g + 1),
                           oh(g + 2));
  }
}

template <typename T>
void scores(const float* q, int group, const T* kc, const int64_t* offsets, int32_t len, int hd, float scale,
            float* out) {
  if (hd % 8 != 0) {
    attention_kernels_avx2<T>().scores(q, group, kc, offsets, len, hd, scale, out);
  } else if (hd == 64) {
    scores_hd<64>(q, group, kc, offsets, len, hd, scale, out);
  } else if (hd == 128) {
    scores_hd<128>(q, group, kc, offsets, len, hd, scale, out);
  } else {
    scores_hd<0>(q, group, kc, offsets, len, hd, scale, out);
  }
}

// scores_pair: the two tokens' 2 * group heads in registers of two (head 2m in the low half, 2m + 1
// in the high, heads counted token by token), up to three registers per pass over the union of
// the ranges: for a group of 3 both tokens' six heads fill three full registers, where one token
// alone fills one and a half. Each lane's key chunk runs dot8's FMA chain and shuffle tree as in
// heads_scores8, and a head keeps the scores of its own token's keys (masked stores).
struct HeadPair {
  const float* q[2];  // the low and the high half's query head
  float* out[2];      // their score rows (key u of the union at out[h][u - r0 of its token])
  int token[2];
};

// The lanes of the chunk of n keys at j whose key lies in [r0, r1).
KVASIR_INLINE __mmask8 range_mask(int32_t j, int n, int32_t r0, int32_t r1) {
  const int32_t a = r0 - j > 0 ? r0 - j : 0, b = r1 - j < n ? r1 - j : n;
  return b <= a ? __mmask8{0} : static_cast<__mmask8>(((1u << b) - 1u) & ~((1u << a) - 1u));
}

// out + i as an address only: masked stores there touch only in-range lanes, so the address may
// lie before out's row (a chunk that starts before the token's range).
KVASIR_INLINE float* shifted(float* out, int32_t i) {
  return reinterpret_cast<float*>(reinterpret_cast<char*>(out) + static_cast<long>(i) * static_cast<long>(sizeof(float)));
}

// K registers of head pairs over keys u < len. Chunks outer, keys inner: a chunk of each of the
// eight keys is loaded once for all K registers, and the K query chunks stay in registers.
// HD: the head size when known at compile time, else 0 (hd <= kMaxPairHd).
constexpr int kMaxPairHd = 256;
template <int HD, int K, typename T>
void pairs_scores(const HeadPair* hp, const T* kc, const int64_t* offsets, int32_t len, const int32_t* r0,
                  const int32_t* r1, int hd, float scale, bool prefetch) {
  const __m512 s = _mm512_set1_ps(scale);
  const int nc = HD > 0 ? HD / 8 : hd / 8;
  __m512 qv[K][HD > 0 ? HD / 8 : kMaxPairHd / 8];
#pragma GCC unroll 4
  for (int k = 0; k < K; ++k) {
    for (int c = 0; c < nc; ++c) qv[k][c] = load8_pair(hp[k].q[0] + 8 * c, hp[k].q[1] + 8 * c);
  }
  for (int32_t j = 0; j < len; j += 8) {
    if (prefetch) {
      for (int i = 0; i < 8; ++i) {
        if (j + i + kPrefetchRows < len) prefetch_row(kc + offsets[j + i + kPrefetchRows], HD > 0 ? HD : hd);
      }
    }
    const int n = len - j < 8 ? len - j : 8;
    const T* keys[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) keys[i] = kc + offsets[j + (i < n ? i : n - 1)];
    __m512 acc[K][8];
#pragma GCC unroll 4
    for (int k = 0; k < K; ++k) {
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) acc[k][i] = _mm512_setzero_ps();
    }
    // Not unrolled: unrolled, GCC copied the query chunks between stack slots and ran no faster.
#pragma GCC unroll 1
    for (int c = 0; c < nc; ++c) {
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) {
        const __m512 kv = load8_both(keys[i] + 8 * c);
#pragma GCC unroll 4
        for (int k = 0; k < K; ++k) acc[k][i] = _mm512_fmadd_ps(qv[k][c], kv, acc[k][i]);
      }
    }
    const __mmask8 keep[2] = {range_mask(j, n, r0[0], r1[0]), range_mask(j, n, r0[1], r1[1])};
#pragma GCC unroll 4
    for (int k = 0; k < K; ++k) {
      const __m512 v = reduce8_halves(acc[k], s);
      const int t0 = hp[k].token[0], t1 = hp[k].token[1];
      _mm256_mask_storeu_ps(shifted(hp[k].out[0], j - r0[t0]), keep[t0], _mm512_castps512_ps256(v));
      _mm256_mask_storeu_ps(shifted(hp[k].out[1], j - r0[t1]), keep[t1], _mm512_extractf32x8_ps(v, 1));
    }
  }
}

template <typename T>
void scores_pair(const float* const* q, int group, const T* kc, const int64_t* offsets, int32_t len, const int32_t* r0,
                 const int32_t* r1, int hd, float scale, float* const* out) {
  if (hd % 8 != 0 || hd > kMaxPairHd) {
    for (int t = 0; t < 2; ++t) scores(q[t], group, kc, offsets + r0[t], r1[t] - r0[t], hd, scale, out[t]);
    return;
  }
  // Head h of the pair's 2 * group: token h / group's head h % group.
  auto head = [&](int h, int half, HeadPair& hp) {
    const int t = h / group, g = h % group;
    hp.q[half] = q[t] + static_cast<long>(g) * hd;
    hp.out[half] = out[t] + static_cast<long>(g) * (r1[t] - r0[t]);
    hp.token[half] = t;
  };
  for (int m0 = 0; m0 < group; m0 += 3) {
    const int k = group - m0 < 3 ? group - m0 : 3;
    HeadPair hp[3];
    for (int i = 0; i < k; ++i) {
      head(2 * (m0 + i), 0, hp[i]);
      head(2 * (m0 + i) + 1, 1, hp[i]);
    }
    const bool pf = m0 == 0;
#define KVASIR_PAIRS(HD)                                                                                   \
  switch (k) {                                                                                             \
    case 1: pairs_scores<HD, 1>(hp, kc, offsets, len, r0, r1, hd, scale, pf); break;                       \
    case 2: pairs_scores<HD, 2>(hp, kc, offsets, len, r0, r1, hd, scale, pf); break;                       \
    default: pairs_scores<HD, 3>(hp, kc, offsets, len, r0, r1, hd, scale, pf); break;                      \
  }
    if (hd == 64) {
      KVASIR_PAIRS(64)
    } else if (hd == 128) {
      KVASIR_PAIRS(128)
    } else {
      KVASIR_PAIRS(0)
    }
#undef KVASIR_PAIRS
  }
}

// exp8 (vec_exp.h) on 16 lanes, op for op, with its constants.
KVASIR_INLINE __m512 exp16(__m512 x) {
  using namespace exp_poly;
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(kMin)), _mm512_set1_ps(kMax));
  const __m512 n =
      _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Hi), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Lo), r);
  __m512 p = _mm512_set1_ps(kC5);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC4));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC3));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC2));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC1));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC0));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

// cache_row_vec.h's hsum.
KVASIR_INLINE float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

float exp_sum(float* sc, int32_t len, float mx) {
  const __m512 m = _mm512_set1_ps(mx);
  __m256 acc = _mm256_setzero_ps();
  int32_t j = 0;
  for (; j + 16 <= len; j += 16) {
    const __m512 v = exp16(_mm512_sub_ps(_mm512_loadu_ps(sc + j), m));
    _mm512_storeu_ps(sc + j, v);
    acc = _mm256_add_ps(acc, _mm512_castps512_ps256(v));
    acc = _mm256_add_ps(acc, _mm512_extractf32x8_ps(v, 1));
  }
  if (j + 8 <= len) {
    const __m512 v = exp16(_mm512_sub_ps(_mm512_castps256_ps512(_mm256_loadu_ps(sc + j)), m));
    _mm256_storeu_ps(sc + j, _mm512_castps512_ps256(v));
    acc = _mm256_add_ps(acc, _mm512_castps512_ps256(v));
    j += 8;
  }
  float sum = hsum8(acc);
  for (; j < len; ++j) {
    sc[j] = __builtin_expf(sc[j] - mx);
    sum += sc[j];
  }
  return sum;
}

// o_g[d0 .. d0 + 16 NV) for G heads per pass over the keys.
template <int G, int NV, typename T>
void weighted_sum_block(const T* vc, const int64_t* offsets, int32_t len, const float* p, int hd, float* const* o) {
  for (int d0 = 0; d0 < hd; d0 += 16 * NV) {
    __m512 acc[G][NV];
#pragma GCC unroll 16
    for (int g = 0; g < G; ++g) {
#pragma GCC unroll 4
      for (int k = 0; k < NV; ++k) acc[g][k] = _mm512_setzero_ps();
    }
    for (int32_t j = 0; j < len; ++j) {
      if (d0 == 0 && j + kPrefetchRows < len) prefetch_row(vc + offsets[j + kPrefetchRows], hd);
      const T* v = vc + offsets[j] + d0;
      __m512 vv[NV];
#pragma GCC unroll 4
      for (int k = 0; k < NV; ++k) vv[k] = load16(v + 16 * k);
#pragma GCC unroll 16
      for (int g = 0; g < G; ++g) {
        const __m512 w = _mm512_set1_ps(p[static_cast<long>(g) * len + j]);
#pragma GCC unroll 4
        for (int k = 0; k < NV; ++k) acc[g][k] = _mm512_fmadd_ps(w, vv[k], acc[g][k]);
      }
    }
#pragma GCC unroll 16
    for (int g = 0; g < G; ++g) {
#pragma GCC unroll 4
      for (int k = 0; k < NV; ++k) _mm512_storeu_ps(o[g] + d0 + 16 * k, acc[g][k]);
    }
  }
}

template <int NV, typename T>
void weighted_sum_heads(const T* vc, const int64_t* offsets, int32_t len, const float* p, int group, int hd,
                        float* const* o) {
  for (int g0 = 0; g0 < group; g0 += 4) {
    const float* pg = p + static_cast<long>(g0) * len;
    switch (group - g0 < 4 ? group - g0 : 4) {
      case 1: weighted_sum_block<1, NV, T>(vc, offsets, len, pg, hd, o + g0); break;
      case 2: weighted_sum_block<2, NV, T>(vc, offsets, len, pg, hd, o + g0); break;
      case 3: weighted_sum_block<3, NV, T>(vc, offsets, len, pg, hd, o + g0); break;
      default: weighted_sum_block<4, NV, T>(vc, offsets, len, pg, hd, o + g0); break;
    }
  }
}

template <typename T>
void weighted_sum(const T* vc, const int64_t* offsets, int32_t len, const float* p, int group, int hd,
                  float* const* o) {
  if (hd % 64 == 0) {
    weighted_sum_heads<4, T>(vc, offsets, len, p, group, hd, o);
  } else {
    weighted_sum_heads<1, T>(vc, offsets, len, p, group, hd, o);
  }
}

// weighted_sum_pair: G heads of each token per pass over the union, in three spans: the keys of
// only the token whose range starts first, the shared keys (each value row read once for both
// tokens' 2G heads), the keys of only the token whose range ends last. Each output lane's FMA
// chain thus runs over its own token's keys alone, in key order, as weighted_sum_block's does.
template <int G, int NV, bool kFirst, bool kSecond, typename T>
KVASIR_INLINE void pair_span(__m512 (&acc)[2][G][NV], const T* vc, const int64_t* offsets, int32_t u0, int32_t u1,
                             int32_t len, const float* const* p, const int32_t* r0, const int32_t* lens, int d0,
                             int hd) {
  for (int32_t u = u0; u < u1; ++u) {
    if (d0 == 0 && u + kPrefetchRows < len) prefetch_row(vc + offsets[u + kPrefetchRows], hd);
    const T* v = vc + offsets[u] + d0;
    __m512 vv[NV];
#pragma GCC unroll 4
    for (int k = 0; k < NV; ++k) vv[k] = load16(v + 16 * k);
#pragma GCC unroll 2
    for (int t = 0; t < 2; ++t) {
      if (t == 0 ? !kFirst : !kSecond) continue;
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) {
        const __m512 w = _mm512_set1_ps(p[t][static_cast<long>(g) * lens[t] + (u - r0[t])]);
#pragma GCC unroll 4
        for (int k = 0; k < NV; ++k) acc[t][g][k] = _mm512_fmadd_ps(w, vv[k], acc[t][g][k]);
      }
    }
  }
}

// o[t][g][d0 .. d0 + 16 NV) for G heads of both tokens; their ranges overlap.
template <int G, int NV, typename T>
void weighted_sum_pair_block(const T* vc, const int64_t* offsets, const int32_t* r0, const int32_t* r1,
                             const float* const* p, int hd, float* const* const* o) {
  const int32_t lens[2] = {r1[0] - r0[0], r1[1] - r0[1]};
  const int32_t s0 = r0[0] > r0[1] ? r0[0] : r0[1], s1 = r1[0] < r1[1] ? r1[0] : r1[1];
  const int32_t len = r1[0] > r1[1] ? r1[0] : r1[1];
  for (int d0 = 0; d0 < hd; d0 += 16 * NV) {
    __m512 acc[2][G][NV];
#pragma GCC unroll 2
    for (int t = 0; t < 2; ++t) {
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) {
#pragma GCC unroll 4
        for (int k = 0; k < NV; ++k) acc[t][g][k] = _mm512_setzero_ps();
      }
    }
    if (r0[0] < r0[1]) pair_span<G, NV, true, false>(acc, vc, offsets, r0[0], s0, len, p, r0, lens, d0, hd);
    if (r0[1] < r0[0]) pair_span<G, NV, false, true>(acc, vc, offsets, r0[1], s0, len, p, r0, lens, d0, hd);
    pair_span<G, NV, true, true>(acc, vc, offsets, s0, s1, len, p, r0, lens, d0, hd);
    if (r1[0] > r1[1]) pair_span<G, NV, true, false>(acc, vc, offsets, s1, r1[0], len, p, r0, lens, d0, hd);
    if (r1[1] > r1[0]) pair_span<G, NV, false, true>(acc, vc, offsets, s1, r1[1], len, p, r0, lens, d0, hd);
#pragma GCC unroll 2
    for (int t = 0; t < 2; ++t) {
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) {
#pragma GCC unroll 4
        for (int k = 0; k < NV; ++k) _mm512_storeu_ps(o[t][g] + d0 + 16 * k, acc[t][g][k]);
      }
    }
  }
}

template <int NV, typename T>
void weighted_sum_pair_heads(const T* vc, const int64_t* offsets, const int32_t* r0, const int32_t* r1,
                             const float* const* p, int group, int hd, float* const* const* o) {
  for (int g0 = 0; g0 < group; g0 += 3) {
    const float* pg[2] = {p[0] + static_cast<long>(g0) * (r1[0] - r0[0]), p[1] + static_cast<long>(g0) * (r1[1] - r0[1])};
    float* const* og[2] = {o[0] + g0, o[1] + g0};
    switch (group - g0 < 3 ? group - g0 : 3) {
      case 1: weighted_sum_pair_block<1, NV, T>(vc, offsets, r0, r1, pg, hd, og); break;
      case 2: weighted_sum_pair_block<2, NV, T>(vc, offsets, r0, r1, pg, hd, og); break;
      default: weighted_sum_pair_block<3, NV, T>(vc, offsets, r0, r1, pg, hd, og); break;
    }
  }
}

template <typename T>
void weighted_sum_pair(const T* vc, const int64_t* offsets, const int32_t* r0, const int32_t* r1,
                       const float* const* p, int group, int hd, float* const* const* o) {
  const bool overlap = (r0[0] > r0[1] ? r0[0] : r0[1]) < (r1[0] < r1[1] ? r1[0] : r1[1]);
  if (!overlap) {
    for (int t = 0; t < 2; ++t) weighted_sum(vc, offsets + r0[t], r1[t] - r0[t], p[t], group, hd, o[t]);
  } else if (hd % 64 == 0) {
    weighted_sum_pair_heads<4, T>(vc, offsets, r0, r1, p, group, hd, o);
  } else {
    weighted_sum_pair_heads<1, T>(vc, offsets, r0, r1, p, group, hd, o);
  }
}

template <typename T>
constexpr AttentionKernels<T> kAvx512{scores<T>, exp_sum, weighted_sum<T>, scores_pair<T>, weighted_sum_pair<T>};

}  // namespace

template <typename T>
const AttentionKernels<T>* attention_kernels_avx512() {
  return &kAvx512<T>;
}
template <>
const AttentionKernels<E4m3Code>* attention_kernels_avx512<E4m3Code>() {
  return nullptr;
}
template <>
const AttentionKernels<E5m2Code>* attention_kernels_avx512<E5m2Code>() {
  return nullptr;
}

template const AttentionKernels<float>* attention_kernels_avx512<float>();
template const AttentionKernels<uint16_t>* attention_kernels_avx512<uint16_t>();

}  // namespace kvasir::cpu
