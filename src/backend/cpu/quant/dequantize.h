// Row conversions between GGUF block formats and f32: dequantize any supported weight row, and
// quantize f32 activations into GGML's Q8_0 / Q8_1 / Q8_K blocks (byte-compatible with GGML).
// Picks the best instruction set at run time (see cpu_isa.h); must not allocate or validate user
// input: callers check dtype/shape with dequantize_supported() once, at load time.
#pragma once

#include <cstdint>

#include "backend/cpu/quant/cpu_isa.h"
#include "core/dtype.h"

namespace kvasir::cpu {

// F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K.
bool dequantize_supported(DType t);

// dst[0..k) = the k values of row `src` (k a multiple of the block size; src needs no alignment).
void dequantize_row(DType t, const void* src, float* dst, int64_t k);
void dequantize_row(CpuIsa isa, DType t, const void* src, float* dst, int64_t k);

// Scalar reference, the oracle of the SIMD paths (bit-identical results expected).
void dequantize_row_ref(DType t, const void* src, float* dst, int64_t k);

// GGML-compatible activation quantizers: d = max|x| / 127, q = round-half-even(x / d).
// dst holds k/32 BlockQ8_0 / BlockQ8_1 or k/256 BlockQ8_K (blocks.h).
void quantize_row_q8_0(const float* x, void* dst, int64_t k);
void quantize_row_q8_1(const float* x, void* dst, int64_t k);
void quantize_row_q8_K(const float* x, void* dst, int64_t k);

}  // namespace kvasir::cpu
