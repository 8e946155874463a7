// Reference conversions between weight block formats (block_formats.h) and float32: dequantize a
// row of any supported format, and quantize float32 into GGML's Q8_0 / Q8_1 / Q8_K blocks. Scalar,
// portable, written for clarity: every fast path (the SIMD kernels in backend/cpu/quant, device
// kernels) must reproduce these results bit for bit, and code without a fast path (loaders, the
// CUDA backend's weight upload) calls them directly. New formats (FP8, INT4 GPTQ/AWQ) add their
// reference here first.
// Must not allocate, dispatch on the CPU model or validate user input: callers check the dtype
// with dequantize_supported() once, at load time.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/dtype.h"

namespace kvasir::quant {

// F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, and the
// FP8 element types (the codes' values, unscaled: a checkpoint's scales are applied by its format).
bool dequantize_supported(DType t);

// dst[0..k) = the k values of row `src` (k a multiple of the block size; src needs no alignment).
// The oracle of every other dequantizer.
void dequantize_row(DType t, const void* src, float* dst, int64_t k);

// Round half to even under the default rounding mode (what vroundps with
// _MM_FROUND_TO_NEAREST_INT does).
inline int round_half_even(float v) { return static_cast<int>(std::nearbyint(v)); }

// GGML's 8-bit block rule: d = max|x| / 127, q = round-half-even(x / d) (q = 0 when d = 0).
// Returns d. Shared by the Q8 formats below and the CPU's activation layouts.
float quantize_block_q8(const float* x, int n, int8_t* q);

// GGML-compatible quantizers; dst holds k/32 BlockQ8_0 / BlockQ8_1 or k/256 BlockQ8_K.
void quantize_row_q8_0(const float* x, void* dst, int64_t k);
void quantize_row_q8_1(const float* x, void* dst, int64_t k);
void quantize_row_q8_K(const float* x, void* dst, int64_t k);

}  // namespace kvasir::quant
