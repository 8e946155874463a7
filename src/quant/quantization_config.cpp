// The quant_method dispatch and what every method's parser shares (QuantizationArgs, name lists,
// target matching). A method joins by adding its parser to kMethods.
#include "quant/quantization_config.h"

#include <regex>

#include "quant/quantization_config_parsers.h"

namespace kvasir::quant {
namespace {

using MethodParser = StatusOr<QuantizationConfig> (*)(const HfKeys&);

struct MethodEntry {
  const char* name;
  MethodParser parse;
};

constexpr MethodEntry kMethods[] = {
    {"compressed-tensors", parse_compressed_tensors_config},
    {"fp8", parse_fp8_config},
    {"gptq", parse_gptq_config},
    {"awq", parse_awq_config},
};

std::string quoted(const std::string& s) { return "'" + s.substr(0, 64) + "'"; }

StatusOr<ScaleStrategy> parse_strategy(const HfKeys& a) {
  KVASIR_ASSIGN_OR_RETURN(std::string s, a.str_or("strategy", "tensor"));
  if (s == "tensor") return ScaleStrategy::kTensor;
  if (s == "channel") return ScaleStrategy::kChannel;
  if (s == "group") return ScaleStrategy::kGroup;
  if (s == "block") return ScaleStrategy::kBlock;
  if (s == "token") return ScaleStrategy::kToken;
  if (s == "tensor_group" || s == "attn_head") {
    return unimplemented(a.where() + ": scale strategy " + quoted(s) + " (NVFP4 / per-head scales) is not supported");
  }
  return a.out_of_range("strategy", quoted(s), "one of tensor, channel, group, block, token");
}

}  // namespace

const char* scale_strategy_name(ScaleStrategy s) {
  switch (s) {
    case ScaleStrategy::kTensor: return "tensor";
    case ScaleStrategy::kChannel: return "channel";
    case ScaleStrategy::kGroup: return "group";
    case ScaleStrategy::kBlock: return "block";
    case ScaleStrategy::kToken: return "token";
  }
  return "unknown";
}

StatusOr<std::vector<std::string>> string_list(const HfKeys& k, std::string_view key) {
  std::vector<std::string> out;
  const Json* v = k.find(key);
  if (v == nullptr) return out;
  if (!v->is_array()) return k.type_error(key, "a list of strings");
  for (const Json& e : v->as_array()) {
    if (!e.is_string()) return k.type_error(key, "a list of strings");
    out.push_back(e.as_string());
  }
  return out;
}

StatusOr<QuantArgs> parse_quant_args(const HfKeys& a) {
  QuantArgs q;
  KVASIR_ASSIGN_OR_RETURN(int64_t bits, a.int_or("num_bits", 8));
  if (bits < 1 || bits > 16) return a.out_of_range("num_bits", std::to_string(bits), "1 to 16");
  q.num_bits = static_cast<int>(bits);
  KVASIR_ASSIGN_OR_RETURN(std::string type, a.str_or("type", "int"));
  if (type == "float") {
    q.type = NumberType::kFloat;
  } else if (type == "int") {
    q.type = NumberType::kInt;
  } else {
    return a.out_of_range("type", quoted(type), "'int' or 'float'");
  }
  KVASIR_ASSIGN_OR_RETURN(q.symmetric, a.bool_or("symmetric", true));
  KVASIR_ASSIGN_OR_RETURN(q.strategy, parse_strategy(a));
  if (const Json* d = a.find("dynamic"); d != nullptr && d->is_string()) {
    // "local": NVFP4's two-level activation scales.
    return unimplemented(a.where() + ": dynamic " + quoted(d->as_string()) + " activation scales are not supported");
  }
  KVASIR_ASSIGN_OR_RETURN(q.dynamic, a.bool_or("dynamic", false));
  KVASIR_ASSIGN_OR_RETURN(std::optional<int64_t> group, a.opt_int("group_size"));
  if (group && *group != -1 && *group < 1) return a.out_of_range("group_size", std::to_string(*group), "positive");
  q.group_size = group && *group > 0 ? *group : 0;
  if (q.strategy == ScaleStrategy::kGroup && q.group_size == 0) {
    return invalid_argument(a.where() + ": strategy 'group' needs a positive group_size");
  }
  if (const Json* b = a.find("block_structure")) {
    if (!b->is_array() || b->size() != 2) return a.type_error("block_structure", "a list of two positive integers");
    for (const Json& e : b->as_array()) {
      auto v = HfKeys::as_integer(e);
      if (!v || *v < 1) return a.type_error("block_structure", "a list of two positive integers");
      q.block_structure.push_back(*v);
    }
  }
  if (q.strategy == ScaleStrategy::kBlock && q.block_structure.empty()) {
    return invalid_argument(a.where() + ": strategy 'block' needs block_structure [rows, cols]");
  }
  if (const Json* o = a.find("actorder"); o != nullptr && !(o->is_bool() && !o->as_bool())) {
    if (o->is_bool()) {
      q.actorder = "group";  // true meant group ordering before compressed-tensors named them
    } else if (o->is_string() && (o->as_string() == "group" || o->as_string() == "weight" ||
                                  o->as_string() == "static" || o->as_string() == "dynamic")) {
      q.actorder = o->as_string();
    } else {
      return a.type_error("actorder", "null, false, true, 'group', 'weight', 'static' or 'dynamic'");
    }
  }
  return q;
}

StatusOr<QuantizationConfig> parse_quantization_config(const Json& q, const std::string& where) {
  if (!q.is_object()) return invalid_argument(where + " must be an object");
  const HfKeys keys(q, where);
  KVASIR_ASSIGN_OR_RETURN(std::string method, keys.str_or("quant_method", ""));
  if (method.empty()) return invalid_argument(where + ": 'quant_method' is missing");
  for (const MethodEntry& m : kMethods) {
    if (method == m.name) return m.parse(keys);
  }
  std::string names;
  for (const std::string& n : supported_quant_methods()) names += (names.empty() ? "" : ", ") + n;
  return unimplemented(where + ": quant_method " + quoted(method) + " is not supported (supported: " + names + ")");
}

std::vector<std::string> supported_quant_methods() {
  std::vector<std::string> out;
  for (const MethodEntry& m : kMethods) out.emplace_back(m.name);
  return out;
}

StatusOr<std::optional<QuantizationConfig>> online_quantization(const std::string& name) {
  if (name.empty() || name == "none") return std::optional<QuantizationConfig>();
  if (name != "fp8") {
    return invalid_argument("--quantization " + quoted(name) +
                            ": only 'fp8' quantizes at load; a quantized checkpoint says its method in config.json");
  }
  QuantizationConfig c;
  c.method = "fp8";
  QuantScheme s;
  s.targets = {"Linear"};
  s.format = "online";
  s.weights = QuantArgs{};
  s.weights->strategy = ScaleStrategy::kChannel;
  s.input_activations = QuantArgs{};
  s.input_activations->strategy = ScaleStrategy::kToken;
  s.input_activations->dynamic = true;
  c.schemes.push_back(s);
  c.ignore = {"lm_head"};  // as vLLM: the output projection stays in the checkpoint's precision
  return std::optional<QuantizationConfig>(std::move(c));
}

StatusOr<std::string> quantization_flag_method(const std::string& name) {
  if (name.empty() || name == "none") return std::string();
  if (name == "gptq_marlin") return std::string("gptq");
  if (name == "awq_marlin") return std::string("awq");
  for (const std::string& m : supported_quant_methods()) {
    if (m == name) return name;
  }
  std::string known;
  for (const std::string& m : supported_quant_methods()) known += (known.empty() ? "" : ", ") + m;
  return invalid_argument("--quantization " + quoted(name) + ": unknown method (supported: " + known +
                          ", gptq_marlin, awq_marlin)");
}

bool module_matches(const std::string& pattern, const std::string& module) {
  if (pattern.rfind("re:", 0) == 0) {
    try {
      return std::regex_search(module, std::regex(pattern.substr(3)), std::regex_constants::match_continuous);
    } catch (const std::regex_error&) {
      return false;  // parsers reject bad patterns; a match never throws past here
    }
  }
  return pattern == module;
}

const QuantScheme* scheme_for_module(const QuantizationConfig& c, const std::string& module, bool is_linear) {
  for (const std::string& p : c.ignore) {
    if (module_matches(p, module)) return nullptr;
  }
  // A target naming the module wins over the "Linear" type target, as in compressed-tensors.
  const QuantScheme* by_type = nullptr;
  for (const QuantScheme& s : c.schemes) {
    for (const std::string& t : s.targets) {
      if (t == "Linear") {
        if (is_linear && by_type == nullptr) by_type = &s;
      } else if (module_matches(t, module)) {
        return &s;
      }
    }
  }
  return by_type;
}

}  // namespace kvasir::quant
