// `kvasir bench latency --speculative-config '{"method": "draft_model", ...}'`: the draft model's
// cost beside the target's (bench_drafter.h). After each pass that sampled, the
// DraftModelProposer proposes k drafts for every sequence from its history as the runner asks it
// (runner/draft_model_proposer.h: one catch-up pass over the tokens the draft has not seen, then
// k - 1 one-token passes, batched over the sequences; the prompt is caught up at the first call,
// which is not a decode step's). With --num-speculative-tokens-forced K each catch-up covers a
// verify step's 1 + K committed tokens: the drafting cost at full acceptance.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench_drafter.h"
#include "runner/draft_model_proposer.h"

namespace kvasir {

class BenchDraftModel final : public BenchDrafter {
 public:
  // prompt_len: the bench's input length (each history's first prompt_len tokens are its prompt).
  BenchDraftModel(DecoderModel& draft, KvCache& cache, int max_tokens_per_forward, int batch_size,
                  int num_speculative_tokens, int prompt_len);

  void finish_all() override;
  int64_t passes() const override { return proposer_.num_forward_passes(); }

 private:
  int64_t propose(const std::vector<std::vector<int32_t>>& histories, int first_position, int n, bool draft) override;

  DraftModelProposer proposer_;
  int batch_size_, k_, prompt_len_;
  std::vector<std::string> ids_;
  std::vector<std::vector<TokenId>> drafts_;
  std::vector<ProposalContext> ctxs_;
  std::vector<int> ks_;
  std::vector<std::vector<TokenId>*> outs_;
};

}  // namespace kvasir
