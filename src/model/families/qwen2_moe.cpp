// Qwen2-MoE (HF Qwen2MoeForCausalLM, model_type "qwen2_moe"; GGUF "qwen2moe"; Qwen1.5-MoE,
// Qwen2-57B-A14B): the Qwen2 decoder (q/k/v biases) with a MoE MLP: softmax over num_experts, top
// num_experts_per_tok, renormalized only when norm_topk_prob (false in released checkpoints;
// llama.cpp never renormalizes qwen2moe), plus a shared expert of shared_expert_intermediate_size
// scaled by sigmoid(shared_expert_gate · x). mlp_only_layers / decoder_sparse_step as Qwen3-MoE.
#include "model/moe_family.h"

namespace kvasir {
namespace {

class Qwen2MoeFamily final : public MoeFamily {
 public:
  Qwen2MoeFamily()
      : MoeFamily(
            ConfigTraits{
                .family = "qwen2_moe",
                .attention_bias = true,  // transformers 4 hard-codes it; 5 reads qkv_bias (default true)
                .sliding = SlidingLayers::kAfterMaxWindowLayer,
            },
            {"qwen2moe"}, {"qwen2_moe"}, {"Qwen2MoeForCausalLM"},
            MoeHfNames{.router = "mlp.gate.weight",
                       .expert_prefix = "mlp.experts.",
                       .gate = "gate_proj",
                       .up = "up_proj",
                       .down = "down_proj",
                       .shared_prefix = "mlp.shared_expert.",
                       .shared_gate = "mlp.shared_expert_gate.weight"},
            /*shared_expert_gate=*/true) {}

  Status read_hf_extras(const HfKeys& k, ModelConfig& c) const override {
    KVASIR_ASSIGN_OR_RETURN(c.attention_bias, k.bool_or("qkv_bias", c.attention_bias));
    MoeParams p;
    KVASIR_ASSIGN_OR_RETURN(int64_t local, k.positive_int_or("num_local_experts", 60));
    KVASIR_ASSIGN_OR_RETURN(p.num_experts, k.positive_int_or("num_experts", local));
    KVASIR_ASSIGN_OR_RETURN(p.top_k, k.positive_int_or("num_experts_per_tok", 4));
    KVASIR_ASSIGN_OR_RETURN(p.expert_intermediate_size, k.positive_int_or("moe_intermediate_size", 1408));
    KVASIR_ASSIGN_OR_RETURN(p.shared_intermediate_size, k.positive_int_or("shared_expert_intermediate_size", 5632));
    KVASIR_ASSIGN_OR_RETURN(p.renormalize, k.bool_or("norm_topk_prob", false));
    KVASIR_RETURN_IF_ERROR(read_hf_dense_layers(k, c, p));
    return set_moe_params(p, c, k.where());
  }

  Status read_gguf_extras(const GgufKeys& k, ModelConfig& c) const override {
    MoeParams p;
    KVASIR_ASSIGN_OR_RETURN(p.num_experts, k.integer("expert_count"));
    KVASIR_ASSIGN_OR_RETURN(p.top_k, k.integer("expert_used_count"));
    // llama.cpp's defaults when the keys are absent.
    const int64_t fallback = p.top_k > 0 ? c.intermediate_size / p.top_k : 0;
    KVASIR_ASSIGN_OR_RETURN(p.expert_intermediate_size, k.integer_or("expert_feed_forward_length", fallback));
    KVASIR_ASSIGN_OR_RETURN(p.shared_intermediate_size,
                            k.integer_or("expert_shared_feed_forward_length", c.intermediate_size));
    if (p.shared_intermediate_size < 1) return invalid_argument("GGUF: qwen2moe needs a shared expert size");
    p.renormalize = false;
    return set_moe_params(p, c, "GGUF");
  }
};

}  // namespace

const ModelFamily& qwen2_moe_family() {
  static const Qwen2MoeFamily kFamily;
  return kFamily;
}

}  // namespace kvasir
