#include "quant/int_quant_scheme.h"

#include <cctype>
#include <regex>

#include "config/hf_keys.h"

namespace kvasir::quant {

namespace {

constexpr const char* kWhere = "config.json: quantization_config";

std::string method_of(const Json& qc) {
  const Json* m = qc.find("quant_method");
  return m != nullptr && m->is_string() ? m->as_string() : "";
}

std::string string_or_empty(const Json* v) { return v != nullptr && v->is_string() ? v->as_string() : ""; }

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

Status check_bits(const HfKeys& k, std::string_view key, int64_t bits, const std::string& method) {
  if (bits == 4 || bits == 8) return Status();
  return unimplemented(k.where() + ": '" + std::string(key) + "' is " + std::to_string(bits) + "; " + method +
                       " weights of 4 or 8 bits are supported");
}

Status check_group_size(const HfKeys& k, int64_t group_size) {
  if (group_size == -1 || group_size >= 1) return Status();
  return k.out_of_range("group_size", std::to_string(group_size), "-1 (one group per row) or a positive integer");
}

StatusOr<IntQuantConfig> parse_gptq(const HfKeys& k) {
  IntWeightScheme s;
  s.layout = IntWeightLayout::kGptq;
  KVASIR_ASSIGN_OR_RETURN(int64_t bits, k.req_int("bits"));
  KVASIR_RETURN_IF_ERROR(check_bits(k, "bits", bits, "GPTQ"));
  s.bits = static_cast<int>(bits);
  KVASIR_ASSIGN_OR_RETURN(s.group_size, k.int_or("group_size", -1));
  KVASIR_RETURN_IF_ERROR(check_group_size(k, s.group_size));
  KVASIR_ASSIGN_OR_RETURN(s.desc_act, k.bool_or("desc_act", false));
  KVASIR_ASSIGN_OR_RETURN(s.sym, k.bool_or("sym", true));
  // GPTQModel writes checkpoint_format; AutoGPTQ and optimum (v1 only) often leave it out.
  KVASIR_ASSIGN_OR_RETURN(std::string format, k.str_or("checkpoint_format", "gptq"));
  if (format == "gptq") {
    s.zero_offset = 1;
  } else if (format == "gptq_v2") {
    s.zero_offset = 0;
  } else {
    return unimplemented(k.where() + ": checkpoint_format '" + format + "' is not supported (gptq, gptq_v2)");
  }
  if (const Json* dyn = k.find("dynamic"); dyn != nullptr && dyn->size() > 0) {
    return unimplemented(k.where() + ": per-module 'dynamic' GPTQ overrides are not supported");
  }
  IntQuantConfig c;
  c.method = "gptq";
  c.groups.push_back({{"Linear"}, s});
  return c;
}

StatusOr<IntQuantConfig> parse_awq(const HfKeys& k) {
  IntWeightScheme s;
  s.layout = IntWeightLayout::kAwqGemm;
  // transformers writes bits / group_size; AutoAWQ's own quant_config.json w_bit / q_group_size.
  KVASIR_ASSIGN_OR_RETURN(int64_t bits, k.find("w_bit") != nullptr ? k.req_int("w_bit") : k.req_int("bits"));
  if (bits != 4) {
    return unimplemented(std::string(kWhere) + ": AWQ weights of " + std::to_string(bits) + " bits; AWQ GEMM packs 4 bits");
  }
  s.bits = 4;
  KVASIR_ASSIGN_OR_RETURN(s.group_size, k.find("q_group_size") != nullptr ? k.req_int("q_group_size")
                                                                         : k.int_or("group_size", -1));
  KVASIR_RETURN_IF_ERROR(check_group_size(k, s.group_size));
  KVASIR_ASSIGN_OR_RETURN(bool zero_point, k.bool_or("zero_point", true));
  if (!zero_point) {
    return unimplemented(std::string(kWhere) + ": AWQ with zero_point false is not supported (AutoAWQ's GEMM layers hold zeros)");
  }
  s.sym = false;
  KVASIR_ASSIGN_OR_RETURN(std::string version, k.str_or("version", "gemm"));
  for (char& ch : version) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (version != "gemm") {
    return unimplemented(std::string(kWhere) + ": AWQ version '" + version + "' is not supported (gemm)");
  }
  IntQuantConfig c;
  c.method = "awq";
  c.groups.push_back({{"Linear"}, s});
  KVASIR_ASSIGN_OR_RETURN(c.ignore, string_list(k, "modules_to_not_convert"));
  return c;
}

// One compressed-tensors config group's "weights" arguments.
StatusOr<IntWeightScheme> parse_ct_weights(const Json& group, const std::string& where) {
  HfKeys g(group, where);
  if (g.find("input_activations") != nullptr || g.find("output_activations") != nullptr) {
    return unimplemented(where + ": activation quantization with pack-quantized integer weights (W4A8 / W8A8 int) "
                         "is not supported; W4A16 and W8A16 are");
  }
  const Json* w = g.find("weights");
  if (w == nullptr || !w->is_object()) return invalid_argument(where + ": 'weights' must be an object");
  HfKeys k(*w, where + ".weights");
  KVASIR_ASSIGN_OR_RETURN(std::string type, k.str_or("type", "int"));
  if (type != "int") return unimplemented(k.where() + ": type '" + type + "' with format pack-quantized (int only)");
  KVASIR_ASSIGN_OR_RETURN(bool dynamic, k.bool_or("dynamic", false));
  if (dynamic) return unimplemented(k.where() + ": dynamic weight quantization is not a stored format");
  IntWeightScheme s;
  s.layout = IntWeightLayout::kPackQuantized;
  KVASIR_ASSIGN_OR_RETURN(int64_t bits, k.req_int("num_bits"));
  KVASIR_RETURN_IF_ERROR(check_bits(k, "num_bits", bits, "pack-quantized"));
  s.bits = static_cast<int>(bits);
  KVASIR_ASSIGN_OR_RETURN(s.sym, k.bool_or("symmetric", true));
  KVASIR_ASSIGN_OR_RETURN(std::string strategy, k.str_or("strategy", "tensor"));
  if (strategy == "group") {
    KVASIR_ASSIGN_OR_RETURN(s.group_size, k.req_positive_int("group_size"));
  } else if (strategy == "channel") {
    s.group_size = -1;
  } else {
    return unimplemented(k.where() + ": strategy '" + strategy + "' is not supported for pack-quantized (group, channel)");
  }
  const Json* actorder = k.find("actorder");
  const std::string order = actorder != nullptr && actorder->is_bool() ? (actorder->as_bool() ? "group" : "")
                                                                        : string_or_empty(actorder);
  if (actorder != nullptr && !actorder->is_bool() && !actorder->is_string()) return k.type_error("actorder", "a string");
  // "group" reorders columns into groups (weight_g_idx); "weight" only changes the quantization order.
  if (!order.empty() && order != "group" && order != "weight" && order != "static" && order != "dynamic") {
    return unimplemented(k.where() + ": actorder '" + order + "' is not supported (group, weight)");
  }
  s.desc_act = order == "group" || order == "dynamic";
  return s;
}

StatusOr<IntQuantConfig> parse_compressed_tensors(const HfKeys& k) {
  IntQuantConfig c;
  c.method = "compressed-tensors";
  KVASIR_ASSIGN_OR_RETURN(std::string top_format, k.str_or("format", ""));
  const Json* groups = k.find("config_groups");
  if (groups == nullptr || !groups->is_object() || groups->size() == 0) {
    return invalid_argument(k.where() + ": 'config_groups' must be a non-empty object");
  }
  for (const auto& [name, group] : groups->as_object()) {
    const std::string where = k.where() + ".config_groups." + name;
    if (!group.is_object()) return invalid_argument(where + ": must be an object");
    HfKeys g(group, where);
    KVASIR_ASSIGN_OR_RETURN(std::string format, g.str_or("format", top_format));
    if (format != "pack-quantized") {
      return unimplemented(where + ": format '" + format + "' mixed with pack-quantized groups is not supported");
    }
    IntQuantConfig::Group out;
    KVASIR_ASSIGN_OR_RETURN(out.targets, string_list(g, "targets"));
    if (out.targets.empty()) return invalid_argument(where + ": 'targets' must list at least one layer");
    KVASIR_ASSIGN_OR_RETURN(out.scheme, parse_ct_weights(group, where));
    c.groups.push_back(std::move(out));
  }
  KVASIR_ASSIGN_OR_RETURN(c.ignore, string_list(k, "ignore"));
  if (const Json* kv = k.find("kv_cache_scheme"); kv != nullptr) {
    return unimplemented(k.where() + ": kv_cache_scheme with pack-quantized weights is not supported");
  }
  // Regexes are compiled here once so a malformed one is refused at load, naming it.
  for (const auto* list : {&c.ignore}) {
    for (const std::string& t : *list) {
      if (t.rfind("re:", 0) != 0) continue;
      try {
        std::regex re(t.substr(3));
      } catch (const std::regex_error&) {
        return invalid_argument(k.where() + ": ignore entry '" + t + "' is not a valid regular expression");
      }
    }
  }
  for (const auto& gr : c.groups) {
    for (const std::string& t : gr.targets) {
      if (t.rfind("re:", 0) != 0) continue;
      try {
        std::regex re(t.substr(3));
      } catch (const std::regex_error&) {
        return invalid_argument(k.where() + ": target '" + t + "' is not a valid regular expression");
      }
    }
  }
  return c;
}

// compressed-tensors' and vLLM's rule: "re:<pattern>" matches from the start of the name; "Linear"
// is the layer class every linear layer has; anything else is the whole name.
bool target_matches(const std::string& target, const std::string& layer) {
  if (target == "Linear") return true;
  if (target.rfind("re:", 0) == 0) {
    return std::regex_search(layer, std::regex(target.substr(3)), std::regex_constants::match_continuous);
  }
  return target == layer;
}

}  // namespace

StatusOr<const IntWeightScheme*> IntQuantConfig::scheme_for(const std::string& layer) const {
  for (const std::string& t : ignore) {
    if (target_matches(t, layer)) {
      return not_found("layer " + layer + " holds " + method + " tensors but the quantization_config ignores it ('" + t + "')");
    }
  }
  for (const Group& g : groups) {
    for (const std::string& t : g.targets) {
      if (target_matches(t, layer)) return &g.scheme;
    }
  }
  return not_found("layer " + layer + " holds " + method + " tensors but no quantization_config group targets it");
}

bool is_int_weight_quantization(const Json& qc) {
  if (!qc.is_object()) return false;
  const std::string method = method_of(qc);
  if (method == "gptq" || method == "awq") return true;
  if (method != "compressed-tensors") return false;
  if (string_or_empty(qc.find("format")) == "pack-quantized") return true;
  const Json* groups = qc.find("config_groups");
  if (groups == nullptr || !groups->is_object()) return false;
  for (const auto& [name, group] : groups->as_object()) {
    if (group.is_object() && string_or_empty(group.find("format")) == "pack-quantized") return true;
  }
  return false;
}

StatusOr<IntQuantConfig> parse_int_quant_config(const Json& qc) {
  if (!qc.is_object()) return invalid_argument(std::string(kWhere) + " must be an object");
  HfKeys k(qc, kWhere);
  const std::string method = method_of(qc);
  if (method == "gptq") return parse_gptq(k);
  if (method == "awq") return parse_awq(k);
  if (method == "compressed-tensors") return parse_compressed_tensors(k);
  return unimplemented(std::string(kWhere) + ": quant_method '" + method + "' is not an integer weight-only method");
}

}  // namespace kvasir::quant
