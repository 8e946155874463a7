#include "config/model_config.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "config/model_config_internal.h"

namespace kvasir {

namespace config_detail {

std::vector<bool> periodic_sliding(int64_t num_layers, int64_t period) {
  std::vector<bool> v(static_cast<size_t>(std::max<int64_t>(num_layers, 0)), true);
  if (period <= 0) return v;
  for (int64_t i = 0; i < num_layers; ++i) v[static_cast<size_t>(i)] = (i + 1) % period != 0;
  return v;
}

}  // namespace config_detail

namespace {

// Upper bounds far above any real model; they keep products of sizes inside int64.
constexpr int64_t kMaxVocab = int64_t{1} << 23;
constexpr int64_t kMaxHidden = int64_t{1} << 18;
constexpr int64_t kMaxIntermediate = int64_t{1} << 21;
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxHeads = 4096;
constexpr int64_t kMaxHeadDim = 4096;
constexpr int64_t kMaxPositions = int64_t{1} << 31;

Status check_range(const char* name, int64_t v, int64_t max) {
  if (v <= 0 || v > max) {
    return invalid_argument(std::string("model config: ") + name + " = " + std::to_string(v) +
                            " must be in [1, " + std::to_string(max) + "]");
  }
  return Status();
}

Status check_positive(const char* name, double v) {
  if (!(v > 0) || !std::isfinite(v)) {
    return invalid_argument(std::string("model config: ") + name + " = " + std::to_string(v) +
                            " must be a positive finite number");
  }
  return Status();
}

Status check_token(const char* name, int64_t id, int64_t vocab, bool allow_none) {
  if ((allow_none && id == -1) || (id >= 0 && id < vocab)) return Status();
  return invalid_argument(std::string("model config: ") + name + " = " + std::to_string(id) +
                          " is outside the vocabulary of " + std::to_string(vocab));
}

}  // namespace

namespace config_detail {
Status check_basic_sizes(const ModelConfig& c) {
  KVASIR_RETURN_IF_ERROR(check_range("hidden_size", c.hidden_size, kMaxHidden));
  KVASIR_RETURN_IF_ERROR(check_range("num_heads", c.num_heads, kMaxHeads));
  return check_range("num_layers", c.num_layers, kMaxLayers);
}
}  // namespace config_detail

Status ModelConfig::validate() const {
  // Whether the family is one we run is the model registry's question (model/registry.h).
  if (architecture.empty()) return invalid_argument("model config: architecture is empty");
  KVASIR_RETURN_IF_ERROR(check_range("vocab_size", vocab_size, kMaxVocab));
  KVASIR_RETURN_IF_ERROR(check_range("hidden_size", hidden_size, kMaxHidden));
  KVASIR_RETURN_IF_ERROR(check_range("intermediate_size", intermediate_size, kMaxIntermediate));
  KVASIR_RETURN_IF_ERROR(check_range("num_layers", num_layers, kMaxLayers));
  KVASIR_RETURN_IF_ERROR(check_range("num_heads", num_heads, kMaxHeads));
  KVASIR_RETURN_IF_ERROR(check_range("num_kv_heads", num_kv_heads, num_heads));
  KVASIR_RETURN_IF_ERROR(check_range("head_dim", head_dim, kMaxHeadDim));
  KVASIR_RETURN_IF_ERROR(check_range("rotary_dim", rotary_dim, head_dim));
  KVASIR_RETURN_IF_ERROR(
      check_range("max_position_embeddings", max_position_embeddings, kMaxPositions));
  if (num_heads % num_kv_heads != 0) {
    return invalid_argument("model config: num_heads " + std::to_string(num_heads) +
                            " is not a multiple of num_kv_heads " + std::to_string(num_kv_heads));
  }
  if (rotary_dim % 2 != 0) {
    return invalid_argument("model config: rotary_dim " + std::to_string(rotary_dim) + " is odd");
  }
  KVASIR_RETURN_IF_ERROR(check_positive("rms_norm_eps", rms_norm_eps));
  if (rms_norm_eps >= 1) return invalid_argument("model config: rms_norm_eps must be < 1");
  KVASIR_RETURN_IF_ERROR(check_positive("rope_theta", rope_theta));
  KVASIR_RETURN_IF_ERROR(check_positive("rope_theta_local", rope_theta_local));
  KVASIR_RETURN_IF_ERROR(check_positive("query_pre_attn_scalar", query_pre_attn_scalar));
  KVASIR_RETURN_IF_ERROR(check_positive("embedding_scale", embedding_scale));
  if (!std::isfinite(norm_weight_offset))
    return invalid_argument("model config: bad norm_weight_offset");
  if (attn_logit_softcapping) {
    KVASIR_RETURN_IF_ERROR(check_positive("attn_logit_softcapping", *attn_logit_softcapping));
  }
  if (final_logit_softcapping) {
    KVASIR_RETURN_IF_ERROR(check_positive("final_logit_softcapping", *final_logit_softcapping));
  }
  const RopeScaling& rs = rope_scaling;
  if (rs.type != RopeScalingType::kNone) {
    KVASIR_RETURN_IF_ERROR(check_positive("rope_scaling.factor", rs.factor));
  }
  if (rs.type == RopeScalingType::kLlama3 || rs.type == RopeScalingType::kYarn ||
      rs.type == RopeScalingType::kLongrope) {
    KVASIR_RETURN_IF_ERROR(check_range("rope_scaling.original_max_position_embeddings",
                                       rs.original_max_position_embeddings, kMaxPositions));
  }
  if (rs.type == RopeScalingType::kLlama3 &&
      !(rs.low_freq_factor > 0 && rs.high_freq_factor > rs.low_freq_factor)) {
    return invalid_argument(
        "model config: llama3 rope scaling needs 0 < low_freq_factor < high_freq_factor");
  }
  if (rs.type == RopeScalingType::kYarn && !(rs.beta_fast > rs.beta_slow && rs.beta_slow > 0)) {
    return invalid_argument("model config: yarn rope scaling needs 0 < beta_slow < beta_fast");
  }
  if (rs.type == RopeScalingType::kLongrope) {
    const size_t half = static_cast<size_t>(rotary_dim / 2);
    for (const auto* f : {&rs.short_factor, &rs.long_factor}) {
      if (f->size() != half) {
        return invalid_argument("model config: longrope short_factor and long_factor need " +
                                std::to_string(half) + " entries (rotary_dim / 2), not " +
                                std::to_string(f->size()));
      }
      for (double x : *f) KVASIR_RETURN_IF_ERROR(check_positive("rope_scaling factor entry", x));
    }
    if (rs.attention_factor < 0 || !std::isfinite(rs.attention_factor)) {
      return invalid_argument("model config: rope_scaling.attention_factor must be >= 0");
    }
  }
  if (sliding_window < 0) return invalid_argument("model config: sliding_window is negative");
  if (layer_is_sliding.size() != static_cast<size_t>(num_layers)) {
    return invalid_argument("model config: layer_is_sliding has " +
                            std::to_string(layer_is_sliding.size()) + " entries for " +
                            std::to_string(num_layers) + " layers");
  }
  bool any_sliding = false;
  for (bool b : layer_is_sliding) any_sliding = any_sliding || b;
  if (any_sliding && sliding_window == 0) {
    return invalid_argument(
        "model config: some layers use sliding-window attention but sliding_window is 0");
  }
  KVASIR_RETURN_IF_ERROR(check_token("bos_token_id", bos_token_id, vocab_size, true));
  KVASIR_RETURN_IF_ERROR(check_token("pad_token_id", pad_token_id, vocab_size, true));
  for (int64_t id : eos_token_ids) {
    KVASIR_RETURN_IF_ERROR(check_token("eos_token_id", id, vocab_size, false));
  }
  return Status();
}

double ModelConfig::attention_scale() const { return 1.0 / std::sqrt(query_pre_attn_scalar); }

std::string_view rope_scaling_type_name(RopeScalingType t) {
  switch (t) {
    case RopeScalingType::kNone:
      return "none";
    case RopeScalingType::kLinear:
      return "linear";
    case RopeScalingType::kLlama3:
      return "llama3";
    case RopeScalingType::kYarn:
      return "yarn";
    case RopeScalingType::kLongrope:
      return "longrope";
  }
  return "unknown";
}

std::string ModelConfig::to_string() const {
  int64_t num_sliding = 0;
  for (bool b : layer_is_sliding) num_sliding += b ? 1 : 0;
  char buf[512];
  std::snprintf(
      buf, sizeof(buf),
      "%s: vocab=%lld hidden=%lld ffn=%lld layers=%lld heads=%lld/%lld head_dim=%lld "
      "rope_theta=%g/%g rope_scaling=%s x%g window=%lld (%lld sliding) max_pos=%lld "
      "tied=%d eps=%g",
      architecture.c_str(), static_cast<long long>(vocab_size), static_cast<long long>(hidden_size),
      static_cast<long long>(intermediate_size), static_cast<long long>(num_layers),
      static_cast<long long>(num_heads), static_cast<long long>(num_kv_heads),
      static_cast<long long>(head_dim), rope_theta, rope_theta_local,
      std::string(rope_scaling_type_name(rope_scaling.type)).c_str(), rope_scaling.factor,
      static_cast<long long>(sliding_window), static_cast<long long>(num_sliding),
      static_cast<long long>(max_position_embeddings), tie_word_embeddings ? 1 : 0, rms_norm_eps);
  return buf;
}

}  // namespace kvasir
