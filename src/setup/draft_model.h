// The draft model of speculative method "draft_model": loaded like the target (GGUF or HF
// directory, any format; same device), checked to share the target's vocabulary, and given its
// own KV cache. Must not run anything: the runner's DraftModelProposer does.
#pragma once

#include <memory>

#include "model/kv_cache.h"
#include "setup/engine_args.h"
#include "setup/kv_cache_sizing.h"
#include "setup/loaded_model.h"

namespace kvasir {

struct LoadedDraftModel {
  std::unique_ptr<LoadedModel> model;
  std::unique_ptr<KvCache> cache;  // stable address: the runner's proposer keeps a reference
};

// Draft KV blocks: the target's token capacity (a draft holds no more tokens per request than the
// target, plus its k - 1 unverified drafts; preempted requests hold none on either side) plus, per
// sequence, the blocks those k - 1 drafts and a partly filled block can add. Capped at 2^24.
int num_draft_kv_blocks(int target_kv_blocks, int block_size, int max_num_seqs, int num_speculative_tokens);

// An invalid_argument naming what differs when the draft's vocabulary is not the target's: the
// logits width, the tokenizer's size, BOS/EOS ids, or the ids a few probe strings encode to.
Status check_same_vocabulary(const LoadedModel& target, const LoadedModel& draft);

// Loads args.speculative.draft_model onto the target's backend (not with its --quantization,
// which names the target's checkpoint format; with --load-format dummy a config.json with random
// weights and the target's --tokenizer) and checks the vocabulary; no cache yet. Load it before
// the target's KV cache is planned, so its weights count as in use, and plan with
// draft_kv_companion: on a device the draft's cache shares the target's budget.
StatusOr<LoadedDraftModel> load_draft_model(const EngineArgs& args, const LoadedModel& target);
CompanionKv draft_kv_companion(const LoadedDraftModel& draft, const EngineArgs& args);
// Allocates the draft's num_draft_kv_blocks blocks for a target cache of target_kv_blocks.
Status allocate_draft_kv_cache(LoadedDraftModel& draft, const EngineArgs& args, int target_kv_blocks);
// Both: load, then allocate (the target's cache already planned without the draft).
StatusOr<LoadedDraftModel> load_draft_model(const EngineArgs& args, const LoadedModel& target, int target_kv_blocks);

}  // namespace kvasir
