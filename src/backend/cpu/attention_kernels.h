// The inner loops of CPU paged attention (cpu_attention.cpp) over one (token, kv head, key range)
// unit or a pair of them, as a set per ISA: AVX2 (attention_kernels_avx2.cpp, every x86-64 CPU
// the backend runs on) and AVX-512 (attention_kernels_avx512.cpp: full-width registers, twice the multiply-adds per
// instruction where the core has 512-bit units). Both sets compute every float in the same order,
// so they are bit-identical (tested): attention gives the same bits on every x86 CPU. Keys and
// values are cache rows of T (float32, float16 bits, FP8 codes; fp8_cache_codes.h), reached
// through per-key element offsets into the cache; FP8 caches keep the AVX2 set.
// The *_pair entry points run two tokens of one sequence (a prefill's neighbours, whose key
// ranges nearly coincide) in one pass over the union of their ranges; each token's results equal
// the single-token kernels' over its own range, bit for bit (tested), so pairing never changes a
// token's output. The AVX2 set runs a pair as each token alone: the reference.
#pragma once

#include <cstdint>

namespace kvasir::cpu {

// FP8 cache code tags (fp8_cache_codes.h).
struct E4m3Code;
struct E5m2Code;

template <typename T>
struct AttentionKernels {
  // out[g * len + j] = (q_g . keys[j]) * scale (the dot rounded, then scaled) for the group's
  // heads g < group (q_g = q + g * hd) and keys j < len, keys[j] = kc + offsets[j]. With hd a
  // multiple of 8 every score takes dot8's order (eight lanes of FMA chains, then its shuffle
  // tree; a last run of fewer than 8 keys is padded with its last key), else dot's. Rows are
  // prefetched a few keys ahead on the first pass over them.
  void (*scores)(const float* q, int group, const T* kc, const int64_t* offsets, int32_t len, int hd, float scale,
                 float* out);
  // sc[j] = e^(sc[j] - mx) for j < len; returns their sum (eight lanes in key order, then the tail).
  float (*exp_sum)(float* sc, int32_t len, float mx);
  // o[g][d] = sum_j p[g * len + j] * v_j[d] in key order, for g < group (o[g] overwritten),
  // v_j = vc + offsets[j]. hd must be a multiple of 16.
  void (*weighted_sum)(const T* vc, const int64_t* offsets, int32_t len, const float* p, int group, int hd,
                       float* const* o);
  // scores() of two tokens (t < 2) over one pass: keys u < len (keys[u] = kc + offsets[u]) are
  // the union of their ranges; token t's range is [r0[t], r1[t]) of it (non-empty), its query
  // group q[t] and its scores out[t][g * (r1[t] - r0[t]) + u - r0[t]], each equal to scores()'s
  // for q[t] over offsets + r0[t] alone (a key's score does not depend on where it sits in an
  // eight-key chunk: dot8 gives every lane the same reduction tree).
  void (*scores_pair)(const float* const* q, int group, const T* kc, const int64_t* offsets, int32_t len,
                      const int32_t* r0, const int32_t* r1, int hd, float scale, float* const* out);
  // weighted_sum() of two tokens (ranges as in scores_pair, p[t][g * (r1[t] - r0[t]) + u - r0[t]],
  // outputs o[t][g]), each equal to weighted_sum() over its own range: every output lane is its
  // token's FMA chain from its first key to its last, in key order; a value row the ranges share is
  // read once for both. hd must be a multiple of 16.
  void (*weighted_sum_pair)(const T* vc, const int64_t* offsets, const int32_t* r0, const int32_t* r1,
                            const float* const* p, int group, int hd, float* const* const* o);
};

// The AVX2 set (any x86-64 CPU the backend runs on).
template <typename T>
const AttentionKernels<T>& attention_kernels_avx2();
// The AVX-512 set, or nullptr where T has none (FP8 codes). Call only on a CPU with AVX-512.
template <typename T>
const AttentionKernels<T>* attention_kernels_avx512();
// The set this process runs: AVX-512 when active_isa() (cpu_isa.h, KVASIR_CPU_ISA pins it) is
// not AVX2 and T has one, else AVX2.
template <typename T>
const AttentionKernels<T>& attention_kernels();

}  // namespace kvasir::cpu
