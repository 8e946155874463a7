// ModelConfig from GGUF metadata. Keys follow llama.cpp's names (`<arch>.block_count`, ...). What
// llama.cpp hard-codes per architecture instead of storing (gemma3's local rope base of 10000 and
// 5:1 local/global pattern, Gemma's embedding scale) comes from the family's ConfigTraits.
#include <algorithm>
#include <cmath>
#include <limits>

#include "common/quoted_text.h"
#include "config/config_readers.h"
#include "config/gguf_keys.h"
#include "config/model_config_internal.h"
#include "loader/gguf_file.h"

namespace kvasir {

namespace {

// llama.cpp spells families as GGUF architectures; only the ones we run are accepted.
Status read_rope_scaling(const GgufFile& f, const GgufKeys& k, ModelConfig& c) {
  RopeScaling& rs = c.rope_scaling;
  if (k.has("rope.scaling.type")) {
    KVASIR_ASSIGN_OR_RETURN(std::string_view type, f.get_string(k.key("rope.scaling.type")));
    if (type == "none") {
      rs.type = RopeScalingType::kNone;
    } else if (type == "linear") {
      rs.type = RopeScalingType::kLinear;
    } else if (type == "yarn") {
      rs.type = RopeScalingType::kYarn;
    } else {
      return unimplemented("GGUF: rope scaling type '" + quoted_text(type) + "' is not supported");
    }
    KVASIR_ASSIGN_OR_RETURN(rs.factor, k.number_or("rope.scaling.factor", 1.0));
  } else if (k.has("rope.scale_linear")) {  // older files
    rs.type = RopeScalingType::kLinear;
    KVASIR_ASSIGN_OR_RETURN(rs.factor, k.number_or("rope.scale_linear", 1.0));
  }
  KVASIR_ASSIGN_OR_RETURN(
      rs.original_max_position_embeddings,
      k.integer_or("rope.scaling.original_context_length", c.max_position_embeddings));
  KVASIR_ASSIGN_OR_RETURN(rs.beta_fast, k.number_or("rope.scaling.yarn_beta_fast", 32.0));
  KVASIR_ASSIGN_OR_RETURN(rs.beta_slow, k.number_or("rope.scaling.yarn_beta_slow", 1.0));
  KVASIR_ASSIGN_OR_RETURN(rs.attention_factor, k.number_or("rope.scaling.attn_factor", 0.0));
  if (f.find_tensor("rope_freqs.weight") != nullptr) {
    rs.freq_factors_tensor = true;
    if (rs.type == RopeScalingType::kNone) rs.type = RopeScalingType::kLlama3;
  }
  if (rs.type == RopeScalingType::kNone) rs.factor = 1.0;
  return Status();
}

// Which layers use the sliding window: `<arch>.attention.sliding_window_pattern` when present (a
// period, or one bool per layer), else the family's built-in period, else every layer.
Status read_sliding(const GgufFile& f, const GgufKeys& k, const ConfigTraits& arch,
                    ModelConfig& c) {
  KVASIR_ASSIGN_OR_RETURN(c.sliding_window, k.integer_or("attention.sliding_window", 0));
  if (c.sliding_window <= 0) {
    c.sliding_window = 0;
    c.layer_is_sliding.assign(static_cast<size_t>(c.num_layers), false);
    return Status();
  }
  const std::string pk = k.key("attention.sliding_window_pattern");
  const GgufValue* pattern = f.find(pk);
  if (pattern != nullptr && pattern->type == GgufType::kArray) {
    KVASIR_ASSIGN_OR_RETURN(std::vector<GgufValue> items, f.array_items(*pattern));
    if (pattern->elem_type != GgufType::kBool ||
        items.size() != static_cast<size_t>(c.num_layers)) {
      return invalid_argument("GGUF: '" + pk + "' must be one bool per layer");
    }
    c.layer_is_sliding.clear();
    for (const GgufValue& item : items) c.layer_is_sliding.push_back(f.bytes()[item.offset] != 0);
    return Status();
  }
  int64_t period = arch.sliding == SlidingLayers::kPeriodic ? arch.sliding_period : 0;
  if (pattern != nullptr) {
    KVASIR_ASSIGN_OR_RETURN(period, k.integer("attention.sliding_window_pattern"));
    // Below 1, periodic_sliding would make every layer slide: no file means that.
    if (period < 1) return invalid_argument("GGUF: '" + pk + "' must be >= 1, not " + std::to_string(period));
  }
  c.layer_is_sliding = config_detail::periodic_sliding(c.num_layers, period);
  return Status();
}

Status read_token_ids(const GgufFile& f, ModelConfig& c) {
  auto opt_id = [&](const char* key, int64_t* out) -> Status {
    if (!f.has(key)) return Status();
    KVASIR_ASSIGN_OR_RETURN(*out, f.get_i64(key));
    return Status();
  };
  KVASIR_RETURN_IF_ERROR(opt_id("tokenizer.ggml.bos_token_id", &c.bos_token_id));
  KVASIR_RETURN_IF_ERROR(opt_id("tokenizer.ggml.padding_token_id", &c.pad_token_id));
  // End-of-turn and end-of-message tokens stop generation too (llama.cpp's "EOG" set).
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                          "tokenizer.ggml.eom_token_id"}) {
    int64_t id = -1;
    KVASIR_RETURN_IF_ERROR(opt_id(key, &id));
    if (id >= 0 &&
        std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), id) == c.eos_token_ids.end()) {
      c.eos_token_ids.push_back(id);
    }
  }
  return Status();
}

}  // namespace

StatusOr<ModelConfig> read_gguf_config(const GgufFile& f, const ConfigTraits& traits) {
  const ConfigTraits* arch = &traits;
  const std::string arch_name(f.architecture());
  if (arch_name.empty()) return invalid_argument("GGUF: general.architecture is missing");
  const GgufKeys k(f, arch_name);
  ModelConfig c;
  c.architecture = std::string(arch->family);
  KVASIR_ASSIGN_OR_RETURN(c.hidden_size, k.integer("embedding_length"));
  KVASIR_ASSIGN_OR_RETURN(c.num_layers, k.integer("block_count"));
  KVASIR_ASSIGN_OR_RETURN(c.intermediate_size, k.integer("feed_forward_length"));
  KVASIR_ASSIGN_OR_RETURN(c.num_heads, k.integer("attention.head_count"));
  KVASIR_ASSIGN_OR_RETURN(c.num_kv_heads, k.integer_or("attention.head_count_kv", c.num_heads));
  KVASIR_ASSIGN_OR_RETURN(c.max_position_embeddings, k.integer("context_length"));
  if (!k.has("attention.layer_norm_rms_epsilon")) {
    return not_found("GGUF: required key '" + k.key("attention.layer_norm_rms_epsilon") +
                     "' is missing");
  }
  KVASIR_ASSIGN_OR_RETURN(c.rms_norm_eps, k.number_or("attention.layer_norm_rms_epsilon", 0.0));
  KVASIR_RETURN_IF_ERROR(config_detail::check_basic_sizes(c));
  if (k.has("attention.key_length")) {
    KVASIR_ASSIGN_OR_RETURN(c.head_dim, k.integer("attention.key_length"));
  } else {
    c.head_dim = c.hidden_size / c.num_heads;
    if (c.head_dim * c.num_heads != c.hidden_size) {
      return invalid_argument("GGUF: embedding_length " + std::to_string(c.hidden_size) +
                              " is not a multiple of head_count " + std::to_string(c.num_heads) +
                              " and attention.key_length is absent");
    }
  }
  KVASIR_ASSIGN_OR_RETURN(int64_t value_length, k.integer_or("attention.value_length", c.head_dim));
  if (value_length != c.head_dim && !arch->latent_attention) {
    return unimplemented("GGUF: attention.value_length " + std::to_string(value_length) +
                         " differs from key_length " + std::to_string(c.head_dim));
  }
  KVASIR_ASSIGN_OR_RETURN(c.rotary_dim, k.integer_or("rope.dimension_count", c.head_dim));

  // Vocabulary size: the explicit key, else the token list, else the embedding's rows.
  if (k.has("vocab_size")) {
    KVASIR_ASSIGN_OR_RETURN(c.vocab_size, k.integer("vocab_size"));
  } else if (f.has("tokenizer.ggml.tokens")) {
    KVASIR_ASSIGN_OR_RETURN(uint64_t n, f.get_array_size("tokenizer.ggml.tokens"));
    c.vocab_size = static_cast<int64_t>(std::min<uint64_t>(n, std::numeric_limits<int64_t>::max()));
  } else if (const GgufTensorInfo* emb = f.find_tensor("token_embd.weight");
             emb && emb->n_dims == 2) {
    c.vocab_size = emb->ne[1];
  } else {
    return not_found(
        "GGUF: cannot tell the vocabulary size (no vocab_size, tokens or token_embd.weight)");
  }

  KVASIR_ASSIGN_OR_RETURN(c.rope_theta, k.number_or("rope.freq_base", 10000.0));
  // llama.cpp hard-codes gemma3's local base (rope_freq_base_train_swa = 10000); newer files
  // may store it as rope.freq_base_swa.
  const double local_default = arch->rope_theta_local.value_or(c.rope_theta);
  KVASIR_ASSIGN_OR_RETURN(c.rope_theta_local, k.number_or("rope.freq_base_swa", local_default));
  KVASIR_RETURN_IF_ERROR(read_rope_scaling(f, k, c));
  c.rope_style = arch->gguf_rope_style;
  KVASIR_RETURN_IF_ERROR(read_sliding(f, k, *arch, c));

  if (k.has("attn_logit_softcapping")) {
    KVASIR_ASSIGN_OR_RETURN(c.attn_logit_softcapping, k.number_or("attn_logit_softcapping", 0));
  }
  if (k.has("final_logit_softcapping")) {
    KVASIR_ASSIGN_OR_RETURN(c.final_logit_softcapping, k.number_or("final_logit_softcapping", 0));
  }
  // Gemma's 27B models scale attention by hidden/heads, the others by head_dim (llama.cpp picks
  // by layer count too: GGUF has no query_pre_attn_scalar key).
  c.query_pre_attn_scalar = static_cast<double>(c.head_dim);
  if (arch->large_model_layers != 0 && c.num_layers == arch->large_model_layers) {
    c.query_pre_attn_scalar = static_cast<double>(c.hidden_size / c.num_heads);
  }
  c.qk_norm = arch->qk_norm || f.find_tensor("blk.0.attn_q_norm.weight") != nullptr;
  c.post_block_norms = arch->post_block_norms;
  c.attention_bias = f.find_tensor("blk.0.attn_q.bias") != nullptr;
  c.tie_word_embeddings = f.find_tensor("output.weight") == nullptr;
  c.embedding_scale = arch->scale_embeddings ? std::sqrt(static_cast<double>(c.hidden_size)) : 1.0;
  c.norm_weight_offset = 0.0;  // llama.cpp's converter already added Gemma's +1 to *norm.weight
  c.activation = arch->activation;
  KVASIR_RETURN_IF_ERROR(read_token_ids(f, c));
  return c;
}

}  // namespace kvasir
