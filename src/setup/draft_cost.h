// What a drafting model costs the draft budget (sched/draft_budget.h): the weights one of its
// passes reads against the weights one target step reads, from the two configs. A pass of either
// is bound by reading its weights at the batch sizes where speculation pays, so this ratio is what
// one draft token costs a request, in units of what one target token is worth. 0 for the host
// proposers (ngram, suffix), whose drafts cost next to nothing.
#pragma once

#include "config/model_config.h"
#include "setup/engine_args.h"

namespace kvasir {

// Weights read per token by a dense decoder layer stack of `c` plus its embedding row and lm_head
// (MoE layers counted as dense ones of intermediate_size: an upper bound). In parameters.
double decode_weight_params(const ModelConfig& c);

// args.speculative's drafting model (a draft_model's config, an EAGLE head's config.json) against
// `target`: its params per pass / the target's per step. 0 for host proposers and when the config
// cannot be read (the proposer's own load says why).
double draft_cost_ratio(const EngineArgs& args, const ModelConfig& target);

}  // namespace kvasir
