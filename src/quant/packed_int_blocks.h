// Exact re-encodings of a PackedIntWeight into the GGML block formats the CPU kernels read in place,
// when the packed values fit one without any rounding: 4-bit symmetric -> Q4_0 ((q - 8) * d), other
// 4-bit and 8-bit -> Q8_0 ((q - zero) * d with the difference in int8), each 32-column block inside
// one group with a scale fp16 holds exactly. Then the block's dequantization (quant/dequantize.h)
// equals dequantize_packed_int value for value, at a quarter (Q8_0) or an eighth (Q4_0) of the
// float32 bytes. Must not approximate: a weight that does not fit stays float32.
#pragma once

#include <optional>

#include "core/dtype.h"
#include "quant/packed_int_weight.h"

namespace kvasir::quant {

// The block format `w` converts to exactly (kQ4_0 or kQ8_0), or nullopt.
std::optional<DType> exact_block_format(const PackedIntWeight& w);

// dst: out_features rows of in_features / 32 blocks of `format` (from exact_block_format(w)).
void packed_int_to_blocks(const PackedIntWeight& w, DType format, void* dst);

}  // namespace kvasir::quant
