// Tensor parallelism (Megatron-style, vLLM's layout) for the generic decoder: which part of each
// weight a rank holds and the config of its shard. Column-parallel q/k/v and gate/up (a rank's
// heads, its slice of the MLP's rows), row-parallel o and down (the matching input columns; the
// model all-reduces their outputs, and a row-parallel bias is held by rank 0 only, so the sum
// adds it once), vocab-parallel embedding and lm_head (a rank's vocabulary rows, padded to equal
// shards; the model all-reduces the embedding and gathers the logits); KV heads split, or
// replicated when there are fewer KV heads than ranks. Norms are replicated.
// Roles only one family has (a MoE family's experts, MLA's latent projections, GPT-OSS's sinks)
// are split as that family says (ModelFamily::tensor_parallel_split); a role nobody knows how to
// split is refused naming the family, never silently replicated.
// Expert parallelism (vLLM's --enable-expert-parallel) changes only the routed experts: each rank
// holds whole experts, its contiguous share (expert_range), instead of every expert's slice; the
// MoE block's output is still a partial sum over ranks, all-reduced with the rest of the MLP.
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

// How a rank holds one weight of a family's own roles:
enum class TensorParallelSplit {
  kReplicate,  // whole on every rank
  // Its equal share of the output rows (column-parallel): of a matrix, of every matrix of an
  // [E, rows, cols] stack, of a bias [n], of every bias of an [E, n] stack.
  kRows,
  kColumns,    // its equal share of the input columns (row-parallel: the last dimension)
  kLeading,    // its equal share of the first dimension (whole heads of an [H, ...] per-head stack)
  kExperts,    // its experts (expert_range) of an [E, ...] stack: expert parallelism
  kFirstRank,  // whole on rank 0, absent on the others: a row-parallel bias, added once by the sum
  kAbsent,     // not held by this rank (another rank's expert under expert parallelism)
};

// One rank's place in its group, as the sharding functions read it.
struct ShardPosition {
  int rank = 0;
  int size = 1;
  bool expert_parallel = false;  // routed experts whole, distributed over the ranks
};

// The group a model shard belongs to. size 1 (the default) is the unsharded model.
struct TensorParallelGroup {
  int rank = 0;
  int size = 1;
  dist::Communicator* comm = nullptr;  // required when size > 1; not owned
  bool expert_parallel = false;        // --enable-expert-parallel (ShardPosition)
};

// Experts [first, first + count) of a layer's num_experts: those rank `rank` of `size` holds
// under expert parallelism, vLLM's linear placement (the first num_experts % size ranks hold one
// more when the count does not divide).
struct ExpertRange {
  int first = 0;
  int count = 0;
  bool holds(int expert) const { return expert >= first && expert < first + count; }
};
ExpertRange expert_range(int num_experts, int rank, int size);

// The routed experts a shard's MoE layers hold: its expert_range under expert parallelism, else
// all of them (every MoE family keeps its expert count in family_params["num_experts"]).
ExpertRange held_experts(const ModelConfig& shard);

// Divides family_params[key] (when present) by `size` for a shard; InvalidArgument in vLLM's
// wording when it does not divide.
Status divide_family_param(ModelConfig& shard, const char* key, int size);

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
// sizes); vocab_size stays the full vocabulary. With expert_parallel, the experts it holds
// (held_experts). InvalidArgument (vLLM's wording) when the model cannot be split `size` ways,
// or has no experts to distribute.
StatusOr<ModelConfig> shard_config(const ModelConfig& full, int rank, int size, bool expert_parallel = false);

// Rewrites a manifest of the full model so that each weight names only rank `rank`'s part (row
// ranges for column- and vocab-parallel weights, column ranges for row-parallel ones) with its
// shard shape; a weight the rank does not hold (another rank's expert, a row-parallel bias off
// rank 0) is removed. Unimplemented for a role it cannot split, unless the weight is optional and
// `present` says the checkpoint lacks it.
Status shard_manifest(WeightManifest& manifest, const ModelConfig& full, int rank, int size,
                      const std::function<bool(const WeightSpec&)>& present, bool expert_parallel = false);

// Whether a model of `full` whose checkpoint holds the weights `present` says can run split
// `size` ways: every rank's config and manifest are made (no weight is read), so a model that
// cannot is refused before any worker starts, with the reason shard_config or shard_manifest gives.
Status check_tensor_parallel(const ModelConfig& full, int size, const std::function<bool(const WeightSpec&)>& present,
                             bool expert_parallel = false);

}  // namespace kvasir
