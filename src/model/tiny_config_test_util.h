// Tests' tiny config.json of any registered family: 2 layers, GQA 4/2, head_dim 16 given
// explicitly (so every shape field can change alone), a sliding window for the families that read
// one, 4 experts (top-2) for the MoE families, whose layer 1 keeps a dense MLP where the family
// reads mlp_only_layers (so intermediate_size shapes a weight in every family); DeepSeek's MLA
// sizes and MoE layers for those families. Small enough that dummy weights and a forward pass take milliseconds.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "common/json.h"

namespace kvasir::test_util {

inline Json parse_json_or_fail(const std::string& s) {
  auto j = parse_json(s);
  EXPECT_TRUE(j.ok()) << j.status().to_string();
  return j.ok() ? *j : Json();
}

inline Json tiny_config(const std::string& model_type) {
  Json j = parse_json_or_fail(R"({"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
                                  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                                  "vocab_size": 128, "max_position_embeddings": 256, "rms_norm_eps": 1e-5,
                                  "tie_word_embeddings": false, "sliding_window": 8,
                                  "num_experts": 4, "num_local_experts": 4, "num_experts_per_tok": 2,
                                  "moe_intermediate_size": 32, "shared_expert_intermediate_size": 48,
                                  "mlp_only_layers": [1]})");
  j.set("model_type", model_type);
  if (model_type.rfind("deepseek", 0) == 0) {
    // Multi-head latent attention (V3 with q_lora_rank); layer 0 dense, layer 1 MoE with a shared
    // expert (V3: two groups of two experts, one kept).
    const bool v3 = model_type == "deepseek_v3";
    Json mla = parse_json_or_fail(v3 ? R"({"kv_lora_rank": 32, "q_lora_rank": 24, "qk_rope_head_dim": 8,
                                          "qk_nope_head_dim": 16, "v_head_dim": 24, "first_k_dense_replace": 1,
                                          "n_routed_experts": 4, "n_shared_experts": 1, "n_group": 2,
                                          "topk_group": 1})"
                                     : R"({"kv_lora_rank": 32, "q_lora_rank": null, "qk_rope_head_dim": 8,
                                          "qk_nope_head_dim": 16, "v_head_dim": 24, "first_k_dense_replace": 1,
                                          "n_routed_experts": 4, "n_shared_experts": 1})");
    for (const auto& [key, value] : mla.as_object()) j.set(key, value);
  }
  return j;
}

}  // namespace kvasir::test_util
