// DeepSeek-V2 and V2-Lite (HF DeepseekV2ForCausalLM, model_type "deepseek_v2"), and every GGUF
// "deepseek2" file: llama.cpp's converter writes V2, V2-Lite and V3 under that one architecture.
// Multi-head latent attention with a latent KV cache (model/mla_attention.h); the first
// first_k_dense_replace layers have the dense gated MLP, the others MoE with V2's softmax router,
// greedy or group-limited (families/deepseek.h, deepseek_moe.h).
#include "model/families/deepseek.h"

namespace kvasir {

namespace {

class DeepseekV2Family final : public DeepseekFamily {
 public:
  DeepseekV2Family()
      : DeepseekFamily("deepseek_v2", {"deepseek2"}, {"deepseek_v2"}, {"DeepseekV2ForCausalLM"},
                       DeepseekRouter::kV2) {}
};

}  // namespace

const ModelFamily& deepseek_v2_family() {
  static const DeepseekV2Family kFamily;
  return kFamily;
}

}  // namespace kvasir
