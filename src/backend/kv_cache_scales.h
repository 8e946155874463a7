// vLLM's --calculate-kv-scales (Backend::calculates_kv_scales): an FP8 cache made with cache_scale
// 0 takes its per-tensor scales from its first write_kv, max |K| / 200 and max |V| / 100 over the
// rows that write stores (vLLM's K_SCALE_CONSTANT and V_SCALE_CONSTANT: the first batch's extremes
// land well under e4m3's 448, headroom for later tokens). One definition for every backend, so a
// device's scales are the CPU's for the same K and V.
#pragma once

namespace kvasir {

inline constexpr float kKScaleRange = 200.0f;
inline constexpr float kVScaleRange = 100.0f;

// The scale under which the largest stored magnitude amax becomes the code `range`; 1 where the
// batch held only zeros (or NaN: a scale of 0 or NaN would poison every later code).
inline float calculated_kv_scale(float amax, float range) { return amax > 0.0f ? amax / range : 1.0f; }

}  // namespace kvasir
