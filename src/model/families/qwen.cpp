// Qwen2 (q/k/v biases, always) and Qwen3 (QK-norm, no biases). Both may slide the window over the
// layers from max_window_layers on when use_sliding_window is set; GGUF files keep HF's
// half-split RoPE pairing.
#include "model/model_family.h"

namespace kvasir {

const ModelFamily& qwen2_family() {
  static const DenseFamily kFamily(
      ConfigTraits{
          .family = "qwen2",
          .attention_bias = true,
          .attention_bias_always = true,
          .sliding = SlidingLayers::kAfterMaxWindowLayer,
      },
      {"qwen2"}, {"qwen2"}, {"Qwen2ForCausalLM"});
  return kFamily;
}

const ModelFamily& qwen3_family() {
  static const DenseFamily kFamily(
      ConfigTraits{
          .family = "qwen3",
          .qk_norm = true,
          .sliding = SlidingLayers::kAfterMaxWindowLayer,
      },
      {"qwen3"}, {"qwen3"}, {"Qwen3ForCausalLM"});
  return kFamily;
}

}  // namespace kvasir
