#include "bench_draft_model.h"

namespace kvasir {

BenchDraftModel::BenchDraftModel(DecoderModel& draft, KvCache& cache, int max_tokens_per_forward, int batch_size,
                                 int num_speculative_tokens, int prompt_len)
    : proposer_(draft, cache, max_tokens_per_forward),
      batch_size_(batch_size),
      k_(num_speculative_tokens),
      prompt_len_(prompt_len) {
  for (int s = 0; s < batch_size; ++s) ids_.push_back("bench-" + std::to_string(s));
  drafts_.resize(static_cast<size_t>(batch_size));
  for (auto& d : drafts_) outs_.push_back(&d);
  ks_.assign(static_cast<size_t>(batch_size), num_speculative_tokens);
}

int64_t BenchDraftModel::propose(const std::vector<std::vector<int32_t>>& histories, int first_position, int n,
                                 bool draft) {
  (void)first_position, (void)n;  // the proposer finds what it has not seen in the histories
  if (!draft) return 0;             // a prompt chunk that sampled nothing: the draft catches up later
  ctxs_.clear();
  for (int s = 0; s < batch_size_; ++s) {
    const auto& h = histories[static_cast<size_t>(s)];
    ctxs_.push_back(ProposalContext{ids_[static_cast<size_t>(s)], h, prompt_len_});
  }
  proposer_.propose_batch(ctxs_, ks_, outs_);
  int64_t made = 0;
  for (const auto& d : drafts_) made += static_cast<int64_t>(d.size());
  return made;
}

void BenchDraftModel::finish_all() {
  for (const std::string& id : ids_) proposer_.finish_request(id);
}

}  // namespace kvasir
