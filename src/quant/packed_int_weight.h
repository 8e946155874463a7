// PackedIntWeight: one linear layer's integer weight-only tensors (GPTQ, AWQ GEMM, compressed-tensors
// pack-quantized) exactly as the checkpoint stores them, described as plain data, and the exact
// reference dequantization to float32 [out_features, in_features] that the CPU runs and that GPU
// kernels reading the same packed bytes are compared with.
// Must not read files or validate: packed_int_tensors.h builds a PackedIntWeight only after checking
// every shape, dtype and index, so the functions here trust it.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace kvasir::quant {

// How the integers and their groups lie in the file (each layout's exact bit order is in the .cpp).
enum class IntWeightLayout {
  kGptq,           // qweight int32 [in / pack, out]: packed along in; qzeros [groups, out / pack]
  kAwqGemm,        // qweight int32 [in, out / pack]: packed along out, nibbles in order 0 2 4 6 1 3 5 7
  kPackQuantized,  // weight_packed int32 [out, in / pack]: packed along in, values stored + 2^(bits-1)
};

const char* int_weight_layout_name(IntWeightLayout layout);

struct PackedIntWeight {
  IntWeightLayout layout = IntWeightLayout::kGptq;
  int bits = 4;               // 4 or 8; pack = 32 / bits values per int32
  int64_t out_features = 0;
  int64_t in_features = 0;
  int64_t group_size = 0;     // input columns per group (in_features for one group per row)
  int64_t num_groups = 0;
  // The tensors as mapped from the file: little-endian, not necessarily aligned (read through memcpy).
  // All null: dummy weights of this scheme (IntQuantizedWeightSource::wrap_dummy), never dequantized.
  const uint8_t* qweight = nullptr;  // int32, shape per layout above
  // Zero points. GPTQ and AWQ: int32 [num_groups, out / pack], packed like their qweight's columns;
  // pack-quantized: int32 [out / pack, num_groups] packed along out (+ 2^(bits-1) like the weights).
  // nullptr: symmetric pack-quantized, zero point 0.
  const uint8_t* zeros = nullptr;
  // GPTQ v1 checkpoints store zero - 1 (the historical GPTQ-for-LLaMa offset): 1 adds it back; v2: 0.
  int zero_offset = 0;
  // Scales: GPTQ and AWQ [num_groups, out]; pack-quantized [out, num_groups].
  const uint8_t* scales = nullptr;
  DType scale_dtype = DType::kF16;   // F16, BF16 or F32
  // int32 [in_features]: the group of each input column (GPTQ desc_act, compressed-tensors actorder).
  // nullptr: column k is in group k / group_size.
  const uint8_t* g_idx = nullptr;
};

// The unsigned integer stored for weight (row `out`, column `in`), 0 .. 2^bits - 1.
uint32_t packed_int_value(const PackedIntWeight& w, int64_t out, int64_t in);
// The zero point of (row `out`, group `group`) in the same unsigned domain as packed_int_value.
int32_t packed_int_zero(const PackedIntWeight& w, int64_t out, int64_t group);
float packed_int_scale(const PackedIntWeight& w, int64_t out, int64_t group);
int64_t packed_int_group(const PackedIntWeight& w, int64_t in);

// dst [out_features, in_features] = (q - zero) * scale in float32: exact for f16 and bf16 scales (a
// difference below 2^9 times 11 significant bits), one rounding for f32 scales, as torch's f32 product.
void dequantize_packed_int(const PackedIntWeight& w, float* dst);

}  // namespace kvasir::quant
