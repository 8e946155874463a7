// Speculative verification on a backend's sampled ids: which drafts a request keeps and the
// tokens its verify step emits, by sample/rejection_sampler.h's rule (drafts kept while they equal
// the target's samples at their positions; the first differing sample, or the one after the last
// draft, ends the run). The plain data a backend's sample_and_verify() takes, and the host twin of
// the CUDA kernel (cuda/verify_drafts.cu), which the backends without one use.
// Must not sample: ids in, counts and ids out; knows nothing of requests beyond row ranges.
#pragma once

#include <cstdint>

#include "common/status.h"

namespace kvasir {

// One request of a verify step: its 1 + num_drafts sampling rows are logits rows
// [first_row, first_row + 1 + num_drafts); its drafts are drafts[draft_offset, + num_drafts).
// A plain decode row is a request with no drafts.
struct DraftVerifyRow {
  int32_t first_row = 0;
  int32_t num_drafts = 0;
  int32_t draft_offset = 0;
  int32_t unused = 0;  // keeps the record 16 bytes, staged bytewise by device backends
};

// Checks what a backend needs before it reads the rows: requests in ascending first_row order,
// their rows disjoint and inside [0, num_rows), their drafts inside [0, num_draft_tokens).
Status validate_draft_verify_rows(const DraftVerifyRow* requests, int num_requests, int num_rows,
                                  int num_draft_tokens);

// samples: [num_rows] the target's sampled ids. out_num_emitted[i] = tokens request i emits
// (1 .. 1 + num_drafts); out_tokens: those tokens, packed in request order (host, capacity
// num_rows; may alias samples: a request's packed tokens never start after its first row).
void verify_drafts_on_host(const int32_t* samples, const DraftVerifyRow* requests, int num_requests,
                           const int32_t* drafts, int32_t* out_tokens, int32_t* out_num_emitted);

}  // namespace kvasir
