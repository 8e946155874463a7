// Test helpers for cpu/quant: random GGUF weight rows with valid (finite, moderate) scales, random
// activations, and the ISAs this machine can run. Test-only; never linked into the library.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "backend/cpu/quant/cpu_isa.h"
#include "core/dtype.h"

namespace kvasir::cpu::testing {

// `rows` rows of `k` elements of type t: random quant bytes, fp16 scales chosen so that weights
// are O(1). k must be a multiple of t's block size.
std::vector<uint8_t> random_weights(DType t, int64_t rows, int64_t k, std::mt19937& rng);

std::vector<float> random_floats(size_t n, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f);

// Every ISA cpu_supports() accepts here (always includes kAvx2).
std::vector<CpuIsa> runnable_isas();

// Weight types matmul supports, and the block size of a type.
std::vector<DType> matmul_types();
int64_t block_size(DType t);

}  // namespace kvasir::cpu::testing
