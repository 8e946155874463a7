// IntQuantScheme: what an HF `quantization_config` says about integer weight-only layers (GPTQ, AWQ,
// compressed-tensors pack-quantized W4A16 / W8A16), read and checked once: bit width, group size,
// act-order, symmetry, the GPTQ zero-point convention, and for compressed-tensors which layers each
// config group targets and which it ignores. Unsupported variants are refused naming the key.
// Must not read tensors: packed_int_tensors.h checks the tensors against the scheme.
#pragma once

#include <string>
#include <vector>

#include "common/json.h"
#include "common/status.h"
#include "quant/packed_int_weight.h"

namespace kvasir::quant {

// One group of layers' weight quantization.
struct IntWeightScheme {
  IntWeightLayout layout = IntWeightLayout::kGptq;
  int bits = 4;
  int64_t group_size = -1;  // -1: one group per row (GPTQ group_size -1, compressed-tensors channel)
  bool desc_act = false;    // GPTQ act-order / compressed-tensors actorder: g_idx assigns the groups
  bool sym = true;          // symmetric: every zero point is 2^(bits-1)
  int zero_offset = 0;      // GPTQ v1 (checkpoint_format gptq): stored zeros are zero - 1
};

struct IntQuantConfig {
  std::string method;  // "gptq", "awq" or "compressed-tensors"
  // A compressed-tensors config group: its targets ("Linear", a layer name, or "re:<regex>" matched
  // from the start of the name, as compressed-tensors and vLLM match) and its scheme. GPTQ and AWQ
  // have one group targeting every layer that holds a qweight.
  struct Group {
    std::vector<std::string> targets;
    IntWeightScheme scheme;
  };
  std::vector<Group> groups;
  std::vector<std::string> ignore;  // layer names or "re:<regex>", never quantized

  // The scheme of the linear layer `layer` (e.g. "model.layers.0.mlp.down_proj"); NotFound naming
  // the layer when no group targets it or it is ignored.
  StatusOr<const IntWeightScheme*> scheme_for(const std::string& layer) const;
};

// True when `quantization_config` names a method read here (gptq, awq, or compressed-tensors whose
// weights are pack-quantized integers).
bool is_int_weight_quantization(const Json& quantization_config);

// The config, every field checked; InvalidArgument / Unimplemented naming the key otherwise.
StatusOr<IntQuantConfig> parse_int_quant_config(const Json& quantization_config);

}  // namespace kvasir::quant
