// The W4A16 device layout: a 4-bit PackedIntWeight (GPTQ with or without act-order, AWQ GEMM,
// compressed-tensors pack-quantized) reordered once, at load, so that GPU kernels read tensor-core
// B fragments (mma m16n8k16, bf16) straight from 16-byte loads and dequantize them in registers.
// The values are not changed: codes stay the checkpoint's unsigned 4-bit integers, scales keep
// their stored type, zero points stay integers, so (code - zero) * scale is the checkpoint's own
// dequantization bit for bit (packed_int_weight.h).
//
// Layout (N = out_features, K = in_features, both as the kernels see them):
//  - act-order (g_idx not column / group_size): input columns are permuted so groups are
//    contiguous, k' = position in `perm` (perm[k'] = original column); the kernels read x[:, perm].
//  - codes: N / 16 x K / 64 tiles of 16 rows x 64 columns, tile (nt, kc) at
//    (nt * K / 64 + kc) * 512 bytes: 32 lanes x one uint4. Lane l = 4 g + t holds, for row half
//    h (rows 16 nt + 8 h + g), words 2 h + j (j = 0, 1) with the columns of k16 steps 2 j and
//    2 j + 1 that an mma B fragment of lane l needs: k = 2t, 2t+1, 2t+8, 2t+9 of each step.
//    Nibble p of a word: pair q = p % 4, high = p / 4; pair q is step 2 j + q / 2, columns
//    2t + 8 (q % 2) + high. So (word >> 4 q) & 0x000F000F is one bf16x2 fragment register's pair.
//  - scales: [num_groups, N] in the checkpoint's scale type (f16, bf16 or f32); group of k' is
//    k' / group_size (group_size a multiple of 32, or K for one group per row).
//  - zeros: uint8 [num_groups, N], absent when every zero point is 8 (symmetric).
// Must not touch a device: this is host code the CUDA upload and the CPU tests share.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "core/dtype.h"
#include "quant/packed_int_weight.h"

namespace kvasir::quant {

inline constexpr int64_t kW4a16TileRows = 16;
inline constexpr int64_t kW4a16TileCols = 64;

struct W4a16Weight {
  int64_t out_features = 0, in_features = 0;
  int64_t group_size = 0, num_groups = 0;
  DType scale_dtype = DType::kF16;
  std::vector<uint32_t> codes;   // out_features * in_features / 8 words, tile order above
  std::vector<uint8_t> scales;   // [num_groups, out_features] of scale_dtype
  std::vector<uint8_t> zeros;    // [num_groups, out_features], or empty: every zero point is 8
  std::vector<int32_t> perm;     // [in_features] original column of k', or empty: identity
};

// OK when `w` fits the layout; else FailedPrecondition / Unimplemented saying what does not
// (8-bit, shapes not whole tiles, group sizes that are not multiples of 32, act-order groups
// of unequal sizes).
Status w4a16_supported(const PackedIntWeight& w);

// The reordered weight; the checks of w4a16_supported first.
StatusOr<W4a16Weight> make_w4a16_weight(const PackedIntWeight& w);

// Where code (row n, permuted column k) lies: word index into codes, nibble 0..7.
void w4a16_code_position(int64_t in_features, int64_t n, int64_t k, int64_t* word, int* nibble);

// The float value of (row n, permuted column k) read back from the layout, as a kernel computes
// it: (code - zero) * scale in float32 (for tests against dequantize_packed_int).
float w4a16_value(const W4a16Weight& w, int64_t n, int64_t k);

}  // namespace kvasir::quant
