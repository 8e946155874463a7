// The head of speculative method "eagle" (an EAGLE-1/2 head, model/draft_heads/eagle_head.h) or "eagle3" (an
// EAGLE-3 head, model/draft_heads/eagle3_head.h): its config.json read against the target's, its weights
// bound on the target's backend (model.safetensors of an HF directory, or random ones from its
// config.json with --load-format dummy), the target told which hidden states to keep, and the
// head's own KV cache. Must not run anything: the runner's EagleProposer does.
#pragma once

#include <memory>

#include "model/draft_heads/draft_head.h"
#include "model/kv_cache.h"
#include "setup/engine_args.h"
#include "setup/loaded_model.h"

namespace kvasir {

struct LoadedEagleHead {
  std::unique_ptr<WeightSource> weights;  // the head's weights stay mapped while it runs
  std::unique_ptr<DraftHead> head;
  std::unique_ptr<KvCache> cache;  // stable address: the runner's proposer keeps a reference
};

// args.speculative.method picks the head kind ("eagle" or "eagle3"). Head KV blocks: as for a
// draft model (setup/draft_model.h's num_draft_kv_blocks).
StatusOr<LoadedEagleHead> load_eagle_head(const EngineArgs& args, LoadedModel& target, int target_kv_blocks);

}  // namespace kvasir
