// ModelConfig from Hugging Face config.json (+ generation_config.json). Handles both the
// transformers 4.x spelling (rope_theta / rope_scaling / rope_local_base_freq /
// sliding_window_pattern) and the 5.x one (rope_parameters, per layer type; layer_types), and a
// multimodal wrapper's text_config. Absent keys take the defaults of transformers' config classes.
#include <sys/stat.h>

#include <cmath>

#include "common/json.h"
#include "common/mapped_file.h"
#include "config/model_config.h"
#include "config/model_config_internal.h"

namespace kvasir {

namespace {

using config_detail::ArchTraits;

// Typed access to one JSON object; null counts as absent (HF writes "rope_scaling": null).
class HfKeys {
 public:
  HfKeys(const Json& j, std::string where) : j_(j), where_(std::move(where)) {}

  const Json* find(std::string_view key) const {
    const Json* v = j_.find(key);
    return v == nullptr || v->is_null() ? nullptr : v;
  }
  Status type_error(std::string_view key, const char* want) const {
    return invalid_argument(where_ + ": '" + std::string(key) + "' must be " + want);
  }
  StatusOr<std::optional<int64_t>> opt_int(std::string_view key) const {
    const Json* v = find(key);
    if (v == nullptr) return std::optional<int64_t>();
    auto i = as_integer(*v);
    if (!i) return type_error(key, "an integer");
    return i;
  }
  StatusOr<int64_t> int_or(std::string_view key, int64_t def) const {
    KVASIR_ASSIGN_OR_RETURN(std::optional<int64_t> v, opt_int(key));
    return v.value_or(def);
  }
  StatusOr<int64_t> req_int(std::string_view key) const {
    KVASIR_ASSIGN_OR_RETURN(std::optional<int64_t> v, opt_int(key));
    if (!v)
      return invalid_argument(where_ + ": required key '" + std::string(key) + "' is missing");
    return *v;
  }
  StatusOr<std::optional<double>> opt_num(std::string_view key) const {
    const Json* v = find(key);
    if (v == nullptr) return std::optional<double>();
    if (!v->is_number()) return type_error(key, "a number");
    return std::optional<double>(v->as_double());
  }
  StatusOr<double> num_or(std::string_view key, double def) const {
    KVASIR_ASSIGN_OR_RETURN(std::optional<double> v, opt_num(key));
    return v.value_or(def);
  }
  StatusOr<bool> bool_or(std::string_view key, bool def) const {
    const Json* v = find(key);
    if (v == nullptr) return def;
    if (!v->is_bool()) return type_error(key, "true or false");
    return v->as_bool();
  }
  StatusOr<std::string> str_or(std::string_view key, const std::string& def) const {
    const Json* v = find(key);
    if (v == nullptr) return def;
    if (!v->is_string()) return type_error(key, "a string");
    return v->as_string();
  }
  // An id or a list of ids (eos_token_id may be either); absent => empty.
  StatusOr<std::vector<int64_t>> ids(std::string_view key) const {
    const Json* v = find(key);
    std::vector<int64_t> out;
    if (v == nullptr) return out;
    if (!v->is_array()) {
      auto i = as_integer(*v);
      if (!i) return type_error(key, "an integer or a list of integers");
      out.push_back(*i);
      return out;
    }
    for (const Json& e : v->as_array()) {
      auto i = as_integer(e);
      if (!i) return type_error(key, "an integer or a list of integers");
      out.push_back(*i);
    }
    return out;
  }
  const std::string& where() const { return where_; }

  // Integers, and doubles with an integral value that fits (Json::as_int would not check).
  static std::optional<int64_t> as_integer(const Json& v) {
    if (v.is_int()) return v.as_int();
    if (v.is_number()) {
      const double d = v.as_double();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) {
        return static_cast<int64_t>(d);
      }
    }
    return std::nullopt;
  }

 private:
  const Json& j_;
  std::string where_;
};

StatusOr<const ArchTraits*> hf_family(const std::string& model_type) {
  std::string family = model_type;
  if (family == "gemma3_text") family = "gemma3";
  const ArchTraits* a = config_detail::find_arch(family);
  if (a == nullptr) {
    return unimplemented("config.json: model_type '" + model_type +
                         "' is not supported (supported: " + config_detail::supported_families() +
                         ", gemma3_text)");
  }
  return a;
}

// One rope description: {"rope_type"|"type": ..., "factor": ..., "rope_theta": ...}.
Status parse_rope(const Json& obj, const std::string& where, int64_t max_pos, RopeScaling* rs,
                  std::optional<double>* theta) {
  if (!obj.is_object()) return invalid_argument(where + " must be an object");
  HfKeys k(obj, where);
  KVASIR_ASSIGN_OR_RETURN(std::string type, k.str_or("rope_type", ""));
  if (type.empty()) {
    KVASIR_ASSIGN_OR_RETURN(type, k.str_or("type", "default"));
  }
  KVASIR_ASSIGN_OR_RETURN(*theta, k.opt_num("rope_theta"));
  *rs = RopeScaling();
  if (type == "default") return Status();
  KVASIR_ASSIGN_OR_RETURN(rs->factor, k.num_or("factor", 1.0));
  if (type == "linear") {
    rs->type = RopeScalingType::kLinear;
  } else if (type == "llama3") {
    rs->type = RopeScalingType::kLlama3;
    KVASIR_ASSIGN_OR_RETURN(rs->low_freq_factor, k.num_or("low_freq_factor", 1.0));
    KVASIR_ASSIGN_OR_RETURN(rs->high_freq_factor, k.num_or("high_freq_factor", 4.0));
    KVASIR_ASSIGN_OR_RETURN(rs->original_max_position_embeddings,
                            k.req_int("original_max_position_embeddings"));
  } else if (type == "yarn") {
    rs->type = RopeScalingType::kYarn;
    KVASIR_ASSIGN_OR_RETURN(rs->original_max_position_embeddings,
                            k.int_or("original_max_position_embeddings", max_pos));
    KVASIR_ASSIGN_OR_RETURN(rs->beta_fast, k.num_or("beta_fast", 32.0));
    KVASIR_ASSIGN_OR_RETURN(rs->beta_slow, k.num_or("beta_slow", 1.0));
    KVASIR_ASSIGN_OR_RETURN(rs->attention_factor, k.num_or("attention_factor", 0.0));
  } else {
    return unimplemented(where + ": rope type '" + type + "' is not supported");
  }
  return Status();
}

Status read_rope(const HfKeys& k, const ArchTraits& arch, ModelConfig& c) {
  const bool gemma3 = arch.family == "gemma3";
  std::optional<double> theta, theta_local;
  if (const Json* rp = k.find("rope_parameters")) {  // transformers 5.x
    const Json* full = rp->find("full_attention");
    const Json* sliding = rp->find("sliding_attention");
    if (full != nullptr || sliding != nullptr) {
      if (full != nullptr) {
        KVASIR_RETURN_IF_ERROR(parse_rope(*full, k.where() + ": rope_parameters.full_attention",
                                          c.max_position_embeddings, &c.rope_scaling, &theta));
      }
      if (sliding != nullptr) {
        RopeScaling local;  // local layers are never scaled in the families we run
        KVASIR_RETURN_IF_ERROR(parse_rope(*sliding,
                                          k.where() + ": rope_parameters.sliding_attention",
                                          c.max_position_embeddings, &local, &theta_local));
      }
    } else {
      KVASIR_RETURN_IF_ERROR(parse_rope(*rp, k.where() + ": rope_parameters",
                                        c.max_position_embeddings, &c.rope_scaling, &theta));
    }
  } else if (const Json* rs = k.find("rope_scaling")) {  // transformers 4.x
    std::optional<double> ignored;
    KVASIR_RETURN_IF_ERROR(parse_rope(*rs, k.where() + ": rope_scaling", c.max_position_embeddings,
                                      &c.rope_scaling, &ignored));
  }
  if (!theta) {
    KVASIR_ASSIGN_OR_RETURN(theta, k.opt_num("rope_theta"));
  }
  c.rope_theta = theta.value_or(gemma3 ? 1000000.0 : 10000.0);
  if (!theta_local && gemma3) {
    KVASIR_ASSIGN_OR_RETURN(theta_local, k.opt_num("rope_local_base_freq"));
  }
  c.rope_theta_local = theta_local.value_or(gemma3 ? 10000.0 : c.rope_theta);
  KVASIR_ASSIGN_OR_RETURN(double partial, k.num_or("partial_rotary_factor", 1.0));
  const double rotary = partial * static_cast<double>(c.head_dim);
  if (!(partial > 0 && partial <= 1) || rotary != std::floor(rotary)) {
    return invalid_argument(k.where() + ": partial_rotary_factor " + std::to_string(partial) +
                            " does not give a whole number of dimensions");
  }
  c.rotary_dim = static_cast<int64_t>(rotary);
  return Status();
}

Status read_sliding(const HfKeys& k, const ArchTraits& arch, ModelConfig& c) {
  KVASIR_ASSIGN_OR_RETURN(c.sliding_window, k.int_or("sliding_window", 0));
  const size_t n = static_cast<size_t>(c.num_layers);
  if (const Json* types = k.find("layer_types")) {
    if (!types->is_array() || types->size() != n) {
      return invalid_argument(k.where() + ": layer_types must list one type per layer (" +
                              std::to_string(n) + ")");
    }
    c.layer_is_sliding.clear();
    for (const Json& t : types->as_array()) {
      const std::string s = t.is_string() ? t.as_string() : "";
      if (s != "sliding_attention" && s != "full_attention") {
        return unimplemented(k.where() + ": layer type '" + s + "' is not supported");
      }
      c.layer_is_sliding.push_back(s == "sliding_attention");
    }
  } else if (arch.sliding_period != 0) {  // gemma2 (period 2, fixed), gemma3 (period 6)
    int64_t period = arch.sliding_period;
    if (arch.family == "gemma3") {
      KVASIR_ASSIGN_OR_RETURN(period, k.int_or("_sliding_window_pattern", period));
      KVASIR_ASSIGN_OR_RETURN(period, k.int_or("sliding_window_pattern", period));
    }
    c.layer_is_sliding = config_detail::periodic_sliding(c.num_layers, period);
  } else if (arch.family == "mistral") {
    c.layer_is_sliding.assign(n, c.sliding_window > 0);
  } else if (arch.family == "qwen2" || arch.family == "qwen3") {
    KVASIR_ASSIGN_OR_RETURN(bool use, k.bool_or("use_sliding_window", false));
    KVASIR_ASSIGN_OR_RETURN(int64_t first, k.int_or("max_window_layers", c.num_layers));
    c.layer_is_sliding.assign(n, false);
    for (int64_t i = 0; use && i < c.num_layers; ++i) c.layer_is_sliding[i] = i >= first;
  } else {
    c.layer_is_sliding.assign(n, false);
  }
  bool any = false;
  for (bool b : c.layer_is_sliding) any = any || b;
  if (!any) c.sliding_window = 0;  // qwen2 writes a window it does not use
  return Status();
}

}  // namespace

StatusOr<ModelConfig> ModelConfig::from_hf_json(const Json& config, const Json* generation) {
  if (!config.is_object()) return invalid_argument("config.json: not a JSON object");
  const Json* text = config.find("text_config");
  const Json& cfg = text != nullptr && text->is_object() ? *text : config;
  HfKeys k(cfg, "config.json");
  KVASIR_ASSIGN_OR_RETURN(std::string model_type,
                          HfKeys(config, "config.json").str_or("model_type", ""));
  if (&cfg != &config) {
    KVASIR_ASSIGN_OR_RETURN(model_type, k.str_or("model_type", model_type));
  }
  if (model_type.empty()) return invalid_argument("config.json: model_type is missing");
  KVASIR_ASSIGN_OR_RETURN(const ArchTraits* arch, hf_family(model_type));

  ModelConfig c;
  c.architecture = std::string(arch->family);
  KVASIR_ASSIGN_OR_RETURN(c.vocab_size, k.req_int("vocab_size"));
  KVASIR_ASSIGN_OR_RETURN(c.hidden_size, k.req_int("hidden_size"));
  KVASIR_ASSIGN_OR_RETURN(c.intermediate_size, k.req_int("intermediate_size"));
  KVASIR_ASSIGN_OR_RETURN(c.num_layers, k.req_int("num_hidden_layers"));
  KVASIR_ASSIGN_OR_RETURN(c.num_heads, k.req_int("num_attention_heads"));
  KVASIR_ASSIGN_OR_RETURN(c.num_kv_heads, k.int_or("num_key_value_heads", c.num_heads));
  KVASIR_ASSIGN_OR_RETURN(c.max_position_embeddings, k.req_int("max_position_embeddings"));
  KVASIR_ASSIGN_OR_RETURN(c.rms_norm_eps, k.num_or("rms_norm_eps", 1e-6));
  KVASIR_RETURN_IF_ERROR(config_detail::check_basic_sizes(c));
  KVASIR_ASSIGN_OR_RETURN(std::optional<int64_t> head_dim, k.opt_int("head_dim"));
  if (head_dim) {
    c.head_dim = *head_dim;
  } else {
    c.head_dim = c.hidden_size / c.num_heads;
    if (c.head_dim * c.num_heads != c.hidden_size) {
      return invalid_argument("config.json: hidden_size " + std::to_string(c.hidden_size) +
                              " is not a multiple of num_attention_heads " +
                              std::to_string(c.num_heads) + " and head_dim is not given");
    }
  }
  KVASIR_RETURN_IF_ERROR(read_rope(k, *arch, c));
  c.rope_style = RopeStyle::kNeox;  // HF weights are never permuted
  KVASIR_RETURN_IF_ERROR(read_sliding(k, *arch, c));

  KVASIR_ASSIGN_OR_RETURN(c.attn_logit_softcapping, k.opt_num("attn_logit_softcapping"));
  KVASIR_ASSIGN_OR_RETURN(c.final_logit_softcapping, k.opt_num("final_logit_softcapping"));
  KVASIR_ASSIGN_OR_RETURN(c.query_pre_attn_scalar,
                          k.num_or("query_pre_attn_scalar", static_cast<double>(c.head_dim)));
  c.qk_norm = arch->qk_norm;
  c.post_block_norms = arch->post_block_norms;
  KVASIR_ASSIGN_OR_RETURN(c.attention_bias, k.bool_or("attention_bias", arch->attention_bias));
  if (arch->family == "qwen2") c.attention_bias = true;  // Qwen2 hard-codes q/k/v biases
  KVASIR_ASSIGN_OR_RETURN(
      c.tie_word_embeddings,
      HfKeys(config, "config.json").bool_or("tie_word_embeddings", arch->tie_embeddings));
  KVASIR_ASSIGN_OR_RETURN(c.tie_word_embeddings,
                          k.bool_or("tie_word_embeddings", c.tie_word_embeddings));
  // HF Gemma multiplies by sqrt(hidden) rounded to the activation dtype (25.25 in bf16 for 640);
  // we keep the exact value and let the model round if it wants bit-parity.
  c.embedding_scale = arch->gemma ? std::sqrt(static_cast<double>(c.hidden_size)) : 1.0;
  c.norm_weight_offset = arch->gemma ? 1.0 : 0.0;  // HF Gemma RMSNorm: x * (1 + w)

  KVASIR_ASSIGN_OR_RETURN(std::string act, k.str_or("hidden_activation", ""));
  if (act.empty()) {
    KVASIR_ASSIGN_OR_RETURN(act,
                            k.str_or("hidden_act", arch->gemma ? "gelu_pytorch_tanh" : "silu"));
  }
  if (act == "silu" || act == "swish") {
    c.activation = Activation::kSilu;
  } else if (act == "gelu_pytorch_tanh" || act == "gelu_tanh" || act == "gelu_new" ||
             (arch->gemma && act == "gelu")) {  // HF Gemma overrides exact gelu with the tanh form
    c.activation = Activation::kGeluTanh;
  } else {
    return unimplemented("config.json: activation '" + act + "' is not supported");
  }

  KVASIR_ASSIGN_OR_RETURN(std::vector<int64_t> bos, k.ids("bos_token_id"));
  KVASIR_ASSIGN_OR_RETURN(std::vector<int64_t> pad, k.ids("pad_token_id"));
  KVASIR_ASSIGN_OR_RETURN(c.eos_token_ids, k.ids("eos_token_id"));
  if (generation != nullptr && generation->is_object()) {
    HfKeys g(*generation, "generation_config.json");
    KVASIR_ASSIGN_OR_RETURN(std::vector<int64_t> geos, g.ids("eos_token_id"));
    if (!geos.empty()) c.eos_token_ids = geos;
    if (bos.empty()) {
      KVASIR_ASSIGN_OR_RETURN(bos, g.ids("bos_token_id"));
    }
    if (pad.empty()) {
      KVASIR_ASSIGN_OR_RETURN(pad, g.ids("pad_token_id"));
    }
  }
  if (bos.size() > 1 || pad.size() > 1) {
    return invalid_argument("config.json: bos_token_id and pad_token_id must be single ids");
  }
  c.bos_token_id = bos.empty() ? -1 : bos[0];
  c.pad_token_id = pad.empty() ? -1 : pad[0];
  KVASIR_RETURN_IF_ERROR(c.validate());
  return c;
}

StatusOr<ModelConfig> ModelConfig::from_hf_dir(const std::string& dir) {
  const std::string config_path = dir + "/config.json";
  KVASIR_ASSIGN_OR_RETURN(std::string text, read_text_file(config_path, 16u << 20));
  auto config = parse_json(text);
  if (!config.ok()) {
    return invalid_argument(config_path + ": not valid JSON: " + config.status().message());
  }
  const std::string gen_path = dir + "/generation_config.json";
  std::optional<Json> generation;
  struct stat st {};
  if (::stat(gen_path.c_str(), &st) == 0) {
    KVASIR_ASSIGN_OR_RETURN(std::string gen_text, read_text_file(gen_path, 16u << 20));
    auto gen = parse_json(gen_text);
    if (!gen.ok())
      return invalid_argument(gen_path + ": not valid JSON: " + gen.status().message());
    generation = std::move(gen).value();
  }
  auto c = from_hf_json(*config, generation ? &*generation : nullptr);
  if (!c.ok()) return Status(c.status().code(), dir + ": " + c.status().message());
  return c;
}

}  // namespace kvasir
