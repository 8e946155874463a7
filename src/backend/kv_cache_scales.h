// vLLM's --calculate-kv-scales (Backend::calculates_kv_scales): an FP8 cache made with cache_scale
// 0 takes its per-tensor scales from its first write_kv, max |K| / 200 and max |V| / 100 over the
// rows that write stores (vLLM's K_SCALE_CONSTANT and V_SCALE_CONSTANT: the first batch's extremes
// land well under e4m3's 448, headroom for later tokens). One definition for every backend, so a
// device's scales are the CPU's for the same K and V.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backend/backend.h"

namespace kvasir {

inline constexpr float kKScaleRange = 200.0f;
inline constexpr float kVScaleRange = 100.0f;

// The scale under which the largest stored magnitude amax becomes the code `range`; 1 where the
// batch held only zeros (or NaN: a scale of 0 or NaN would poison every later code).
inline float calculated_kv_scale(float amax, float range) { return amax > 0.0f ? amax / range : 1.0f; }

// Sets the scales of k_cache and v_cache still at 0 from the K and V rows (`row` elements each,
// host memory, widen(element) -> float) that a write stores: slot >= 0, padding rows are not
// data. std::max keeps the non-NaN side, so NaN in the batch leaves the scales NaN-free.
template <class T, class Widen>
void set_calculated_kv_scales(const T* k, const T* v, const AttentionMetadata& m, int64_t row, Widen widen,
                              Tensor& k_cache, Tensor& v_cache) {
  float ka = 0.0f, va = 0.0f;
  for (int t = 0; t < m.num_tokens; ++t) {
    if (m.slot_mapping[t] < 0) continue;
    for (int64_t i = t * row; i < (t + 1) * row; ++i) {
      ka = std::max(ka, std::fabs(widen(k[i])));
      va = std::max(va, std::fabs(widen(v[i])));
    }
  }
  if (k_cache.cache_scale == 0.0f) k_cache.cache_scale = calculated_kv_scale(ka, kKScaleRange);
  if (v_cache.cache_scale == 0.0f) v_cache.cache_scale = calculated_kv_scale(va, kVScaleRange);
}

}  // namespace kvasir
