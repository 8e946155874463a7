// Internal contract between the matmul driver and the per-ISA kernel sets (kernels_avx2.cpp,
// kernels_avx512.cpp, kernels_amx.cpp): the quantized-activation row layouts kept in scratch, and
// the tile functions. Not a public header: only cpu/quant includes it.
// Must not hold policy (threading, tiling over n): that is matmul.cpp's.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cpu/quant/cpu_isa.h"
#include "core/dtype.h"

namespace kvasir::cpu {

inline size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

// Activations quantized for the 32-element block formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0), one row
// per input vector: int8 qs[k] | float ds[2 * k/32], ds = (d, s) per block, s = d * sum(qs).
// (d, s) pairs line up with the (dw, mw) pairs the kernels gather from weight blocks.
struct Act32Layout {
  static size_t row_bytes(int64_t k) { return align_up(static_cast<size_t>(k) + 8 * static_cast<size_t>(k / 32), 64); }
  static const float* ds(const uint8_t* row, int64_t k) { return reinterpret_cast<const float*>(row + k); }
};

// Activations for the K-quants (256-element super-blocks): int8 qs[k] | float d[k/256] |
// int16 bsum16[k/16] | int16 bsum32[k/32] (sums of qs over 16 and 32 elements).
struct ActKLayout {
  static size_t row_bytes(int64_t k) {
    return align_up(static_cast<size_t>(k) + 4 * static_cast<size_t>(k / 256) + 2 * static_cast<size_t>(k / 16) +
                        2 * static_cast<size_t>(k / 32),
                    64);
  }
  static const float* d(const uint8_t* row, int64_t k) { return reinterpret_cast<const float*>(row + k); }
  static const int16_t* bsum16(const uint8_t* row, int64_t k) {
    return reinterpret_cast<const int16_t*>(d(row, k) + k / 256);
  }
  static const int16_t* bsum32(const uint8_t* row, int64_t k) { return bsum16(row, k) + k / 16; }
};

// 16-bit activations ("planes" mode): per block, q = round(x / d) with |q| <= kActQ16Max, split
// as q = 256 hi + lo, hi and lo in [-127, 127]. They are stored as two rows of the layout above,
// hi (scale 256 d) then lo (scale d), row_bytes(k) apart, so every int8 kernel runs unchanged on
// them as two activation columns and the tile adds each pair of column results. The int8
// activation error (~1/254 of a block's max) drops ~256x while weights and dot products stay int8.
constexpr float kActQ16Max = 32639.0f;

using DequantFn = void (*)(const void* src, float* dst, int64_t k);

// Activations rounded to bf16 (round to nearest even) for BF16 weights in the fast modes on
// AVX-512 BF16: bf16 x[k], zero-padded to 64 bytes.
struct ActBf16Layout {
  static size_t row_bytes(int64_t k) { return align_up(2 * static_cast<size_t>(k), 64); }
};

enum class ActFormat { kF32, kQ8_32, kQ8_K, kBF16 };

// One call computes y for up to 4 (AMX tiles: 16) consecutive weight rows against `nc` activation
// rows.
struct TileArgs {
  const uint8_t* w;      // first weight row of the tile
  size_t w_stride;       // bytes between weight rows
  int nr;                // rows in the tile, 1..4 (AMX: 1..16; AVX-512 panels: 1..32)
  int64_t k;             // elements per row
  const void* act;       // first activation row: f32 [nc, k] or a quantized layout above
  size_t act_stride;     // bytes between activation rows
  int64_t nc;            // activation rows (any count; a multiple of `planes`)
  int planes = 1;        // 2: rows come in (hi, lo) pairs whose results are summed into one y row
  float* scratch;        // per-thread, tile_scratch_floats(k) floats, 64-byte aligned
  float* y;              // y[(c / planes) * ldy + r] for r < nr, c < nc
  int64_t ldy;
  DequantFn dequant = nullptr;  // only for the generic dequantize-then-f32 tile
  // Packed tiles: where the panel stores m (PackedQ32::stored_m()), its offset in the panel, else
  // 0 and mw = m_from_d * dw; d_offset: where the fp16 scales start.
  size_t d_offset = 0, m_offset = 0;
  float m_from_d = 0.0f;
  size_t panel_bytes = 0;  // packed tiles: from one panel to the next
};

// Per-thread scratch a tile function may use.
inline size_t tile_scratch_floats(int64_t k) { return static_cast<size_t>(k) * 4 + 256; }

using TileFn = void (*)(const TileArgs&);
using QuantActFn = void (*)(const float* x, int64_t k, uint8_t* row);

struct KernelSet {
  CpuIsa isa;
  DequantFn (*dequant)(DType);       // nullptr: no fast path (use the reference)
  TileFn (*q8_tile)(DType, ActFormat*);  // int8-activation tile, or nullptr
  TileFn (*f32_tile)(DType);         // f32-activation tile for F32/F16/BF16 weights, else nullptr
  TileFn dequant_f32_tile;           // generic: dequantize rows (reference or fast), f32 dot
  QuantActFn quantize_act32;
  QuantActFn quantize_actk;
  QuantActFn quantize_act32_planes;  // writes the (hi, lo) pair of rows
  QuantActFn quantize_actk_planes;
};

const KernelSet& kernel_set(CpuIsa isa);

namespace avx2 {
const KernelSet& kernels();
}
namespace avx512 {
const KernelSet& kernels();
// Tile on PackedQ32 panels (packed_q32.h), any of its types, kQ8_32 activations (1 or 2 planes):
// TileArgs.w is a panel and nr <= 2 * kPackedPanelRows: above kPackedPanelRows the tile also reads
// the next panel (TileArgs.panel_bytes on); `nibbles`: the panel's nibble layout
// (PackedQ32::nibbles()). Bit-identical to the q32 tile of kernels().
TileFn packed_q32_tile(bool nibbles);
// BF16 weights against ActBf16Layout rows with vdpbf16ps (kernels_avx512_bf16.cpp); the tile takes
// up to 4 weight rows. Call only where cpu_has_avx512_bf16().
TileFn bf16_tile_fn();
QuantActFn quantize_act_bf16_fn();
}

namespace amx {
// AMX-INT8 tile for the 32-element block type `t` (kQ8_32 activations), or nullptr. Bit-identical
// to the AVX-512 q8 tile. Takes up to kAmxTileRows weight rows; reads activation rows up to the
// next multiple of kAmxTileCols input rows (callers pad the buffer), and amx_scratch_bytes(k) of
// per-thread scratch. Call only where cpu_supports(CpuIsa::kAmx).
TileFn amx_tile_fn(DType t);
// The same on PackedQ32 panels (any of its types; `nibbles`: PackedQ32::nibbles()): TileArgs.w is
// one panel, as for avx512::packed_q32_tile, whose bits it gives. Reads only the nc activation
// rows it is given (no padding), and amx_scratch_bytes(k) of per-thread scratch. Call only where
// cpu_supports(CpuIsa::kAmx). It leaves the tile unit configured for the thread's next call: the
// thread calls release_tiles() after its last one.
TileFn packed_q32_tile(bool nibbles);
void release_tiles();
}  // namespace amx
constexpr int64_t kAmxTileRows = 16, kAmxTileCols = 16;
inline size_t amx_scratch_bytes(int64_t k) {
  // B blocks (512 bytes) + dw, mw (64 bytes each) per block, two stages of int32 results (8
  // blocks x 2 planes x 1 KiB each), float accumulators (16 inputs x 4 x 64 bytes).
  return static_cast<size_t>(k / 32) * 640 + 2 * 16384 + 4096 + 64;
}

// The reference dequantizer of `t` as a plain function pointer (nullptr if unsupported).
DequantFn ref_dequant_fn(DType t);

// Scalar references for the activation layouts (the SIMD versions must match them bit for bit).
void quantize_act32_ref(const float* x, int64_t k, uint8_t* row);
void quantize_actk_ref(const float* x, int64_t k, uint8_t* row);
void quantize_act32_planes_ref(const float* x, int64_t k, uint8_t* row);
void quantize_actk_planes_ref(const float* x, int64_t k, uint8_t* row);
void quantize_act_bf16_ref(const float* x, int64_t k, uint8_t* row);

}  // namespace kvasir::cpu
