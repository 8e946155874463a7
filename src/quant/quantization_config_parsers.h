// The per-method parsers behind parse_quantization_config's dispatch table, and the helpers they
// share. Internal to src/quant: callers use quantization_config.h.
#pragma once

#include <string>

#include "common/json.h"
#include "common/status.h"
#include "config/hf_keys.h"
#include "quant/quantization_config.h"

namespace kvasir::quant {

// compressed-tensors (llm-compressor's checkpoints): config_groups, format, ignore, kv_cache_scheme.
StatusOr<QuantizationConfig> parse_compressed_tensors_config(const HfKeys& q);
// quant_method "fp8" (vLLM's Fp8Config, DeepSeek-V3): activation_scheme, weight_block_size.
StatusOr<QuantizationConfig> parse_fp8_config(const HfKeys& q);

// quant_method "gptq" and "awq" (int_weight_config.cpp): integer weight-only, one scheme for every linear.
StatusOr<QuantizationConfig> parse_gptq_config(const HfKeys& q);
StatusOr<QuantizationConfig> parse_awq_config(const HfKeys& q);
// compressed-tensors' pack-quantized format: W4A16 / W8A16, group or channel scales.
Status check_pack_quantized_scheme(const QuantScheme& s, const std::string& where);

// One QuantizationArgs object (compressed-tensors' field names); `where` names it in errors.
StatusOr<QuantArgs> parse_quant_args(const HfKeys& a);
// A list of strings (targets, ignore); absent => empty.
StatusOr<std::vector<std::string>> string_list(const HfKeys& k, std::string_view key);

// Checks shared by every FP8 scheme: float, 8 bits, symmetric weights with a tensor, channel or
// block strategy; activations static per tensor or dynamic per tensor, token or group.
Status check_fp8_scheme(const QuantScheme& s, const std::string& where);

}  // namespace kvasir::quant
