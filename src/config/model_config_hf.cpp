// ModelConfig from Hugging Face config.json (+ generation_config.json). Handles both the
// transformers 4.x spelling (rope_theta / rope_scaling / rope_local_base_freq /
// sliding_window_pattern) and the 5.x one (rope_parameters, per layer type; layer_types), and a
// multimodal wrapper's text_config. Absent keys take the defaults of transformers' config classes.
#include <sys/stat.h>

#include <cmath>

#include "common/json.h"
#include "common/mapped_file.h"
#include "common/quoted_text.h"
#include "config/config_readers.h"
#include "config/hf_keys.h"
#include "config/model_config_internal.h"

namespace kvasir {

namespace {

// One rope description: {"rope_type"|"type": ..., "factor": ..., "rope_theta": ...}.
Status parse_rope(const Json& obj, const std::string& where, int64_t max_pos, RopeScaling* rs,
                  std::optional<double>* theta, std::optional<double>* partial = nullptr) {
  if (!obj.is_object()) return invalid_argument(where + " must be an object");
  HfKeys k(obj, where);
  KVASIR_ASSIGN_OR_RETURN(std::string type, k.str_or("rope_type", ""));
  if (type.empty()) {
    KVASIR_ASSIGN_OR_RETURN(type, k.str_or("type", "default"));
  }
  KVASIR_ASSIGN_OR_RETURN(*theta, k.opt_num("rope_theta"));
  if (partial != nullptr) {  // transformers 5.x keeps partial_rotary_factor here
    KVASIR_ASSIGN_OR_RETURN(*partial, k.opt_num("partial_rotary_factor"));
  }
  *rs = RopeScaling();
  if (type == "default") return Status();
  // A factor the file gives must scale: 0 (longrope would take it for "derive it"), a negative
  // number or an infinity never is one.
  KVASIR_ASSIGN_OR_RETURN(std::optional<double> factor, k.opt_num("factor"));
  if (factor && !(*factor > 0 && std::isfinite(*factor))) {
    return k.out_of_range("factor", HfKeys::number_text(*factor), "a positive finite number");
  }
  rs->factor = factor.value_or(1.0);
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
    KVASIR_ASSIGN_OR_RETURN(rs->truncate, k.bool_or("truncate", true));
    KVASIR_ASSIGN_OR_RETURN(rs->attention_factor, k.num_or("attention_factor", 0.0));
  } else if (type == "longrope" || type == "su") {
    rs->type = RopeScalingType::kLongrope;
    KVASIR_ASSIGN_OR_RETURN(rs->short_factor, k.numbers("short_factor"));
    KVASIR_ASSIGN_OR_RETURN(rs->long_factor, k.numbers("long_factor"));
    // 0 until read_rope knows the original length: factor and attention_factor derive from it.
    KVASIR_ASSIGN_OR_RETURN(rs->original_max_position_embeddings,
                            k.int_or("original_max_position_embeddings", 0));
    rs->factor = factor.value_or(0.0);
    KVASIR_ASSIGN_OR_RETURN(rs->attention_factor, k.num_or("attention_factor", 0.0));
  } else {
    return unimplemented(where + ": rope type '" + quoted_text(type) + "' is not supported");
  }
  return Status();
}

// Older LLaMA conversions write "pad_token_id": -1 for "no padding token"; transformers takes it.
// No other id may be negative, and none may lie outside the vocabulary.
constexpr int64_t kNoPadToken = -1;

// The ids of `key` (one or a list), each checked against the vocabulary, naming file and key.
StatusOr<std::vector<int64_t>> token_ids(const HfKeys& k, std::string_view key, int64_t vocab_size) {
  KVASIR_ASSIGN_OR_RETURN(std::vector<int64_t> ids, k.ids(key));
  for (int64_t id : ids) {
    if (key == "pad_token_id" && id == kNoPadToken) continue;
    if (id < 0 || id >= vocab_size) {
      return k.out_of_range(key, std::to_string(id),
                            "a token id in [0, vocab_size " + std::to_string(vocab_size) + ")");
    }
  }
  return ids;
}

Status read_rope(const HfKeys& k, const ConfigTraits& arch, ModelConfig& c) {
  const bool own_local = arch.rope_theta_local.has_value();
  std::optional<double> theta, theta_local, partial;
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
                                        c.max_position_embeddings, &c.rope_scaling, &theta,
                                        &partial));
    }
  } else if (const Json* rs = k.find("rope_scaling")) {  // transformers 4.x
    std::optional<double> ignored;
    KVASIR_RETURN_IF_ERROR(parse_rope(*rs, k.where() + ": rope_scaling", c.max_position_embeddings,
                                      &c.rope_scaling, &ignored));
  }
  if (c.rope_scaling.type == RopeScalingType::kLongrope) {
    // transformers: a top-level original_max_position_embeddings wins over the rope dict's; the
    // factor defaults to max / original positions, the magnitude scaling to the paper's formula.
    RopeScaling& s = c.rope_scaling;
    KVASIR_ASSIGN_OR_RETURN(std::optional<int64_t> top, k.opt_int("original_max_position_embeddings"));
    if (top) s.original_max_position_embeddings = *top;
    if (s.original_max_position_embeddings < 0 || (top && *top == 0)) {
      return k.out_of_range("original_max_position_embeddings",
                            std::to_string(s.original_max_position_embeddings), "a positive integer");
    }
    if (s.original_max_position_embeddings == 0) s.original_max_position_embeddings = c.max_position_embeddings;
    if (s.factor == 0.0) {
      s.factor = static_cast<double>(c.max_position_embeddings) /
                 static_cast<double>(s.original_max_position_embeddings);
    }
    if (s.attention_factor == 0.0) {
      s.attention_factor =
          s.factor <= 1.0 ? 1.0
                          : std::sqrt(1.0 + std::log(s.factor) /
                                                std::log(static_cast<double>(
                                                    s.original_max_position_embeddings)));
    }
  }
  if (!theta) {
    KVASIR_ASSIGN_OR_RETURN(theta, k.opt_num("rope_theta"));
  }
  c.rope_theta = theta.value_or(arch.rope_theta);
  if (!theta_local && own_local) {
    KVASIR_ASSIGN_OR_RETURN(theta_local, k.opt_num("rope_local_base_freq"));
  }
  c.rope_theta_local = theta_local.value_or(own_local ? *arch.rope_theta_local : c.rope_theta);
  if (!partial) {
    KVASIR_ASSIGN_OR_RETURN(partial, k.opt_num("partial_rotary_factor"));
  }
  const double part = partial.value_or(1.0);
  const double rotary = part * static_cast<double>(c.head_dim);
  if (!(part > 0 && part <= 1) || rotary != std::floor(rotary)) {
    return invalid_argument(k.where() + ": partial_rotary_factor " + std::to_string(part) +
                            " does not give a whole number of dimensions");
  }
  c.rotary_dim = static_cast<int64_t>(rotary);
  return Status();
}

Status read_sliding(const HfKeys& k, const ConfigTraits& arch, ModelConfig& c) {
  KVASIR_ASSIGN_OR_RETURN(c.sliding_window, k.int_or("sliding_window", 0));
  if (c.sliding_window < 0) {  // null means none; a negative window is no window size at all
    return k.out_of_range("sliding_window", std::to_string(c.sliding_window), ">= 0 (or null)");
  }
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
        return unimplemented(k.where() + ": layer type '" + quoted_text(s) + "' is not supported");
      }
      c.layer_is_sliding.push_back(s == "sliding_attention");
    }
  } else if (arch.sliding == SlidingLayers::kPeriodic) {  // gemma2 (2, fixed), gemma3 (6)
    int64_t period = arch.sliding_period;
    if (arch.sliding_period_in_config) {
      // A period below 1 would make every layer slide (periodic_sliding's "no global layer").
      KVASIR_ASSIGN_OR_RETURN(period, k.positive_int_or("_sliding_window_pattern", period));
      KVASIR_ASSIGN_OR_RETURN(period, k.positive_int_or("sliding_window_pattern", period));
    }
    c.layer_is_sliding = config_detail::periodic_sliding(c.num_layers, period);
  } else if (arch.sliding == SlidingLayers::kAll) {
    c.layer_is_sliding.assign(n, c.sliding_window > 0);
  } else if (arch.sliding == SlidingLayers::kAfterMaxWindowLayer) {
    KVASIR_ASSIGN_OR_RETURN(bool use, k.bool_or("use_sliding_window", false));
    KVASIR_ASSIGN_OR_RETURN(int64_t first, k.int_or("max_window_layers", c.num_layers));
    if (first < 0) return k.out_of_range("max_window_layers", std::to_string(first), ">= 0");
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

const Json& hf_text_config(const Json& config) {
  const Json* text = config.find("text_config");
  return text != nullptr && text->is_object() ? *text : config;
}

StatusOr<HfModelId> hf_model_id(const Json& config) {
  if (!config.is_object()) return invalid_argument("config.json: not a JSON object");
  const Json& cfg = hf_text_config(config);
  HfModelId id;
  KVASIR_ASSIGN_OR_RETURN(id.model_type, HfKeys(config, "config.json").str_or("model_type", ""));
  if (&cfg != &config) {
    KVASIR_ASSIGN_OR_RETURN(id.model_type, HfKeys(cfg, "config.json").str_or("model_type", id.model_type));
  }
  for (const Json* obj : {&cfg, &config}) {
    const Json* a = obj->find("architectures");
    if (a == nullptr || !a->is_array() || !id.architectures.empty()) continue;
    for (const Json& name : a->as_array()) {
      if (name.is_string()) id.architectures.push_back(name.as_string());
    }
  }
  if (id.model_type.empty() && id.architectures.empty()) {
    return invalid_argument("config.json: model_type is missing");
  }
  return id;
}

StatusOr<ModelConfig> read_hf_config(const Json& config, const Json* generation,
                                     const ConfigTraits& traits) {
  if (!config.is_object()) return invalid_argument("config.json: not a JSON object");
  const ConfigTraits* arch = &traits;
  const Json& cfg = hf_text_config(config);
  HfKeys k(cfg, "config.json");
  ModelConfig c;
  c.architecture = std::string(arch->family);
  // Sizes are checked here, by their config.json names; their upper bounds in validate().
  KVASIR_ASSIGN_OR_RETURN(c.vocab_size, k.req_positive_int("vocab_size"));
  KVASIR_ASSIGN_OR_RETURN(c.hidden_size, k.req_positive_int("hidden_size"));
  KVASIR_ASSIGN_OR_RETURN(c.intermediate_size, k.req_positive_int("intermediate_size"));
  KVASIR_ASSIGN_OR_RETURN(c.num_layers, k.req_positive_int("num_hidden_layers"));
  KVASIR_ASSIGN_OR_RETURN(c.num_heads, k.req_positive_int("num_attention_heads"));
  KVASIR_ASSIGN_OR_RETURN(c.num_kv_heads, k.positive_int_or("num_key_value_heads", c.num_heads));
  KVASIR_ASSIGN_OR_RETURN(c.max_position_embeddings, k.req_positive_int("max_position_embeddings"));
  KVASIR_ASSIGN_OR_RETURN(c.rms_norm_eps, k.num_or("rms_norm_eps", 1e-6));
  KVASIR_RETURN_IF_ERROR(config_detail::check_basic_sizes(c));
  KVASIR_ASSIGN_OR_RETURN(std::optional<int64_t> head_dim, k.opt_int("head_dim"));
  if (head_dim) {
    if (*head_dim < 1) return k.out_of_range("head_dim", std::to_string(*head_dim), "a positive integer");
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
  if (arch->attention_bias_always) c.attention_bias = true;  // Qwen2 hard-codes q/k/v biases
  KVASIR_ASSIGN_OR_RETURN(
      c.tie_word_embeddings,
      HfKeys(config, "config.json").bool_or("tie_word_embeddings", arch->tie_embeddings));
  KVASIR_ASSIGN_OR_RETURN(c.tie_word_embeddings,
                          k.bool_or("tie_word_embeddings", c.tie_word_embeddings));
  // HF Gemma multiplies by sqrt(hidden) rounded to the activation dtype (25.25 in bf16 for 640);
  // we keep the exact value and let the model round if it wants bit-parity.
  c.embedding_scale = arch->scale_embeddings ? std::sqrt(static_cast<double>(c.hidden_size)) : 1.0;
  c.norm_weight_offset = arch->hf_norm_plus_one ? 1.0 : 0.0;  // HF Gemma RMSNorm: x * (1 + w)

  KVASIR_ASSIGN_OR_RETURN(std::string act, k.str_or("hidden_activation", ""));
  if (act.empty()) {
    KVASIR_ASSIGN_OR_RETURN(act, k.str_or("hidden_act", arch->activation == Activation::kGeluTanh
                                                             ? "gelu_pytorch_tanh"
                                                             : "silu"));
  }
  if (act == "silu" || act == "swish") {
    c.activation = Activation::kSilu;
  } else if (act == "gelu_pytorch_tanh" || act == "gelu_tanh" || act == "gelu_new" ||
             (arch->gelu_means_tanh && act == "gelu")) {  // HF Gemma overrides exact gelu with the tanh form
    c.activation = Activation::kGeluTanh;
  } else {
    return unimplemented("config.json: activation '" + quoted_text(act) + "' is not supported");
  }

  KVASIR_ASSIGN_OR_RETURN(std::vector<int64_t> bos, token_ids(k, "bos_token_id", c.vocab_size));
  KVASIR_ASSIGN_OR_RETURN(std::vector<int64_t> pad, token_ids(k, "pad_token_id", c.vocab_size));
  KVASIR_ASSIGN_OR_RETURN(c.eos_token_ids, token_ids(k, "eos_token_id", c.vocab_size));
  if (generation != nullptr && generation->is_object()) {
    // Every id of both files is checked, also one the other file overrides: either is wrong.
    HfKeys g(*generation, "generation_config.json");
    KVASIR_ASSIGN_OR_RETURN(std::vector<int64_t> geos, token_ids(g, "eos_token_id", c.vocab_size));
    KVASIR_ASSIGN_OR_RETURN(std::vector<int64_t> gbos, token_ids(g, "bos_token_id", c.vocab_size));
    KVASIR_ASSIGN_OR_RETURN(std::vector<int64_t> gpad, token_ids(g, "pad_token_id", c.vocab_size));
    if (!geos.empty()) c.eos_token_ids = geos;
    if (bos.empty()) bos = gbos;
    if (pad.empty()) pad = gpad;
  }
  if (bos.size() > 1 || pad.size() > 1) {
    return invalid_argument("config.json: bos_token_id and pad_token_id must be single ids");
  }
  c.bos_token_id = bos.empty() ? -1 : bos[0];
  c.pad_token_id = pad.empty() || pad[0] == kNoPadToken ? -1 : pad[0];
  return c;
}

StatusOr<HfConfigFiles> read_hf_config_files(const std::string& dir) {
  const std::string config_path = dir + "/config.json";
  KVASIR_ASSIGN_OR_RETURN(std::string text, read_text_file(config_path, 16u << 20));
  auto config = parse_json(text);
  if (!config.ok()) {
    return invalid_argument(config_path + ": not valid JSON: " + config.status().message());
  }
  HfConfigFiles files;
  files.config = std::move(config).value();
  const std::string gen_path = dir + "/generation_config.json";
  struct stat st {};
  if (::stat(gen_path.c_str(), &st) == 0) {
    KVASIR_ASSIGN_OR_RETURN(std::string gen_text, read_text_file(gen_path, 16u << 20));
    auto gen = parse_json(gen_text);
    if (!gen.ok())
      return invalid_argument(gen_path + ": not valid JSON: " + gen.status().message());
    files.generation_config = std::move(gen).value();
  }
  return files;
}

}  // namespace kvasir
