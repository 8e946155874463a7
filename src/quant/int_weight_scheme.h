// IntWeightScheme: what a parsed QuantScheme (quantization_config.h) of an integer weight-only
// format (GPTQ v1 / v2, AWQ GEMM, compressed-tensors pack-quantized) means for reading one layer's
// packed tensors: the layout, bit width, group size, act-order, symmetry and GPTQ's zero-point offset.
// Must not read tensors or parse JSON: the config parsers have checked every field already.
#pragma once

#include <string>

#include "common/status.h"
#include "quant/packed_int_weight.h"
#include "quant/quantization_config.h"

namespace kvasir::quant {

struct IntWeightScheme {
  IntWeightLayout layout = IntWeightLayout::kGptq;
  int bits = 4;
  int64_t group_size = -1;  // -1: one group per row (GPTQ group_size -1, compressed-tensors channel)
  bool desc_act = false;    // GPTQ desc_act / compressed-tensors actorder group: g_idx assigns groups
  bool sym = true;          // symmetric: every zero point is 2^(bits-1)
  int zero_offset = 0;      // GPTQ v1 (checkpoint_format gptq) stores zero - 1
};

// "gptq", "gptq_v2", "awq", "pack-quantized": the QuantScheme formats read as packed integers.
bool is_int_weight_format(const std::string& format);

// The scheme's packed reading; InvalidArgument when `s` is not an integer weight-only scheme.
StatusOr<IntWeightScheme> int_weight_scheme(const QuantScheme& s);

}  // namespace kvasir::quant
