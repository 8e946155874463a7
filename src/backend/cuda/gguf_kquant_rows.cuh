// What both one-token K-quant GEMV kernels take, the per-tile one (gguf_kquant_gemv.cu) and the
// streamed one (gguf_kquant_stream.cu): the projections' rows of one launch and the warp split of
// their super-blocks. The streamed kernel's outputs equal the per-tile kernel's bit for bit only
// while both split a tile's super-blocks over the same warps and meet them in the same order, so
// the split lives here once.
#pragma once

#include <cstdint>

#include "backend/cuda/gate_activation.cuh"
#include "backend/cuda/gguf_kernels.h"
#include "backend/cuda/gguf_kquant_formats.cuh"

namespace kvasir::cuda::kquant {

// Warp w of a tile sums its super-blocks w, w + kGemvWarps, ...
inline constexpr int kGemvWarps = 8;
inline constexpr int kGemvThreads = kGemvWarps * 32;
// Each warp alternates two factor buffers (kFactorBytes, gguf_kquant_formats.cuh).
inline constexpr size_t kFactorsBytes = static_cast<size_t>(kGemvWarps) * 2 * kFactorBytes;

// The projections of one x (q/k/v, gate/up) a launch reads, cut into 16-row tiles.
struct ProjectionRows {
  GgufProjection proj[kGgufMaxProjections];
  int64_t tile_end[kGgufMaxProjections];  // prefix sums of the projections' 16-row tiles
  int64_t k, row_bytes;
  int32_t num_proj, super_blocks, f32_out;
  int32_t gated;  // GateAct: proj[0] is gate, proj[1] up, one tile of each per unit of work
};

// Fills r from a launcher's arguments (t Q4_K or Q6_K, k a multiple of 256); false where a weight
// is not 16-byte aligned or a projection is empty.
inline bool set_projection_rows(ProjectionRows& r, const GgufProjection* proj, int num_proj, DType t, int64_t k,
                                Elem out, GateAct gated) {
  r.k = k;
  r.super_blocks = static_cast<int32_t>(k / 256);
  r.row_bytes = r.super_blocks * static_cast<int64_t>(t == DType::kQ4_K ? Q4K::kBlockBytes : Q6K::kBlockBytes);
  r.f32_out = out == Elem::kF32 ? 1 : 0;
  r.num_proj = num_proj;
  r.gated = gated;
  int64_t tiles = 0;
  for (int p = 0; p < num_proj; ++p) {
    if (!aligned16(proj[p].w) || proj[p].out_features <= 0) return false;
    r.proj[p] = proj[p];
    tiles += (proj[p].out_features + 15) / 16;
    r.tile_end[p] = tiles;
  }
  return true;
}

// The launch's units of work: every projection's tiles, or, gated, gate's (each takes up's too).
inline int64_t work_tiles(const ProjectionRows& r) {
  return r.gated != kGateNone ? r.tile_end[0] : r.tile_end[r.num_proj - 1];
}

// Row r's sums v (gate's and up's where kGated) written at element `at` of pr's output (and up's):
// gated, rounded as the unfused ops round them, since gate and up are bf16 tensors there (no
// biases, bf16 out: the launchers check); else plus the bias, in the output's type.
template <bool kGated>
__device__ __forceinline__ void store_row(const ProjectionRows& a, const GgufProjection& pr, int64_t at, int64_t r,
                                          const float* v) {
  if constexpr (kGated) {
    const float gv = __bfloat162float(__float2bfloat16(v[0]));
    const float uv = __bfloat162float(__float2bfloat16(v[1]));
    static_cast<bf16*>(a.proj[1].y)[at] = __float2bfloat16(uv);
    static_cast<bf16*>(pr.y)[at] = __float2bfloat16(gate_activation(gv, a.gated == kGateGeluTanh) * uv);
  } else {
    const float y = pr.bias != nullptr ? v[0] + pr.bias[r] : v[0];
    if (a.f32_out) static_cast<float*>(pr.y)[at] = y;
    else static_cast<bf16*>(pr.y)[at] = __float2bfloat16(y);
  }
}

}  // namespace kvasir::cuda::kquant
