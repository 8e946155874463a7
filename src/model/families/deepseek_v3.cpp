// DeepSeek-V3 (HF DeepseekV3ForCausalLM, model_type "deepseek_v3"): the V2 architecture
// (families/deepseek.h) with RoPE pairing chosen by rope_interleave (interleaved by default) and
// the noaux_tc router (sigmoid, correction bias, groups by top-2 sum; deepseek_moe.h). Its GGUF
// files are llama.cpp's "deepseek2" (families/deepseek_v2.cpp).
#include "model/families/deepseek.h"

namespace kvasir {

namespace {

class DeepseekV3Family final : public DeepseekFamily {
 public:
  DeepseekV3Family()
      : DeepseekFamily("deepseek_v3", {}, {"deepseek_v3"}, {"DeepseekV3ForCausalLM"},
                       DeepseekRouter::kV3) {}
};

}  // namespace

const ModelFamily& deepseek_v3_family() {
  static const DeepseekV3Family kFamily;
  return kFamily;
}

}  // namespace kvasir
