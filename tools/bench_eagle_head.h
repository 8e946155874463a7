// `kvasir bench latency --speculative-config '{"method": "eagle3" | "eagle", ...}'`: the EAGLE
// head's cost beside the target's. After each forward pass of the bench's batch the head runs as the runner
// runs it (runner/eagle_proposer.h: the pass's tokens with the target's hidden states, then
// k - 1 one-token draft passes, batched over the sequences), timed apart from the target's step
// (each head pass ends in a read-back of its greedy ids, so its time is the device's too). The
// drafts are not verified (the bench's decode stays the plain greedy one): this measures what a
// step's drafting costs, not what it saves; bench throughput measures acceptance. With
// --num-speculative-tokens-forced K the decode steps are K-draft verify steps that commit all
// 1 + K positions, so the head's first pass each step covers 1 + K tokens per sequence: the
// drafting cost at full acceptance.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runner/eagle_proposer.h"

namespace kvasir {

class BenchEagleHead {
 public:
  BenchEagleHead(DraftHead& head, KvCache& cache, int batch_size, int num_speculative_tokens);

  // After a target pass that computed positions [first_position, first_position + n) of every
  // sequence s (rows s * n .. s * n + n - 1 of the pass); histories[s] holds the tokens through
  // first_position + n (the one after the last computed). draft: ask for k drafts (a pass that
  // sampled); decode: count the time as a decode step's.
  void after_pass(const std::vector<std::vector<int32_t>>& histories, int first_position, int n, bool draft, bool decode);
  // The sequences are done (a new iteration starts new ones).
  void finish_all();

  int64_t decode_steps() const { return decode_steps_; }
  double decode_head_s() const { return decode_head_s_; }
  int64_t head_passes() const { return proposer_.num_forward_passes(); }
  int64_t drafts_proposed() const { return drafts_proposed_; }

 private:
  EagleProposer proposer_;
  int batch_size_, k_;
  std::vector<std::string> ids_;
  std::vector<std::vector<TokenId>> drafts_;
  std::vector<EagleStepRow> rows_;
  int64_t decode_steps_ = 0, drafts_proposed_ = 0;
  double decode_head_s_ = 0;
};

}  // namespace kvasir
