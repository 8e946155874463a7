// The CPU's fast row dequantizer: any weight format of quant/dequantize.h -> f32 through the best
// instruction set at run time (see cpu_isa.h), bit-identical to quant::dequantize_row (the scalar
// reference, which formats without a SIMD path fall back to). The block formats themselves, their
// reference conversions and the GGML Q8 quantizers live in src/quant.
// Must not allocate or validate user input: callers check the dtype with
// quant::dequantize_supported() once, at load time.
#pragma once

#include <cstdint>

#include "backend/cpu/quant/cpu_isa.h"
#include "core/dtype.h"

namespace kvasir::cpu {

// dst[0..k) = the k values of row `src` (k a multiple of the block size; src needs no alignment).
void dequantize_row(DType t, const void* src, float* dst, int64_t k);
void dequantize_row(CpuIsa isa, DType t, const void* src, float* dst, int64_t k);

}  // namespace kvasir::cpu
