// DeepSeek's mixture-of-experts layers (V2, V2-Lite, V3): which layers have them
// (first_k_dense_replace, moe_layer_freq), how their router picks and weighs experts, and their
// shared experts, read from HF config.json or llama.cpp's GGUF "deepseek2" keys into
// ModelConfig::family_params, and given back as the MoeLayerConfig the MoE block runs
// (model/moe_block.h). Must not know about attention: families/deepseek.cpp joins the two.
#pragma once

#include "config/gguf_keys.h"
#include "config/hf_keys.h"
#include "config/model_config.h"
#include "model/moe_block.h"

namespace kvasir {

// Whose router an HF config describes, as transformers 5 implements them:
//   kV2 (DeepseekV2TopkRouter): softmax; topk_method "greedy" (top-k of all experts) or
//       "group_limited_greedy" (n_group groups ranked by their best expert, the topk_group best
//       kept); no renormalization whatever norm_topk_prob says; weights times
//       routed_scaling_factor.
//   kV3 (DeepseekV3TopkRouter, "noaux_tc"): sigmoid; e_score_correction_bias added for the choice
//       only; n_group groups ranked by the sum of their two best biased scores, the topk_group best
//       kept; the chosen unbiased scores renormalized when norm_topk_prob, then times
//       routed_scaling_factor.
// Absent keys take the defaults of transformers' DeepseekV2Config / DeepseekV3Config.
enum class DeepseekRouter { kV2, kV3 };

// Reads the MoE keys of an HF config (every layer dense when first_k_dense_replace covers them
// all or n_routed_experts is null, as DeepSeek's own code has it). InvalidArgument naming the
// key for numbers that cannot run; Unimplemented for a router transformers does not have.
Status read_deepseek_moe_hf(const HfKeys& keys, DeepseekRouter router, ModelConfig& config);

// The same from a GGUF "deepseek2" file: leading_dense_block_count, expert_count,
// expert_used_count, expert_feed_forward_length, expert_shared_count, expert_weights_scale,
// expert_weights_norm, expert_gating_func (softmax when absent, as llama.cpp), and
// expert_group_count / expert_group_used_count. The file stores neither topk_method nor whether
// there is a correction bias: the bias is there when the first MoE layer has exp_probs_b.bias,
// and groups are ranked by their top-2 sum with a bias (V3's noaux_tc) and by their best expert
// without one (V2's group_limited_greedy; llama.cpp ranks by the top-2 sum either way, which
// differs from DeepSeek-V2's own router).
Status read_deepseek_moe_gguf(const GgufKeys& keys, ModelConfig& config);

// Whether layer `layer` of a config read above is a MoE layer.
bool is_deepseek_moe_layer(const ModelConfig& config, int layer);

// The MoE layer of a config read above (the same for every MoE layer).
MoeLayerConfig deepseek_moe_layer_config(const ModelConfig& config);

// Where DeepSeek's HF checkpoints keep a MoE layer's weights (mlp.gate, mlp.experts.<e>.*,
// mlp.shared_experts.*, mlp.gate.e_score_correction_bias).
const MoeHfNames& deepseek_moe_hf_names();

}  // namespace kvasir
