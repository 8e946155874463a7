// quant_method "fp8" (vLLM's Fp8Config; DeepSeek-V3 and Qwen3-FP8 ship it): float8_e4m3fn
// weights with a per-tensor `weight_scale` (or `weight_scale_inv`), or block-wise scales
// `weight_scale_inv` [ceil(out / 128), ceil(in / 128)] when weight_block_size is given;
// activations dynamic (per token, or per token and 128-column group with blocks) or static
// (`input_scale`). Also the FP8 scheme checks compressed-tensors' float formats share.
#include "quant/quantization_config_parsers.h"

namespace kvasir::quant {
namespace {

std::string args_text(const QuantArgs& a) {
  return std::string(a.type == NumberType::kFloat ? "float" : "int") + " " + std::to_string(a.num_bits) +
         "-bit, strategy '" + scale_strategy_name(a.strategy) + "'" + (a.dynamic ? ", dynamic" : "") +
         (a.symmetric ? "" : ", asymmetric");
}

}  // namespace

Status check_fp8_scheme(const QuantScheme& s, const std::string& where) {
  const QuantArgs& w = *s.weights;
  if (w.type != NumberType::kFloat || w.num_bits != 8) {
    if (w.type == NumberType::kFloat && w.num_bits == 4) {
      return unimplemented(where + ": 4-bit float weights (NVFP4 / MXFP4) are not supported");
    }
    return unimplemented(where + ": format '" + s.format + "' holds float 8-bit weights here, got " + args_text(w));
  }
  if (!w.symmetric || w.dynamic) return invalid_argument(where + ": FP8 weights must be static and symmetric, got " + args_text(w));
  if (w.strategy != ScaleStrategy::kTensor && w.strategy != ScaleStrategy::kChannel && w.strategy != ScaleStrategy::kBlock) {
    return unimplemented(where + ": FP8 weight scales per tensor, channel or block are supported, got " + args_text(w));
  }
  if (!s.input_activations) return Status();  // FP8 weight-only (W8A16)
  const QuantArgs& a = *s.input_activations;
  if (a.type != NumberType::kFloat || a.num_bits != 8 || !a.symmetric) {
    return unimplemented(where + ": activations of an FP8 scheme must be symmetric float 8-bit, got " + args_text(a));
  }
  // Dynamic per-tensor scales are left out: one scale over the whole batch makes a request's
  // result depend on the others it is batched with.
  const bool ok = a.dynamic ? (a.strategy == ScaleStrategy::kToken || a.strategy == ScaleStrategy::kGroup)
                            : a.strategy == ScaleStrategy::kTensor;
  if (!ok) {
    return unimplemented(where + ": FP8 activation scales must be static per tensor or dynamic per token or group, got " +
                         args_text(a));
  }
  return Status();
}

StatusOr<QuantizationConfig> parse_fp8_config(const HfKeys& q) {
  QuantizationConfig c;
  c.method = "fp8";
  // Held in StatusOr rather than moved out: GCC 12 warns of an uninitialized string otherwise.
  const StatusOr<std::string> fmt_or = q.str_or("fmt", "e4m3");
  if (!fmt_or.ok()) return fmt_or.status();
  const std::string& fmt = *fmt_or;
  if (fmt != "e4m3") return unimplemented(q.where() + ": fp8 fmt '" + fmt.substr(0, 32) + "' (only e4m3 weights are supported)");
  const StatusOr<std::string> act_or = q.str_or("activation_scheme", "dynamic");
  if (!act_or.ok()) return act_or.status();
  const std::string& act = *act_or;
  if (act != "dynamic" && act != "static") return q.out_of_range("activation_scheme", "'" + act.substr(0, 32) + "'", "'dynamic' or 'static'");
  QuantScheme s;
  s.targets = {"Linear"};
  s.format = "fp8";
  s.weights = QuantArgs{};
  s.weights->type = NumberType::kFloat;
  s.input_activations = QuantArgs{};
  s.input_activations->type = NumberType::kFloat;
  s.input_activations->dynamic = act == "dynamic";
  if (const Json* b = q.find("weight_block_size")) {
    if (!b->is_array() || b->size() != 2) return q.type_error("weight_block_size", "a list of two positive integers");
    for (const Json& e : b->as_array()) {
      auto v = HfKeys::as_integer(e);
      if (!v || *v < 1) return q.type_error("weight_block_size", "a list of two positive integers");
      s.weights->block_structure.push_back(*v);
    }
    if (act != "dynamic") {
      return invalid_argument(q.where() + ": block-wise FP8 (weight_block_size) needs activation_scheme 'dynamic'");
    }
    // Activations are quantized per token in groups of the block's column count, as vLLM does.
    s.weights->strategy = ScaleStrategy::kBlock;
    s.input_activations->strategy = ScaleStrategy::kGroup;
    s.input_activations->group_size = s.weights->block_structure[1];
  } else {
    s.weights->strategy = ScaleStrategy::kTensor;
    s.input_activations->strategy = act == "dynamic" ? ScaleStrategy::kToken : ScaleStrategy::kTensor;
  }
  c.schemes.push_back(s);
  // Different releases name the unquantized modules differently; all are honoured.
  for (const char* key : {"ignored_layers", "modules_to_not_convert"}) {
    KVASIR_ASSIGN_OR_RETURN(std::vector<std::string> names, string_list(q, key));
    c.ignore.insert(c.ignore.end(), names.begin(), names.end());
  }
  KVASIR_RETURN_IF_ERROR(check_fp8_scheme(s, q.where()));
  return c;
}

}  // namespace kvasir::quant
