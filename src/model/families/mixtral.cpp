// Mixtral (HF MixtralForCausalLM, model_type "mixtral"): the Mistral decoder with a MoE MLP in
// every layer: softmax over num_local_experts, the top num_experts_per_tok renormalized (always),
// experts w1 (gate), w3 (up), w2 (down) of intermediate_size. llama.cpp writes Mixtral GGUFs as
// general.architecture "llama" with llama.expert_count > 0 and the experts stacked
// (blk.N.ffn_{gate,up,down}_exps, router blk.N.ffn_gate_inp): this family claims those files, so
// the llama family stays the plain decoder. GGUF Q/K rows are permuted like llama's.
#include "model/moe_family.h"

namespace kvasir {
namespace {

class MixtralFamily final : public MoeFamily {
 public:
  MixtralFamily()
      : MoeFamily(
            ConfigTraits{
                .family = "mixtral",
                .sliding = SlidingLayers::kAll,  // every layer when config.json sets sliding_window
                .gguf_rope_style = RopeStyle::kInterleaved,
            },
            {}, {"mixtral"}, {"MixtralForCausalLM"},
            MoeHfNames{.router = "block_sparse_moe.gate.weight",
                       .expert_prefix = "block_sparse_moe.experts.",
                       .gate = "w1",
                       .up = "w3",
                       .down = "w2"},
            /*shared_expert_gate=*/false) {}

  bool claims_gguf(std::string_view arch, const GgufKeys& keys) const override {
    if (arch != "llama") return false;
    auto n = keys.integer_or("expert_count", 0);
    return n.ok() && *n > 0;
  }

  Status read_hf_extras(const HfKeys& k, ModelConfig& c) const override {
    MoeParams p;
    KVASIR_ASSIGN_OR_RETURN(p.num_experts, k.positive_int_or("num_local_experts", 8));
    KVASIR_ASSIGN_OR_RETURN(p.top_k, k.positive_int_or("num_experts_per_tok", 2));
    p.expert_intermediate_size = c.intermediate_size;
    p.renormalize = true;
    return set_moe_params(p, c, k.where());
  }

  Status read_gguf_extras(const GgufKeys& k, ModelConfig& c) const override {
    MoeParams p;
    KVASIR_ASSIGN_OR_RETURN(p.num_experts, k.integer("expert_count"));
    KVASIR_ASSIGN_OR_RETURN(p.top_k, k.integer("expert_used_count"));
    KVASIR_ASSIGN_OR_RETURN(p.expert_intermediate_size,
                            k.integer_or("expert_feed_forward_length", c.intermediate_size));
    p.renormalize = true;
    return set_moe_params(p, c, "GGUF");
  }
};

}  // namespace

const ModelFamily& mixtral_family() {
  static const MixtralFamily kFamily;
  return kFamily;
}

}  // namespace kvasir
