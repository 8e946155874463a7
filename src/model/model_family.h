// ModelFamily: everything that makes one architecture family different from the generic decoder,
// in one place: the names it goes by (GGUF general.architecture, HF model_type / architectures),
// the facts it states about its config files (ConfigTraits) plus any keys of its own, its weight
// manifest, and the blocks it runs. One file per family under model/families/, listed once in
// model/registry.cpp. Must not hold mutable state: a family is a constant description.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/config_readers.h"
#include "config/gguf_keys.h"
#include "config/hf_keys.h"
#include "model/blocks.h"
#include "model/tensor_parallel.h"
#include "model/weight_manifest.h"

namespace kvasir {

class ModelFamily {
 public:
  virtual ~ModelFamily() = default;

  // The registry name, ModelConfig::architecture ("llama", "gemma3", ...).
  std::string_view name() const { return traits_.family; }
  const ConfigTraits& config_traits() const { return traits_; }
  // GGUF general.architecture values this family reads.
  const std::vector<std::string>& gguf_architectures() const { return gguf_names_; }
  // HF model_type values ("gemma3_text") and architectures ("Gemma3ForCausalLM").
  const std::vector<std::string>& hf_model_types() const { return hf_model_types_; }
  const std::vector<std::string>& hf_architectures() const { return hf_architectures_; }

  // Whether this family reads a GGUF file that llama.cpp wrote under another family's
  // architecture name (Mixtral as "llama", told apart by its expert count). The registry asks
  // every family before it looks the architecture up by name. Default: no.
  virtual bool claims_gguf(std::string_view architecture, const GgufKeys& keys) const { return false; }

  // Config keys only this family reads, after the generic reader filled the shared ones and
  // before validation. Default: none.
  virtual Status read_hf_extras(const HfKeys& keys, ModelConfig& config) const;
  virtual Status read_gguf_extras(const GgufKeys& keys, ModelConfig& config) const;

  // The weights a model of `config` binds. Default: dense_decoder_manifest(config).
  virtual WeightManifest manifest(const ModelConfig& config) const;

  // The blocks of one layer. Defaults: the generic GQA attention and gated MLP (blocks.h). A MoE
  // family overrides make_mlp (its expert weights are roles in its manifest); an MLA family
  // overrides make_attention. Nothing else changes.
  virtual StatusOr<std::unique_ptr<AttentionBlock>> make_attention(const BlockInit& init) const;
  virtual StatusOr<std::unique_ptr<MlpBlock>> make_mlp(const BlockInit& init) const;

  // Tensor parallelism (model/tensor_parallel.h) of what only this family has: how rank `at`
  // holds a weight role of a model of `full` (nullopt: a role the generic decoder splits, or one
  // nobody can split yet, which is refused naming the family), and the family's own numbers in
  // ModelConfig::family_params of the rank's shard (InvalidArgument when one does not divide).
  // Asked before the generic layout, so a family may split a generic role its own way. Defaults:
  // no roles, no numbers.
  virtual std::optional<TensorParallelSplit> tensor_parallel_split(const std::string& role, const ModelConfig& full,
                                                                   const ShardPosition& at) const;
  virtual Status shard_family_params(const ModelConfig& full, ModelConfig& shard, const ShardPosition& at) const;

 protected:
  ModelFamily(ConfigTraits traits, std::vector<std::string> gguf_names,
              std::vector<std::string> hf_model_types, std::vector<std::string> hf_architectures)
      : traits_(traits),
        gguf_names_(std::move(gguf_names)),
        hf_model_types_(std::move(hf_model_types)),
        hf_architectures_(std::move(hf_architectures)) {}

 private:
  ConfigTraits traits_;
  std::vector<std::string> gguf_names_;
  std::vector<std::string> hf_model_types_;
  std::vector<std::string> hf_architectures_;
};

// A family that is the generic decoder with nothing but its traits and names.
class DenseFamily final : public ModelFamily {
 public:
  DenseFamily(ConfigTraits traits, std::vector<std::string> gguf_names,
              std::vector<std::string> hf_model_types, std::vector<std::string> hf_architectures)
      : ModelFamily(traits, std::move(gguf_names), std::move(hf_model_types),
                    std::move(hf_architectures)) {}
};

}  // namespace kvasir
