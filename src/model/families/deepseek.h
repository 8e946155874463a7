// What DeepSeek-V2 and DeepSeek-V3 share (families/deepseek_v2.cpp, deepseek_v3.cpp): multi-head
// latent attention (model/mla_attention.h) in every layer, a dense gated MLP in the first
// first_k_dense_replace layers and mixture-of-experts layers after them (families/deepseek_moe.h,
// the router each version has), and the config keys that say so, in HF config.json (both
// model_types) and in llama.cpp's GGUF "deepseek2" (which holds V3 as well). Must not be listed
// in the registry itself: the two families are.
#pragma once

#include <string>
#include <vector>

#include "model/families/deepseek_moe.h"
#include "model/model_family.h"

namespace kvasir {

class DeepseekFamily : public ModelFamily {
 public:
  Status read_hf_extras(const HfKeys& keys, ModelConfig& config) const override;
  Status read_gguf_extras(const GgufKeys& keys, ModelConfig& config) const override;
  WeightManifest manifest(const ModelConfig& config) const override;
  StatusOr<std::unique_ptr<AttentionBlock>> make_attention(const BlockInit& init) const override;
  StatusOr<std::unique_ptr<MlpBlock>> make_mlp(const BlockInit& init) const override;
  // MLA split by heads (mla_tensor_parallel_split), the MoE layers as every MoE family's
  // (moe_tensor_parallel_split, shard_moe_sizes).
  std::optional<TensorParallelSplit> tensor_parallel_split(const std::string& role, const ModelConfig& full,
                                                           const ShardPosition& at) const override;
  Status shard_family_params(const ModelConfig& full, ModelConfig& shard, const ShardPosition& at) const override;

 protected:
  // router: whose HF config keys this family reads (deepseek_moe.h); V3 also reads
  // rope_interleave (V2's transformers code always rotates interleaved pairs).
  DeepseekFamily(std::string_view name, std::vector<std::string> gguf_names,
                 std::vector<std::string> hf_model_types, std::vector<std::string> hf_architectures,
                 DeepseekRouter router);

 private:
  DeepseekRouter router_;
};

}  // namespace kvasir
