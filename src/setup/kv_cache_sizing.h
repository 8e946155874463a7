// KV cache sizing: how long a sequence may be (max_model_len) and how many KV blocks the cache
// gets, from the engine args and the loaded model. On the CPU the budget is --kv-cache-memory; on
// a GPU a profile forward measures what the activations need and the rest (up to
// --gpu-memory-utilization) goes to the cache. Must not allocate the cache or start an engine.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "config/model_config.h"
#include "setup/engine_args.h"

namespace kvasir {

struct LoadedModel;

// --max-model-len when given, else the model's max_position_embeddings capped at the flag's own
// limit (kMaxModelLenLimit): a file may declare any length, and it must not size more than a
// flag could ask for.
int resolve_max_model_len(const EngineArgs& args, const ModelConfig& config);

// The most tokens one sequence can hold in a pool of num_kv_blocks: every block but the null one.
int64_t kv_cache_capacity_tokens(int num_kv_blocks, int block_size);

// max_model_len fitted to the KV cache, as vLLM does: a sequence longer than the whole cache would
// be admitted, run for a while and then fail. Without --max-model-len the length is capped to the
// cache (and the log says why); an explicit --max-model-len past it is an InvalidArgument naming
// both numbers, since silently serving less than was asked would hide a misconfiguration.
StatusOr<int> fit_max_model_len_to_kv_cache(const EngineArgs& args, int max_model_len, int num_kv_blocks);

// The blocks a budget of kv_bytes holds, capped at 2^24; InvalidArgument below 2 blocks (the
// pool keeps one null block, so one block would leave no room for any request).
StatusOr<int> num_kv_blocks_for_budget(int64_t kv_bytes, int64_t bytes_per_block);

// GPU memory for the KV cache: a profile forward of one max_num_batched_tokens-token sequence
// (plus the logits of max_num_seqs rows) settles every activation buffer, GEMM plan and staging
// area; what is left of gpu_memory_utilization * total, minus headroom for CUDA graphs and decode
// scratch, goes to the cache. ResourceExhausted when nothing is left.
StatusOr<int64_t> device_kv_cache_bytes(LoadedModel& model, const EngineArgs& args);

// KV cache another model keeps beside the target's (a draft model's: one draft block per target
// block, plus fixed blocks for its unverified drafts), planned into a device's budget.
struct CompanionKv {
  int64_t bytes_per_block = 0;  // per target block
  int64_t fixed_bytes = 0;
};

// The number of KV blocks for `model` under `args`: the CPU budget, or the device's measured one.
// On a device the companion's cache shares that budget (the target gets fewer blocks); on the CPU
// --kv-cache-memory is the target's alone and the companion's cache comes on top.
StatusOr<int> plan_num_kv_blocks(LoadedModel& model, const EngineArgs& args, const CompanionKv& companion = {});

}  // namespace kvasir
