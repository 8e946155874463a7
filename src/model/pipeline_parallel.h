// Pipeline parallelism (vLLM's layout) for the generic decoder: which contiguous layers a stage
// holds, and how one step's batch is cut into micro-batches of whole sequences so that the stages
// work on different micro-batches at once (stage 0 runs micro-batch 1 while stage 1 runs
// micro-batch 0). Plain functions over numbers and ForwardBatch views: no tensors, no
// communication; DecoderModel does the sends and receives (ModelOptions::pp).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "config/model_config.h"
#include "model/forward_batch.h"

namespace kvasir {

namespace dist {
class Communicator;
}

// The stage a model belongs to. size 1 (the default) is the whole model. comm is the whole
// group's communicator (every stage's ranks, dist/parallel_layout.h order): the hidden states go
// point to point to the same tensor-parallel rank of the next stage, and the last stage
// broadcasts the logits to every rank so that every rank samples alike.
struct PipelineParallelGroup {
  int rank = 0;
  int size = 1;
  dist::Communicator* comm = nullptr;  // required when size > 1; not owned
};

// Layers [begin, end) of the whole model.
struct LayerRange {
  int begin = 0;
  int end = 0;
  int count() const { return end - begin; }
};

// Stage `rank`'s layers of `num_layers` split `size` ways: vLLM's get_pp_indices, as even as
// possible, a remainder given one layer each to the stages before the last (which also projects
// the logits). `partition` is vLLM's VLLM_PP_LAYER_PARTITION ("12,12,8": one count per stage,
// summing to num_layers); empty for the even split. InvalidArgument naming the problem when the
// model has fewer layers than stages or the partition does not fit.
StatusOr<LayerRange> pipeline_stage_layers(int num_layers, int rank, int size, const std::string& partition = "");

// Whether a model of `config` can be split into `size` stages (every stage's layers exist).
Status check_pipeline_parallel(const ModelConfig& config, int size, const std::string& partition = "");

// The sequence bounds of up to `parts` micro-batches of `m`: bounds[i]..bounds[i+1] are the
// sequences of micro-batch i, each non-empty, their token counts as even as whole sequences allow.
std::vector<int> micro_batch_bounds(const AttentionMetadata& m, int parts);

// Sequences [seq_begin, seq_end) of `batch` as a batch of their own (its tokens are rows
// [query_start_loc[seq_begin], query_start_loc[seq_end]) of the whole). query_start_loc is
// rebased into `qsl` (at least seq_end - seq_begin + 1 long), the rest are views into `batch`.
// Its logits_indices are empty: the whole batch's logits are computed after every micro-batch.
ForwardBatch micro_batch(const ForwardBatch& batch, int seq_begin, int seq_end, int32_t* qsl);

}  // namespace kvasir
