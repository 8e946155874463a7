// The reference of FP8 input-activation quantization (core/input_quant.h): each value divided by
// its scale, rounded to float8_e4m3fn (saturating at +-448, as the clamp before the cast does),
// and multiplied back, in float32, exactly as compressed-tensors' fake quantization and vLLM's
// dynamic per-token / per-token-group quantizers compute it. The CPU runs W8A8 checkpoints with
// it so that its matmul sees the activations an FP8 GEMM would. Must not allocate.
#pragma once

#include <cstdint>

#include "core/input_quant.h"

namespace kvasir::quant {

// out[r * cols + c] for rows [0, rows) of x ([rows, cols], row-major); out may equal x. A zero
// scale (an all-zero row or group) gives zeros. kDynamicGroup needs cols % group_size == 0.
void fake_quantize_fp8_rows(const float* x, int64_t rows, int64_t cols, const InputQuant& q, float* out);

}  // namespace kvasir::quant
