#include "model/model_family.h"

namespace kvasir {

Status ModelFamily::read_hf_extras(const HfKeys&, ModelConfig&) const { return Status(); }

Status ModelFamily::read_gguf_extras(const GgufKeys&, ModelConfig&) const { return Status(); }

WeightManifest ModelFamily::manifest(const ModelConfig& config) const {
  return dense_decoder_manifest(config);
}

StatusOr<std::unique_ptr<AttentionBlock>> ModelFamily::make_attention(const BlockInit& init) const {
  return make_decoder_attention(init);
}

StatusOr<std::unique_ptr<MlpBlock>> ModelFamily::make_mlp(const BlockInit& init) const {
  return make_gated_mlp(init);
}

std::optional<TensorParallelSplit> ModelFamily::tensor_parallel_split(const std::string&, const ModelConfig&,
                                                                      const ShardPosition&) const {
  return std::nullopt;
}

Status ModelFamily::shard_family_params(const ModelConfig&, ModelConfig&, const ShardPosition&) const {
  return Status();
}

}  // namespace kvasir
