// Gemma, Gemma 2 and Gemma 3: GELU-tanh MLP, embeddings scaled by sqrt(hidden), HF norms stored as
// w and used as 1 + w (GGUF files already hold 1 + w), tied embeddings by default. Gemma 2/3 add
// sandwich norms and alternate sliding and global layers; Gemma 3 adds QK-norm and gives sliding
// layers their own, unscaled RoPE base. The 27B models scale attention by hidden / heads.
#include "model/model_family.h"

namespace kvasir {

namespace {

ConfigTraits gemma_traits(std::string_view family) {
  ConfigTraits t;
  t.family = family;
  t.activation = Activation::kGeluTanh;
  t.gelu_means_tanh = true;
  t.scale_embeddings = true;
  t.hf_norm_plus_one = true;
  t.tie_embeddings = true;
  return t;
}

}  // namespace

const ModelFamily& gemma_family() {
  static const DenseFamily kFamily(gemma_traits("gemma"), {"gemma"}, {"gemma"},
                                   {"GemmaForCausalLM"});
  return kFamily;
}

const ModelFamily& gemma2_family() {
  static const DenseFamily kFamily(
      [] {
        ConfigTraits t = gemma_traits("gemma2");
        t.post_block_norms = true;
        t.sliding = SlidingLayers::kPeriodic;
        t.sliding_period = 2;
        t.large_model_layers = 46;
        return t;
      }(),
      {"gemma2"}, {"gemma2"}, {"Gemma2ForCausalLM"});
  return kFamily;
}

const ModelFamily& gemma3_family() {
  static const DenseFamily kFamily(
      [] {
        ConfigTraits t = gemma_traits("gemma3");
        t.post_block_norms = true;
        t.qk_norm = true;
        t.sliding = SlidingLayers::kPeriodic;
        t.sliding_period = 6;
        t.sliding_period_in_config = true;
        t.rope_theta = 1000000.0;
        t.rope_theta_local = 10000.0;  // llama.cpp hard-codes it for GGUF files too
        t.large_model_layers = 62;
        return t;
      }(),
      // HF "gemma3_text" is the text model; a multimodal "gemma3" config's text_config is read.
      {"gemma3"}, {"gemma3", "gemma3_text"}, {"Gemma3ForCausalLM"});
  return kFamily;
}

}  // namespace kvasir
