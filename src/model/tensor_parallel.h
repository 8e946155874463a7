// Tensor parallelism (Megatron-style, vLLM's layout) for the generic decoder: which part of each
// weight a rank holds and the config of its shard. Column-parallel q/k/v and gate/up (a rank's
// heads, its slice of the MLP's rows), row-parallel o and down (the matching input columns; the
// model all-reduces their outputs), vocab-parallel embedding and lm_head (a rank's vocabulary
// rows, padded to equal shards; the model all-reduces the embedding and gathers the logits); KV
// heads split, or replicated when there are fewer KV heads than ranks. Norms are replicated.
// Roles only one family has (a MoE family's experts) are split as that family says
// (ModelFamily::tensor_parallel_split); a role nobody knows how to split is refused naming the
// family, never silently replicated.
// Plain functions over ModelConfig and WeightManifest: no tensors, no communication.
#pragma once

#include <cstdint>
#include <functional>

#include "common/status.h"
#include "config/model_config.h"
#include "model/weight_manifest.h"

namespace kvasir {

namespace dist {
class Communicator;
}

// How a rank holds one weight of a family's own roles: whole, or its equal share of the spec's
// output rows (column-parallel; of every matrix of a [E, rows, cols] stack), or of its input
// columns (row-parallel: the last dimension; the model all-reduces the block's output).
enum class TensorParallelSplit { kReplicate, kRows, kColumns };

// The group a model shard belongs to. size 1 (the default) is the unsharded model.
struct TensorParallelGroup {
  int rank = 0;
  int size = 1;
  dist::Communicator* comm = nullptr;  // required when size > 1; not owned
};

// Rank `rank`'s rows of the vocabulary: [begin, begin + rows); every shard is `padded_rows`
// long (the last ones pad with zero rows), so the gathered logits have a fixed layout.
struct VocabShard {
  int64_t begin = 0;
  int64_t rows = 0;
  int64_t padded_rows = 0;
};
VocabShard vocab_shard(int64_t vocab_size, int rank, int size);

// The config of rank `rank`'s shard: num_heads, num_kv_heads and intermediate_size are the
// rank's, and the family's own numbers (ModelFamily::shard_family_params: a MoE family's expert
// sizes); vocab_size stays the full vocabulary. InvalidArgument (vLLM's wording) when the model
// cannot be split `size` ways.
StatusOr<ModelConfig> shard_config(const ModelConfig& full, int rank, int size);

// Rewrites a manifest of the full model so that each weight names only rank `rank`'s part (row
// ranges for column- and vocab-parallel weights, column ranges for row-parallel ones) with its
// shard shape. Unimplemented for a role it cannot split, unless the weight is optional and
// `present` says the checkpoint lacks it.
Status shard_manifest(WeightManifest& manifest, const ModelConfig& full, int rank, int size,
                      const std::function<bool(const WeightSpec&)>& present);

// Whether a model of `full` whose checkpoint holds the weights `present` says can run split
// `size` ways: every rank's config and manifest are made (no weight is read), so a model that
// cannot is refused before any worker starts, with the reason shard_config or shard_manifest gives.
Status check_tensor_parallel(const ModelConfig& full, int size, const std::function<bool(const WeightSpec&)>& present);

}  // namespace kvasir
