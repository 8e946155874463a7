// MoeFamily: what the softmax-top-k MoE families (Mixtral, Qwen2-MoE, Qwen3-MoE) share: their
// expert numbers kept in ModelConfig::family_params under one set of keys, the manifest (the dense
// decoder's with the MLP of every sparse layer replaced by replace_mlp_with_moe), and make_mlp
// (the MoE block on sparse layers, the generic gated MLP on dense ones). A family file states its
// names, traits, HF weight names and reads its own config keys into set_moe_params.
// Must not know any one family.
#pragma once

#include <string>
#include <vector>

#include "model/model_family.h"
#include "model/moe_block.h"

namespace kvasir {

// What a family read from its config file, before it becomes family_params.
struct MoeParams {
  int64_t num_experts = 0;
  int64_t top_k = 0;
  int64_t expert_intermediate_size = 0;
  bool renormalize = false;             // HF norm_topk_prob
  int64_t shared_intermediate_size = 0;  // 0: no shared expert
  // Layers with a dense MLP instead (HF mlp_only_layers, and those decoder_sparse_step skips).
  std::vector<int64_t> dense_layers;
};

class MoeFamily : public ModelFamily {
 public:
  WeightManifest manifest(const ModelConfig& config) const override;
  StatusOr<std::unique_ptr<MlpBlock>> make_mlp(const BlockInit& init) const override;
  // Experts sharded by tensor parallelism, or distributed whole by expert parallelism
  // (moe_tensor_parallel_split); the shard's shared-expert intermediate size is the rank's, and
  // its experts' too unless they are whole.
  std::optional<TensorParallelSplit> tensor_parallel_split(const std::string& role, const ModelConfig& full,
                                                           const ShardPosition& at) const override;
  Status shard_family_params(const ModelConfig& full, ModelConfig& shard, const ShardPosition& at) const override;

 protected:
  MoeFamily(ConfigTraits traits, std::vector<std::string> gguf_names, std::vector<std::string> hf_model_types,
            std::vector<std::string> hf_architectures, MoeHfNames hf_names, bool shared_expert_gate)
      : ModelFamily(traits, std::move(gguf_names), std::move(hf_model_types), std::move(hf_architectures)),
        hf_names_(std::move(hf_names)),
        shared_expert_gate_(shared_expert_gate) {}

  // Validates `p` against `config` (naming `where`, e.g. "config.json") and stores it in
  // config.family_params.
  static Status set_moe_params(const MoeParams& p, ModelConfig& config, const std::string& where);
  // HF decoder_sparse_step / mlp_only_layers -> MoeParams::dense_layers.
  static Status read_hf_dense_layers(const HfKeys& keys, const ModelConfig& config, MoeParams& p);

 private:
  MoeLayerConfig layer_config(const ModelConfig& config) const;
  static bool is_moe_layer(const ModelConfig& config, int layer);

  MoeHfNames hf_names_;
  bool shared_expert_gate_;
};

}  // namespace kvasir
