// `kvasir bench latency --num-speculative-tokens-forced K`: the decode phase run as speculative
// verify steps, to measure what a K-draft verify step costs against a plain decode step (issue 16's
// bars). Each step schedules, per sequence, its last token and K drafts in the verify layout the
// engine uses on a GPU (one-query rows: a pure decode step, graph-replayable), samples every
// position greedily and verifies the drafts (Backend::sample_and_verify on a device, the host twin
// on the CPU), then commits all 1 + K positions whatever the verify kept ("forced acceptance"),
// so every step verifies exactly K drafts. Drafts repeat the sequence's last two tokens: on dummy
// weights, whose greedy output is a 2-cycle, they are the target's own greedy tokens and the
// reported acceptance is near 100%; on real weights it is lower and the step cost the same.
// bench latency runs ceil(output_len / (1 + K)) such steps, so they cover the contexts the plain
// run's output_len steps cover, and reports ms per step.
// Test and measurement only: not a decoding method, its tokens are not a model's output.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "common/status.h"
#include "model/decoder_model.h"
#include "runner/contiguous_batch.h"

namespace kvasir {

struct ForcedVerifyResult {
  int64_t steps = 0;
  int64_t draft_tokens = 0;     // K per sequence per step
  int64_t accepted_tokens = 0;  // drafts the verify kept (equal to the target's greedy tokens)
};

// After the prefill of `cb`'s sequences: `last[s]` = sequence s's last prompt token, `next[s]` =
// its greedy next token. Runs `num_steps` verify steps of num_drafts drafts per sequence.
// device: sample and verify on the device (the backend has device sampling); else host argmax.
// after_step (optional): called after each step with the 1 + K tokens each sequence committed
// and the token after them (what a proposer that drafts from the step is handed: an EAGLE head's
// pass over the step's 1 + K accepted positions, as at full acceptance).
using ForcedVerifyStepFn =
    std::function<Status(const std::vector<std::vector<int32_t>>& committed, const std::vector<int32_t>& next)>;
StatusOr<ForcedVerifyResult> run_forced_verify_decode(DecoderModel& model, KvCache& cache, ContiguousBatch& cb,
                                                      std::vector<int32_t> last, std::vector<int32_t> next,
                                                      int num_steps, int num_drafts, bool device,
                                                      const ForcedVerifyStepFn& after_step = {});

}  // namespace kvasir
