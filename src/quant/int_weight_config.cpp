// Integer weight-only methods mapped onto QuantizationConfig: quant_method "gptq" (AutoGPTQ /
// GPTQModel / optimum: bits, group_size, desc_act, sym, checkpoint_format), "awq" (AutoAWQ GEMM:
// bits, group_size, zero_point, version; or its own w_bit / q_group_size spelling), and the
// compressed-tensors "pack-quantized" format's scheme checks (W4A16 / W8A16, group or channel).
// Their formats are "gptq" (v1: zeros stored minus one), "gptq_v2", "awq" and "pack-quantized";
// int_weight_scheme.h turns a scheme into the packed layout it reads.
#include <cctype>

#include "quant/quantization_config_parsers.h"

namespace kvasir::quant {
namespace {

Status check_int_bits(const HfKeys& k, std::string_view key, int64_t bits, const std::string& what) {
  if (bits == 4 || bits == 8) return Status();
  return unimplemented(k.where() + ": '" + std::string(key) + "' is " + std::to_string(bits) + "; " + what +
                       " weights of 4 or 8 bits are supported");
}

// group_size -1 (one group per row) is the channel strategy.
StatusOr<QuantArgs> int_args(const HfKeys& k, std::string_view group_key, int64_t bits, bool symmetric) {
  QuantArgs a;
  a.type = NumberType::kInt;
  a.num_bits = static_cast<int>(bits);
  a.symmetric = symmetric;
  KVASIR_ASSIGN_OR_RETURN(int64_t group, k.int_or(group_key, -1));
  if (group != -1 && group < 1) {
    return k.out_of_range(group_key, std::to_string(group), "-1 (one group per row) or a positive integer");
  }
  a.strategy = group == -1 ? ScaleStrategy::kChannel : ScaleStrategy::kGroup;
  a.group_size = group == -1 ? 0 : group;
  return a;
}

QuantizationConfig one_scheme(const std::string& method, const std::string& format, QuantArgs weights) {
  QuantizationConfig c;
  c.method = method;
  QuantScheme s;
  s.targets = {"Linear"};
  s.format = format;
  s.weights = std::move(weights);
  c.schemes.push_back(std::move(s));
  return c;
}

}  // namespace

StatusOr<QuantizationConfig> parse_gptq_config(const HfKeys& q) {
  KVASIR_ASSIGN_OR_RETURN(int64_t bits, q.req_int("bits"));
  KVASIR_RETURN_IF_ERROR(check_int_bits(q, "bits", bits, "GPTQ"));
  KVASIR_ASSIGN_OR_RETURN(bool sym, q.bool_or("sym", true));
  KVASIR_ASSIGN_OR_RETURN(QuantArgs w, int_args(q, "group_size", bits, sym));
  KVASIR_ASSIGN_OR_RETURN(bool desc_act, q.bool_or("desc_act", false));
  if (desc_act) w.actorder = "group";
  // GPTQModel writes checkpoint_format; AutoGPTQ and optimum write v1 and often leave it out.
  KVASIR_ASSIGN_OR_RETURN(std::string format, q.str_or("checkpoint_format", "gptq"));
  if (format != "gptq" && format != "gptq_v2") {
    return unimplemented(q.where() + ": checkpoint_format '" + format.substr(0, 32) + "' is not supported (gptq, gptq_v2)");
  }
  if (const Json* dyn = q.find("dynamic"); dyn != nullptr && dyn->size() > 0) {
    return unimplemented(q.where() + ": per-module 'dynamic' GPTQ overrides are not supported");
  }
  return one_scheme("gptq", format, std::move(w));
}

StatusOr<QuantizationConfig> parse_awq_config(const HfKeys& q) {
  // transformers writes bits / group_size; AutoAWQ's own quant_config.json w_bit / q_group_size.
  const char* bits_key = q.find("w_bit") != nullptr ? "w_bit" : "bits";
  KVASIR_ASSIGN_OR_RETURN(int64_t bits, q.req_int(bits_key));
  if (bits != 4) {
    return unimplemented(q.where() + ": AWQ weights of " + std::to_string(bits) + " bits; AWQ GEMM packs 4 bits");
  }
  KVASIR_ASSIGN_OR_RETURN(bool zero_point, q.bool_or("zero_point", true));
  if (!zero_point) {
    return unimplemented(q.where() + ": AWQ with zero_point false is not supported (AutoAWQ's GEMM layers hold zeros)");
  }
  KVASIR_ASSIGN_OR_RETURN(std::string version, q.str_or("version", "gemm"));
  for (char& ch : version) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (version != "gemm") {
    return unimplemented(q.where() + ": AWQ version '" + version.substr(0, 32) + "' is not supported (gemm)");
  }
  KVASIR_ASSIGN_OR_RETURN(QuantArgs w, int_args(q, q.find("q_group_size") != nullptr ? "q_group_size" : "group_size", 4,
                                                /*symmetric=*/false));
  QuantizationConfig c = one_scheme("awq", "awq", std::move(w));
  KVASIR_ASSIGN_OR_RETURN(c.ignore, string_list(q, "modules_to_not_convert"));
  return c;
}

Status check_pack_quantized_scheme(const QuantScheme& s, const std::string& where) {
  const QuantArgs& w = *s.weights;
  if (w.type != NumberType::kInt) return unimplemented(where + ": format 'pack-quantized' holds integer weights, got float");
  if (w.num_bits != 4 && w.num_bits != 8) {
    return unimplemented(where + ": pack-quantized weights of " + std::to_string(w.num_bits) +
                         " bits; 4 (W4A16) and 8 (W8A16) are supported");
  }
  if (w.dynamic) return invalid_argument(where + ": pack-quantized weights must be static (dynamic is for activations)");
  if (w.strategy != ScaleStrategy::kGroup && w.strategy != ScaleStrategy::kChannel) {
    return unimplemented(where + ": pack-quantized weight scales per group or channel are supported, got '" +
                         scale_strategy_name(w.strategy) + "'");
  }
  if (s.input_activations) {
    return unimplemented(where + ": activation quantization with pack-quantized integer weights (W4A8 / W8A8 int) "
                         "is not supported; W4A16 and W8A16 are");
  }
  return Status();
}

}  // namespace kvasir::quant
