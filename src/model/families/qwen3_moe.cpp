// Qwen3-MoE (HF Qwen3MoeForCausalLM, model_type "qwen3_moe"; GGUF "qwen3moe"): the Qwen3 decoder
// (QK-norm, no biases) with a MoE MLP: softmax over num_experts, top num_experts_per_tok,
// renormalized when norm_topk_prob (llama.cpp always renormalizes qwen3moe, and so does every
// released checkpoint), experts of moe_intermediate_size. HF layers listed in mlp_only_layers,
// or skipped by decoder_sparse_step, keep a dense MLP of intermediate_size.
#include "model/moe_family.h"

namespace kvasir {
namespace {

class Qwen3MoeFamily final : public MoeFamily {
 public:
  Qwen3MoeFamily()
      : MoeFamily(
            ConfigTraits{
                .family = "qwen3_moe",
                .qk_norm = true,
                .sliding = SlidingLayers::kAfterMaxWindowLayer,
            },
            {"qwen3moe"}, {"qwen3_moe"}, {"Qwen3MoeForCausalLM"},
            MoeHfNames{.router = "mlp.gate.weight",
                       .expert_prefix = "mlp.experts.",
                       .gate = "gate_proj",
                       .up = "up_proj",
                       .down = "down_proj"},
            /*shared_expert_gate=*/false) {}

  Status read_hf_extras(const HfKeys& k, ModelConfig& c) const override {
    MoeParams p;
    // Hub configs say num_experts; transformers 5 writes num_local_experts.
    KVASIR_ASSIGN_OR_RETURN(int64_t local, k.positive_int_or("num_local_experts", 128));
    KVASIR_ASSIGN_OR_RETURN(p.num_experts, k.positive_int_or("num_experts", local));
    KVASIR_ASSIGN_OR_RETURN(p.top_k, k.positive_int_or("num_experts_per_tok", 8));
    KVASIR_ASSIGN_OR_RETURN(p.expert_intermediate_size, k.positive_int_or("moe_intermediate_size", 768));
    KVASIR_ASSIGN_OR_RETURN(p.renormalize, k.bool_or("norm_topk_prob", false));
    KVASIR_RETURN_IF_ERROR(read_hf_dense_layers(k, c, p));
    return set_moe_params(p, c, k.where());
  }

  Status read_gguf_extras(const GgufKeys& k, ModelConfig& c) const override {
    MoeParams p;
    KVASIR_ASSIGN_OR_RETURN(p.num_experts, k.integer("expert_count"));
    KVASIR_ASSIGN_OR_RETURN(p.top_k, k.integer("expert_used_count"));
    // llama.cpp's default when the key is absent.
    const int64_t fallback = p.top_k > 0 ? c.intermediate_size / p.top_k : 0;
    KVASIR_ASSIGN_OR_RETURN(p.expert_intermediate_size, k.integer_or("expert_feed_forward_length", fallback));
    p.renormalize = true;
    return set_moe_params(p, c, "GGUF");
  }
};

}  // namespace

const ModelFamily& qwen3_moe_family() {
  static const Qwen3MoeFamily kFamily;
  return kFamily;
}

}  // namespace kvasir
