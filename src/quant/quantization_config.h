// QuantizationConfig: what an HF checkpoint's `quantization_config` (config.json) says about how
// its weights are quantized, parsed and validated once at load into plain data. One parser per
// `quant_method`, chosen from a table keyed by the method's name (compressed-tensors, fp8, ...);
// a method or scheme not in the table is refused naming it, never ignored. Must not read tensors:
// checking the checkpoint's tensors against this is the quantized weight source's job.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/json.h"
#include "common/status.h"

namespace kvasir::quant {

// How many values share one scale (compressed-tensors' QuantizationStrategy names).
enum class ScaleStrategy { kTensor, kChannel, kGroup, kBlock, kToken };
const char* scale_strategy_name(ScaleStrategy s);

enum class NumberType { kFloat, kInt };

// One quantized operand: compressed-tensors' QuantizationArgs, also what the other methods'
// fields are mapped onto.
struct QuantArgs {
  int num_bits = 8;
  NumberType type = NumberType::kFloat;
  bool symmetric = true;
  ScaleStrategy strategy = ScaleStrategy::kTensor;
  bool dynamic = false;  // scales computed from the values at run time (activations only)
  int64_t group_size = 0;                // kGroup
  std::vector<int64_t> block_structure;  // kBlock: {rows, cols} of one weight block
  std::string actorder;                  // compressed-tensors' activation ordering ("" = none)
};

// One group of modules quantized alike.
struct QuantScheme {
  // Module names or "re:<regex>" patterns, or a module type ("Linear": every linear layer).
  std::vector<std::string> targets;
  std::optional<QuantArgs> weights;
  std::optional<QuantArgs> input_activations;  // absent: weight-only
  // The tensor format the group's weights are stored in (compressed-tensors' CompressionFormat:
  // "float-quantized", "naive-quantized", "pack-quantized", ...; "fp8" for quant_method fp8).
  std::string format;
};

struct QuantizationConfig {
  std::string method;  // quant_method: "compressed-tensors", "fp8", or "fp8-online" (--quantization fp8)
  std::vector<QuantScheme> schemes;
  // Modules left unquantized: names or "re:<regex>" patterns (lm_head, the MoE router, ...).
  std::vector<std::string> ignore;
  // compressed-tensors' kv_cache_scheme: per-tensor K and V scales stored in the checkpoint
  // (`k_scale` / `v_scale` of each attention module).
  std::optional<QuantArgs> kv_cache;
};

// `q` is the quantization_config object; `where` prefixes every error ("config.json:
// quantization_config"). InvalidArgument for malformed or inconsistent fields, Unimplemented
// naming the method, format or scheme we do not run (mxfp4, nvfp4, bitsandbytes, ...).
StatusOr<QuantizationConfig> parse_quantization_config(const Json& q, const std::string& where);

// The quant_method names parse_quantization_config accepts, for messages and --help.
std::vector<std::string> supported_quant_methods();

// --quantization NAME (vLLM's flag): the online scheme that quantizes an unquantized checkpoint's
// linear weights at load. Only "fp8" (per-channel float8_e4m3fn weight scales, dynamic per-token
// activations) today; "" = none.
StatusOr<std::optional<QuantizationConfig>> online_quantization(const std::string& name);

// What --quantization NAME stands for, as vLLM reads the flag: a quant_method ("fp8", "gptq",
// "awq", "compressed-tensors"; vLLM's kernel names "gptq_marlin" and "awq_marlin" name their
// method), "" for none. On a quantized checkpoint the method must be the checkpoint's own; on an
// unquantized one only "fp8" applies (online_quantization). An unknown name is an error.
StatusOr<std::string> quantization_flag_method(const std::string& name);

// The scheme that quantizes `module` (a weight's name without ".weight"), or nullptr when the
// module is ignored or no scheme targets it. Every linear layer counts as a "Linear" target;
// `is_linear` says whether `module` is one (the caller knows from the tensor's shape and role).
const QuantScheme* scheme_for_module(const QuantizationConfig& c, const std::string& module, bool is_linear);

// True when `pattern` names `module` as compressed-tensors matches: a plain name equal to it, or
// "re:<regex>" matching from its start (Python's re.match).
bool module_matches(const std::string& pattern, const std::string& module);

}  // namespace kvasir::quant
