// The EAGLE-3 head of speculative method "eagle3": its config.json read against the target's,
// its weights bound on the target's backend (model.safetensors of an HF directory, or random
// ones from its config.json with --load-format dummy), the target told which hidden states to
// keep, and the head's own KV cache. Must not run anything: the runner's Eagle3Proposer does.
#pragma once

#include <memory>

#include "model/eagle3_head.h"
#include "model/kv_cache.h"
#include "setup/engine_args.h"
#include "setup/loaded_model.h"

namespace kvasir {

struct LoadedEagle3Head {
  std::unique_ptr<WeightSource> weights;  // the head's weights stay mapped while it runs
  std::unique_ptr<Eagle3Head> head;
  std::unique_ptr<KvCache> cache;  // stable address: the runner's proposer keeps a reference
};

// Head KV blocks: as for a draft model (setup/draft_model.h's num_draft_kv_blocks).
StatusOr<LoadedEagle3Head> load_eagle3_head(const EngineArgs& args, LoadedModel& target, int target_kv_blocks);

}  // namespace kvasir
