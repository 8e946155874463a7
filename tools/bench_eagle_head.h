// `kvasir bench latency --speculative-config '{"method": "eagle3" | "eagle", ...}'`: the EAGLE
// head's cost beside the target's (bench_drafter.h). After each forward pass of the bench's batch
// the head runs as the runner runs it (runner/eagle_proposer.h: the pass's tokens with the
// target's hidden states, then k - 1 one-token draft passes, batched over the sequences). With
// --num-speculative-tokens-forced K the decode steps are K-draft verify steps that commit all
// 1 + K positions, so the head's first pass each step covers 1 + K tokens per sequence: the
// drafting cost at full acceptance.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench_drafter.h"
#include "runner/eagle_proposer.h"

namespace kvasir {

class BenchEagleHead final : public BenchDrafter {
 public:
  BenchEagleHead(DraftHead& head, KvCache& cache, int batch_size, int num_speculative_tokens);

  void finish_all() override;
  int64_t passes() const override { return proposer_.num_forward_passes(); }

 private:
  int64_t propose(const std::vector<std::vector<int32_t>>& histories, int first_position, int n, bool draft) override;

  EagleProposer proposer_;
  int batch_size_, k_;
  std::vector<std::string> ids_;
  std::vector<std::vector<TokenId>> drafts_;
  std::vector<EagleStepRow> rows_;
};

}  // namespace kvasir
