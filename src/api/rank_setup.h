// What every rank of an engine builds before it runs steps, in the same way on every rank: the
// model (its shard under tensor parallelism), the KV cache (one block count agreed by all ranks,
// since the scheduler's block ids index every rank's cache) and the ModelRunner (same seed and EOS
// ids, so every rank samples the same tokens). Shared by LLM::create (rank 0) and the workers.
#pragma once

#include <memory>
#include <string>

#include "api/tensor_parallel_group.h"
#include "runner/model_runner.h"
#include "setup/draft_model.h"
#include "setup/eagle_head_setup.h"
#include "setup/engine_args.h"
#include "setup/loaded_model.h"

namespace kvasir {

struct RankSetup {
  // Pipeline and tensor parallelism together: this rank's stage's own tensor-parallel group
  // (the group's communicator links every rank of every stage). Declared first: it outlives the
  // model that uses it.
  std::unique_ptr<dist::Communicator> stage_comm;
  std::unique_ptr<LoadedModel> model;
  int num_kv_blocks = 0;
  int max_model_len = 0;
  std::unique_ptr<KvCache> cache;  // stable address: the runner keeps a reference
  LoadedDraftModel draft;          // speculative method "draft_model" only; before the runner, which uses it
  LoadedEagleHead eagle_head;      // speculative method "eagle" / "eagle3" only; before the runner, which uses it
  std::unique_ptr<ModelRunner> runner;
};

// Rank 0, before it starts any worker: whether the model can be split args.tensor_parallel_size
// ways (its family, its sizes; check_tensor_parallel), its experts distributed with
// --enable-expert-parallel (a model without experts is refused, whatever the size). Opens the checkpoint and reads no weight;
// with --load-format dummy each rank's load says it instead.
Status check_tensor_parallel_model(const EngineArgs& args);
// The same for args.pipeline_parallel_size stages (every stage gets at least one layer; a
// $VLLM_PP_LAYER_PARTITION that fits the model).
Status check_pipeline_parallel_model(const EngineArgs& args);

// $VLLM_PP_LAYER_PARTITION, or empty.
std::string pipeline_layer_partition();

// tp: the group this process belongs to (tensor x pipeline parallel ranks, dist/parallel_layout.h),
// or null without either.
StatusOr<RankSetup> set_up_rank(const EngineArgs& args, TensorParallelProcesses* tp);

}  // namespace kvasir
