#include "backend/draft_verify.h"

#include <string>

namespace kvasir {

Status validate_draft_verify_rows(const DraftVerifyRow* requests, int num_requests, int num_rows,
                                  int num_draft_tokens) {
  int next_free_row = 0;
  for (int i = 0; i < num_requests; ++i) {
    const DraftVerifyRow& r = requests[i];
    const std::string which = "draft verify request " + std::to_string(i);
    if (r.num_drafts < 0 || r.first_row < next_free_row || r.first_row + 1 + r.num_drafts > num_rows) {
      return invalid_argument(which + ": its rows overlap the previous request's or leave the logits");
    }
    if (r.draft_offset < 0 || r.draft_offset + r.num_drafts > num_draft_tokens) {
      return invalid_argument(which + ": its drafts leave the draft array");
    }
    next_free_row = r.first_row + 1 + r.num_drafts;
  }
  return Status();
}

void verify_drafts_on_host(const int32_t* samples, const DraftVerifyRow* requests, int num_requests,
                           const int32_t* drafts, int32_t* out_tokens, int32_t* out_num_emitted) {
  int32_t packed = 0;
  for (int i = 0; i < num_requests; ++i) {
    const DraftVerifyRow& r = requests[i];
    const int32_t* s = samples + r.first_row;
    const int32_t* d = drafts + r.draft_offset;
    int32_t kept = 0;
    while (kept < r.num_drafts && d[kept] == s[kept]) ++kept;
    // packed <= first_row (rows ascending and disjoint): a forward copy never overwrites a
    // sample it still has to read, also in place.
    for (int32_t j = 0; j <= kept; ++j) out_tokens[packed + j] = s[j];
    out_num_emitted[i] = kept + 1;
    packed += kept + 1;
  }
}

}  // namespace kvasir
