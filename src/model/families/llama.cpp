// Llama 2/3 (SmolLM2 and most llama-style checkpoints) and Mistral: the plain decoder. GGUF
// "llama" files hold Q/K rows permuted for interleaved RoPE (llama.cpp's converter); Mistral
// GGUFs are written as "llama" too, so the mistral family is HF-only.
#include "model/model_family.h"

namespace kvasir {

const ModelFamily& llama_family() {
  static const DenseFamily kFamily(
      ConfigTraits{
          .family = "llama",
          .gguf_rope_style = RopeStyle::kInterleaved,
      },
      {"llama"}, {"llama"}, {"LlamaForCausalLM"});
  return kFamily;
}

const ModelFamily& mistral_family() {
  static const DenseFamily kFamily(
      ConfigTraits{
          .family = "mistral",
          .sliding = SlidingLayers::kAll,  // every layer when config.json sets sliding_window
          .gguf_rope_style = RopeStyle::kInterleaved,
      },
      {}, {"mistral"}, {"MistralForCausalLM"});
  return kFamily;
}

}  // namespace kvasir
