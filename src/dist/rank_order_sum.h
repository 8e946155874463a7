// The one summation every CPU communicator uses, so that a sum is bitwise deterministic: element i
// of the result is (((x_0[i] + x_1[i]) + x_2[i]) + ... + x_{n-1}[i]) in float32, in rank order,
// and for bf16 the float32 total is rounded to bf16 once (to nearest even). The order depends on
// nothing but the ranks (not on which rank reduces, arrival order, chunking or threads), so every
// rank gets the same bits, and so does a serial loop over the ranks' buffers. Must not reorder,
// vectorize across ranks, or contract (the file is built with -ffp-contract=off).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace kvasir::dist {

// out[i] = the rank-order sum of inputs[0..num_inputs)[i]; out may be one of the inputs (the sum of
// element i reads every input's element i before writing it). dtype kF32 or kBF16.
void sum_in_rank_order(const void* const* inputs,  // [num_inputs] pointers to [count]
                       int num_inputs, void* out,  // [count]
                       size_t count, DType dtype);

// float32 -> bf16, round to nearest even; NaN stays a (quiet) NaN of the same sign.
uint16_t f32_to_bf16(float f);

}  // namespace kvasir::dist
