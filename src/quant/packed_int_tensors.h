// Finds one linear layer's packed integer tensors in a checkpoint (GPTQ / AWQ: <layer>.qweight,
// .qzeros, .scales, .g_idx; compressed-tensors: <layer>.weight_packed, .weight_scale, .weight_shape,
// .weight_zero_point, .weight_g_idx) and checks them against the layer's scheme: every dtype and
// shape consistent with in/out features and the group size, the scale and zero counts, g_idx in
// range (and equal to column / group_size without act-order), symmetric zeros equal to 2^(bits-1).
// Errors name the tensor. Must not copy or convert data: the result points into the source.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "loader/weight_source.h"
#include "quant/int_weight_scheme.h"
#include "quant/packed_int_weight.h"

namespace kvasir::quant {

// The tensor names that make up `layer`'s packed weight in `layout` (all of them, present or not).
std::vector<std::string> packed_int_tensor_names(IntWeightLayout layout, const std::string& layer);
// The tensor whose presence marks a packed layer: ".qweight" or ".weight_packed".
const char* packed_int_marker_suffix(IntWeightLayout layout);

StatusOr<PackedIntWeight> read_packed_int_weight(const WeightSource& src, const std::string& layer,
                                                 const IntWeightScheme& scheme);

}  // namespace kvasir::quant
