// Multi-head latent attention (MLA, DeepSeek-V2/V3) as an AttentionBlock: the query through q_proj
// (or q_a_proj -> q_a_layernorm -> q_b_proj), the key/value through kv_a_proj_with_mqa into a
// latent c_kv [kv_lora_rank] (normed) and a shared k_pe [qk_rope_dim]; the layer caches only
// [c_kv | rotated k_pe] per token and attends in the absorbed form (Backend::mla_attention), then
// o_proj. Also the sizes it reads from ModelConfig::family_params and the weights it binds, so a
// family using MLA states them once. Must not know about routing or the MLP.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/model_config.h"
#include "model/blocks.h"
#include "model/tensor_parallel.h"
#include "model/weight_manifest.h"

namespace kvasir {

struct MlaConfig {
  int64_t q_lora_rank = 0;  // 0: one q_proj; else q_a_proj -> q_a_layernorm -> q_b_proj
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_dim = 0;
  int64_t qk_rope_dim = 0;
  int64_t v_head_dim = 0;
  // YaRN's correction of the softmax scale, mscale(factor, mscale_all_dim)^2; 1 without YaRN.
  double softmax_mscale = 1.0;
};

// Stores `m` in config.family_params and sets the generic fields MLA implies: head_dim =
// qk_nope_dim + qk_rope_dim (q's head size, and the softmax scale's 1/sqrt), rotary_dim =
// qk_rope_dim, num_kv_heads = 1 (the latent is one head shared by every query head).
// InvalidArgument naming the first size out of range.
Status set_mla_config(const MlaConfig& m, ModelConfig& config);
// What set_mla_config stored (KVASIR_CHECKs that it did).
MlaConfig mla_config(const ModelConfig& config);

// Appends layer `i`'s attention weights (GGUF names as llama.cpp's deepseek2, HF as
// DeepseekV2/V3Attention): the norm before attention is the caller's.
void add_mla_weights(const ModelConfig& config, int64_t i, std::vector<WeightSpec>& layer);

// Tensor parallelism of the roles add_mla_weights declares, vLLM's layout: the query (q_proj, or
// q_b_proj after the replicated q_a_proj and q_a_layernorm) and kv_b_proj (and llama.cpp's
// attn_k_b / attn_v_b) split by heads; kv_a_proj_with_mqa and kv_a_layernorm replicated, so every
// rank computes and caches the whole latent row; o_proj split by its input columns (the rank's
// heads' values), its partial outputs all-reduced by the model. nullopt for any other role.
std::optional<TensorParallelSplit> mla_tensor_parallel_split(const std::string& role);

// The block; Unimplemented when the backend has no MLA ops or the RoPE is longrope.
StatusOr<std::unique_ptr<AttentionBlock>> make_mla_attention(const BlockInit& init);

}  // namespace kvasir
