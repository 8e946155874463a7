#include "model/families/deepseek.h"

#include <cmath>

#include "model/mla_attention.h"
#include "model/moe_block.h"

namespace kvasir {

namespace {

// DeepSeek's YaRN magnitude, yarn_get_mscale in transformers and in DeepSeek's own code.
double yarn_mscale(double factor, double mscale) {
  return factor <= 1.0 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0;
}

const Json* rope_dict(const HfKeys& k) {
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    if (const Json* d = k.find(key); d != nullptr && d->is_object()) return d;
  }
  return nullptr;
}

StatusOr<std::optional<double>> rope_number(const Json* dict, const char* key, const std::string& where) {
  if (dict == nullptr) return std::optional<double>();
  return HfKeys(*dict, where).opt_num(key);
}

}  // namespace

DeepseekFamily::DeepseekFamily(std::string_view name, std::vector<std::string> gguf_names,
                               std::vector<std::string> hf_model_types,
                               std::vector<std::string> hf_architectures, DeepseekRouter router)
    : ModelFamily(ConfigTraits{.family = name,
                               .gguf_rope_style = RopeStyle::kInterleaved,
                               .latent_attention = true},
                  std::move(gguf_names), std::move(hf_model_types), std::move(hf_architectures)),
      router_(router) {}

Status DeepseekFamily::read_hf_extras(const HfKeys& k, ModelConfig& c) const {
  KVASIR_ASSIGN_OR_RETURN(bool bias, k.bool_or("attention_bias", false));
  if (bias) return unimplemented(k.where() + ": DeepSeek attention biases (attention_bias true) are not supported");
  MlaConfig m;
  KVASIR_ASSIGN_OR_RETURN(std::optional<int64_t> q_lora, k.opt_int("q_lora_rank"));  // null: q_proj
  m.q_lora_rank = q_lora.value_or(0);
  if (q_lora && *q_lora < 1) return k.out_of_range("q_lora_rank", std::to_string(*q_lora), "a positive integer or null");
  KVASIR_ASSIGN_OR_RETURN(m.kv_lora_rank, k.req_positive_int("kv_lora_rank"));
  KVASIR_ASSIGN_OR_RETURN(m.qk_nope_dim, k.req_positive_int("qk_nope_head_dim"));
  KVASIR_ASSIGN_OR_RETURN(m.qk_rope_dim, k.req_positive_int("qk_rope_head_dim"));
  KVASIR_ASSIGN_OR_RETURN(m.v_head_dim, k.req_positive_int("v_head_dim"));
  // transformers: DeepseekV2 rotates interleaved pairs (a complex product); V3 does unless
  // rope_interleave is false.
  bool interleave = true;
  if (router_ == DeepseekRouter::kV3) {
    KVASIR_ASSIGN_OR_RETURN(interleave, k.bool_or("rope_interleave", true));
  }
  c.rope_style = interleave ? RopeStyle::kInterleaved : RopeStyle::kNeox;
  RopeScaling& rs = c.rope_scaling;
  if (rs.type != RopeScalingType::kNone) {
    const Json* dict = rope_dict(k);
    const std::string where = k.where() + ": rope scaling";
    KVASIR_ASSIGN_OR_RETURN(std::optional<double> mscale, rope_number(dict, "mscale", where));
    KVASIR_ASSIGN_OR_RETURN(std::optional<double> mscale_all_dim, rope_number(dict, "mscale_all_dim", where));
    KVASIR_ASSIGN_OR_RETURN(std::optional<double> given, rope_number(dict, "attention_factor", where));
    // cos/sin magnitude (transformers' _compute_yarn_parameters): the ratio of the two mscales
    // when both are set, else the plain YaRN formula (make_rope_table derives it from 0).
    if (rs.type == RopeScalingType::kYarn && !given && mscale.value_or(0) != 0 && mscale_all_dim.value_or(0) != 0) {
      rs.attention_factor = yarn_mscale(rs.factor, *mscale) / yarn_mscale(rs.factor, *mscale_all_dim);
    }
    // The softmax scale's correction (yarn_apply_mscale): mscale(factor, mscale_all_dim)^2.
    if (mscale_all_dim.value_or(0) != 0) {
      const double s = yarn_mscale(rs.factor, *mscale_all_dim);
      m.softmax_mscale = s * s;
    }
  }
  KVASIR_RETURN_IF_ERROR(set_mla_config(m, c));
  return read_deepseek_moe_hf(k, router_, c);
}

Status DeepseekFamily::read_gguf_extras(const GgufKeys& k, ModelConfig& c) const {
  MlaConfig m;
  KVASIR_ASSIGN_OR_RETURN(m.kv_lora_rank, k.integer("attention.kv_lora_rank"));
  KVASIR_ASSIGN_OR_RETURN(m.q_lora_rank, k.integer_or("attention.q_lora_rank", 0));
  // Files written for the absorbed form say key_length = kv_lora_rank + rope (the latent view)
  // and keep the per-head sizes under *_mla; older ones give the per-head sizes directly.
  KVASIR_ASSIGN_OR_RETURN(int64_t qk, k.integer_or("attention.key_length_mla", c.head_dim));
  KVASIR_ASSIGN_OR_RETURN(int64_t value_length, k.integer_or("attention.value_length", c.head_dim));
  KVASIR_ASSIGN_OR_RETURN(m.v_head_dim, k.integer_or("attention.value_length_mla", value_length));
  m.qk_rope_dim = c.rotary_dim;
  m.qk_nope_dim = qk - m.qk_rope_dim;
  if (m.qk_nope_dim < 1) {
    return invalid_argument("GGUF: " + k.key("attention.key_length_mla") + " " + std::to_string(qk) +
                            " leaves no non-rotary dimensions beside rope.dimension_count " +
                            std::to_string(m.qk_rope_dim));
  }
  RopeScaling& rs = c.rope_scaling;
  if (rs.type == RopeScalingType::kYarn) {
    // llama.cpp's deepseek2 keeps cos/sin unscaled and folds 1 + log_mul * ln(factor) (log_mul =
    // 0.1 * mscale_all_dim, as the converter writes it) squared into the softmax scale.
    if (rs.attention_factor == 0.0) rs.attention_factor = 1.0;
    KVASIR_ASSIGN_OR_RETURN(double log_mul, k.number_or("rope.scaling.yarn_log_multiplier", 0.0));
    if (log_mul != 0.0 && rs.factor > 1.0) {
      const double s = 1.0 + log_mul * std::log(rs.factor);
      m.softmax_mscale = s * s;
    }
  }
  KVASIR_RETURN_IF_ERROR(set_mla_config(m, c));
  return read_deepseek_moe_gguf(k, c);
}

WeightManifest DeepseekFamily::manifest(const ModelConfig& c) const {
  WeightManifest m = dense_decoder_manifest(c);
  for (size_t i = 0; i < m.layers.size(); ++i) {
    std::vector<WeightSpec> layer;
    for (WeightSpec& s : m.layers[i]) {
      // The generic attention's weights give way to MLA's, placed where they were.
      if (s.role.rfind("attn_", 0) == 0 && s.role != "attn_norm.weight") {
        if (s.role == "attn_q.weight") add_mla_weights(c, static_cast<int64_t>(i), layer);
        continue;
      }
      layer.push_back(std::move(s));
    }
    if (is_deepseek_moe_layer(c, static_cast<int>(i))) {
      replace_mlp_with_moe(layer, static_cast<int>(i), c.hidden_size, deepseek_moe_layer_config(c),
                           deepseek_moe_hf_names());
    }
    m.layers[i] = std::move(layer);
  }
  return m;
}

StatusOr<std::unique_ptr<AttentionBlock>> DeepseekFamily::make_attention(const BlockInit& init) const {
  return make_mla_attention(init);
}

StatusOr<std::unique_ptr<MlpBlock>> DeepseekFamily::make_mlp(const BlockInit& init) const {
  if (is_deepseek_moe_layer(init.config, init.layer)) return make_moe_mlp(init, deepseek_moe_layer_config(init.config));
  return make_gated_mlp(init);
}

std::optional<TensorParallelSplit> DeepseekFamily::tensor_parallel_split(const std::string& role,
                                                                         const ModelConfig& c,
                                                                         const ShardPosition& at) const {
  if (auto split = mla_tensor_parallel_split(role)) return split;
  return moe_tensor_parallel_split(role, held_experts(c).count, at);
}

Status DeepseekFamily::shard_family_params(const ModelConfig&, ModelConfig& shard, const ShardPosition& at) const {
  return shard_moe_sizes(shard, at);
}

}  // namespace kvasir
