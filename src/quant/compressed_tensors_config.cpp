// compressed-tensors' quantization_config (what llm-compressor writes): config_groups of targets
// with weight / input-activation QuantizationArgs and a storage format, the ignore list, the KV
// cache scheme. Each storage format we run has a checker in kFormats; any other is refused
// naming it.
#include <regex>

#include "quant/quantization_config_parsers.h"

namespace kvasir::quant {
namespace {

using FormatCheck = Status (*)(const QuantScheme&, const std::string& where);

struct FormatEntry {
  const char* name;
  FormatCheck check;
};

// float-quantized: float8_e4m3fn weights with their scales. naive-quantized: the same bytes
// (weights stored in the quantized type, no packing) under its older name.
constexpr FormatEntry kFormats[] = {
    {"float-quantized", check_fp8_scheme},
    {"naive-quantized", check_fp8_scheme},
    {"pack-quantized", check_pack_quantized_scheme},
};

Status check_patterns(const std::vector<std::string>& patterns, const std::string& where) {
  for (const std::string& p : patterns) {
    if (p.rfind("re:", 0) != 0) continue;
    try {
      std::regex r(p.substr(3));
    } catch (const std::regex_error&) {
      return invalid_argument(where + ": '" + p.substr(0, 80) + "' is not a valid regular expression");
    }
  }
  return Status();
}

StatusOr<std::optional<QuantArgs>> optional_args(const HfKeys& k, std::string_view key) {
  const Json* v = k.find(key);
  if (v == nullptr) return std::optional<QuantArgs>();
  if (!v->is_object()) return k.type_error(key, "an object or null");
  KVASIR_ASSIGN_OR_RETURN(QuantArgs a, parse_quant_args(HfKeys(*v, k.where() + "." + std::string(key))));
  return std::optional<QuantArgs>(a);
}

Status check_format(const QuantScheme& s, const std::string& where) {
  for (const FormatEntry& f : kFormats) {
    if (s.format == f.name) return f.check(s, where);
  }
  std::string names;
  for (const FormatEntry& f : kFormats) names += (names.empty() ? "" : ", ") + std::string(f.name);
  return unimplemented(where + ": compressed-tensors format '" + s.format.substr(0, 64) +
                       "' is not supported (supported: " + names + ")");
}

StatusOr<QuantScheme> parse_group(const HfKeys& g, const std::string& top_format) {
  QuantScheme s;
  KVASIR_ASSIGN_OR_RETURN(s.targets, string_list(g, "targets"));
  if (s.targets.empty()) return invalid_argument(g.where() + ": 'targets' must list at least one module");
  KVASIR_RETURN_IF_ERROR(check_patterns(s.targets, g.where() + ".targets"));
  KVASIR_ASSIGN_OR_RETURN(s.weights, optional_args(g, "weights"));
  KVASIR_ASSIGN_OR_RETURN(s.input_activations, optional_args(g, "input_activations"));
  if (g.find("output_activations") != nullptr) {
    return unimplemented(g.where() + ": output activation quantization is not supported");
  }
  if (!s.weights) return unimplemented(g.where() + ": activation-only quantization (no 'weights') is not supported");
  KVASIR_ASSIGN_OR_RETURN(s.format, g.str_or("format", top_format));
  if (s.format.empty() || s.format == "mixed-precision") {
    return invalid_argument(g.where() + ": no storage format (neither the group nor the config says 'format')");
  }
  KVASIR_RETURN_IF_ERROR(check_format(s, g.where()));
  return s;
}

// kv_cache_scheme: FP8 K and V with one static scale per layer and tensor (k_scale, v_scale).
Status check_kv_cache_scheme(const QuantArgs& a, const std::string& where) {
  if (a.type != NumberType::kFloat || a.num_bits != 8) {
    return unimplemented(where + ": only float 8-bit KV cache scales are supported, got " +
                         std::string(a.type == NumberType::kFloat ? "float" : "int") + " " + std::to_string(a.num_bits) + "-bit");
  }
  if (a.strategy != ScaleStrategy::kTensor || a.dynamic || !a.symmetric) {
    return unimplemented(where + ": only static symmetric per-tensor KV cache scales are supported, got strategy '" +
                         std::string(scale_strategy_name(a.strategy)) + "'" + (a.dynamic ? ", dynamic" : "") +
                         (a.symmetric ? "" : ", asymmetric"));
  }
  return Status();
}

}  // namespace

StatusOr<QuantizationConfig> parse_compressed_tensors_config(const HfKeys& q) {
  QuantizationConfig c;
  c.method = "compressed-tensors";
  KVASIR_ASSIGN_OR_RETURN(std::string status, q.str_or("quantization_status", "compressed"));
  if (status != "compressed") {
    return unimplemented(q.where() + ": quantization_status '" + status.substr(0, 32) +
                         "' (only 'compressed' checkpoints are read)");
  }
  if (const Json* sp = q.find("sparsity_config"); sp != nullptr && sp->is_object() && sp->size() > 0) {
    const std::string f = sp->get_string("format", "");
    if (!f.empty() && f != "dense") return unimplemented(q.where() + ": sparsity format '" + f.substr(0, 64) + "' is not supported");
  }
  if (const Json* t = q.find("transform_config"); t != nullptr && t->is_object() && t->size() > 0) {
    return unimplemented(q.where() + ": transform_config (rotations such as SpinQuant / QuIP) is not supported");
  }
  KVASIR_ASSIGN_OR_RETURN(std::string top_format, q.str_or("format", ""));
  KVASIR_ASSIGN_OR_RETURN(c.ignore, string_list(q, "ignore"));
  KVASIR_RETURN_IF_ERROR(check_patterns(c.ignore, q.where() + ".ignore"));
  const Json* groups = q.find("config_groups");
  if (groups == nullptr || !groups->is_object() || groups->size() == 0) {
    return invalid_argument(q.where() + ": 'config_groups' must be an object of at least one group");
  }
  for (const auto& [name, g] : groups->as_object()) {
    const std::string where = q.where() + ".config_groups." + name.substr(0, 64);
    if (!g.is_object()) return invalid_argument(where + " must be an object");
    KVASIR_ASSIGN_OR_RETURN(QuantScheme s, parse_group(HfKeys(g, where), top_format));
    c.schemes.push_back(std::move(s));
  }
  if (const Json* kv = q.find("kv_cache_scheme")) {
    if (!kv->is_object()) return q.type_error("kv_cache_scheme", "an object or null");
    const std::string where = q.where() + ".kv_cache_scheme";
    KVASIR_ASSIGN_OR_RETURN(QuantArgs a, parse_quant_args(HfKeys(*kv, where)));
    KVASIR_RETURN_IF_ERROR(check_kv_cache_scheme(a, where));
    c.kv_cache = a;
  }
  return c;
}

}  // namespace kvasir::quant
