#include "model/weight_manifest.h"

#include <cmath>
#include <set>
#include <utility>

namespace kvasir {

const WeightSpec* WeightManifest::find(const std::vector<WeightSpec>& list,
                                       const std::string& role) const {
  for (const WeightSpec& s : list) {
    if (s.role == role) return &s;
  }
  return nullptr;
}

WeightManifest dense_decoder_manifest(const ModelConfig& c) {
  WeightManifest m;
  const int64_t h = c.hidden_size, qd = c.num_heads * c.head_dim, kvd = c.num_kv_heads * c.head_dim;
  const int64_t ffn = c.intermediate_size;
  auto add = [](std::vector<WeightSpec>& list, std::string role, std::string gguf, std::string hf,
                WeightKind kind, std::vector<int64_t> shape) -> WeightSpec& {
    WeightSpec s;
    s.role = std::move(role);
    s.gguf.name = std::move(gguf);
    s.hf.name = std::move(hf);
    s.kind = kind;
    s.shape = std::move(shape);
    list.push_back(std::move(s));
    return list.back();
  };
  // The order is the dummy weights' order (their seeds follow it): keep it stable.
  add(m.model, "token_embd.weight", "token_embd.weight", "model.embed_tokens.weight",
      WeightKind::kMatrix, {c.vocab_size, h});
  add(m.model, "output_norm.weight", "output_norm.weight", "model.norm.weight", WeightKind::kNorm,
      {h});
  if (!c.tie_word_embeddings) {
    // Absent => the embedding is reused (some checkpoints tie without saying so).
    add(m.model, "output.weight", "output.weight", "lm_head.weight", WeightKind::kMatrix,
        {c.vocab_size, h})
        .optional = true;
  }
  m.layers.resize(static_cast<size_t>(c.num_layers));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    std::vector<WeightSpec>& L = m.layers[static_cast<size_t>(i)];
    const std::string g = "blk." + std::to_string(i) + ".";
    const std::string p = "model.layers." + std::to_string(i) + ".";
    auto layer = [&](const std::string& role, const std::string& hf, WeightKind kind,
                     std::vector<int64_t> shape) -> WeightSpec& {
      return add(L, role, g + role, p + hf, kind, std::move(shape));
    };
    layer("attn_norm.weight", "input_layernorm.weight", WeightKind::kNorm, {h});
    layer("attn_q.weight", "self_attn.q_proj.weight", WeightKind::kMatrix, {qd, h});
    layer("attn_k.weight", "self_attn.k_proj.weight", WeightKind::kMatrix, {kvd, h});
    layer("attn_v.weight", "self_attn.v_proj.weight", WeightKind::kMatrix, {kvd, h});
    layer("attn_output.weight", "self_attn.o_proj.weight", WeightKind::kMatrix, {h, qd});
    // Biases are bound whenever present; the config says whether a checkpoint should have them.
    for (const auto& [role, hf, n] : {std::tuple{"attn_q.bias", "self_attn.q_proj.bias", qd},
                                      std::tuple{"attn_k.bias", "self_attn.k_proj.bias", kvd},
                                      std::tuple{"attn_v.bias", "self_attn.v_proj.bias", kvd}}) {
      WeightSpec& b = layer(role, hf, WeightKind::kVector, {n});
      b.optional = true;
      b.expected = c.attention_bias;
    }
    if (c.qk_norm) {
      layer("attn_q_norm.weight", "self_attn.q_norm.weight", WeightKind::kNorm, {c.head_dim});
      layer("attn_k_norm.weight", "self_attn.k_norm.weight", WeightKind::kNorm, {c.head_dim});
    }
    if (c.post_block_norms) {
      layer("post_attention_norm.weight", "post_attention_layernorm.weight", WeightKind::kNorm, {h});
      layer("ffn_norm.weight", "pre_feedforward_layernorm.weight", WeightKind::kNorm, {h});
      layer("post_ffw_norm.weight", "post_feedforward_layernorm.weight", WeightKind::kNorm, {h});
    } else {
      layer("ffn_norm.weight", "post_attention_layernorm.weight", WeightKind::kNorm, {h});
    }
    layer("ffn_gate.weight", "mlp.gate_proj.weight", WeightKind::kMatrix, {ffn, h});
    layer("ffn_up.weight", "mlp.up_proj.weight", WeightKind::kMatrix, {ffn, h});
    layer("ffn_down.weight", "mlp.down_proj.weight", WeightKind::kMatrix, {h, ffn});
  }
  return m;
}

std::vector<DummyTensorSpec> dummy_weight_specs(const WeightManifest& m, const ModelConfig& c,
                                                bool matrices_on_device) {
  std::vector<DummyTensorSpec> v;
  std::set<std::string> made;  // fused tensors are listed once per row range
  // Norm weights near 1 (minus the offset the model adds back), biases small.
  const float norm_center = 1.0f - static_cast<float>(c.norm_weight_offset);
  auto emit = [&](const WeightSpec& s) {
    if (!s.expected || !made.insert(s.hf.name).second) return;
    std::vector<int64_t> shape = s.shape;
    if (s.hf.fused()) shape[0] = s.hf.fused_rows;
    if (s.hf.transposed) std::swap(shape[shape.size() - 2], shape.back());
    switch (s.kind) {
      case WeightKind::kMatrix: {
        const float scale = 1.0f / std::sqrt(static_cast<float>(shape.back()));
        v.push_back({s.hf.name, DType::kBF16, shape, matrices_on_device, 0.0f, scale});
        break;
      }
      case WeightKind::kNorm:
        v.push_back({s.hf.name, DType::kF32, shape, false, norm_center, 0.1f});
        break;
      case WeightKind::kVector:
        v.push_back({s.hf.name, DType::kF32, shape, false, 0.0f, 0.02f});
        break;
      case WeightKind::kHostMatrix:
        v.push_back({s.hf.name, DType::kF32, shape, false, 0.0f,
                     1.0f / std::sqrt(static_cast<float>(shape.back()))});
        break;
    }
  };
  for (const WeightSpec& s : m.model) emit(s);
  for (const auto& layer : m.layers) {
    for (const WeightSpec& s : layer) emit(s);
  }
  return v;
}

}  // namespace kvasir
