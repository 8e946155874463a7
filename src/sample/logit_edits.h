// The sparse, in-place logit edits that precede sampling: logit_bias, the min_tokens mask and
// the repetition/frequency/presence penalties (steps 1-4 in sampler.h). Every edit is logged so
// the row can be restored to the raw logits that logprobs need. Must not touch unedited entries.
#pragma once

#include <span>

#include "sample/sampler.h"
#include "sample/sampler_workspace.h"

namespace kvasir {

// Applies steps 1-4 to `row` [vocab_size], logging (id, old value) into ws->undo.
void apply_logit_edits(std::span<float> row, const SamplingRequestState& state,
                       SamplerWorkspace* ws);

// Puts back every logged value, newest first, and clears the log.
void undo_logit_edits(std::span<float> row, SamplerWorkspace* ws);

}  // namespace kvasir
