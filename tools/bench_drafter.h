// What `kvasir bench latency --speculative-config` times beside the target's step: a proposer that
// runs a model of its own (an EAGLE head, bench_eagle_head.h; a draft model, bench_draft_model.h),
// driven after each of the bench's target passes as the runner drives it and timed apart from the
// target's step (each of its passes ends in a read-back of greedy ids, so its time is the
// device's too). The drafts are not verified (the bench's decode stays the plain greedy one, or
// forced verify steps): this measures what a step's drafting costs, not what it saves; bench
// throughput measures acceptance.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

namespace kvasir {

class BenchDrafter {
 public:
  virtual ~BenchDrafter() = default;

  // After a target pass that computed positions [first_position, first_position + n) of every
  // sequence s (rows s * n .. s * n + n - 1 of the pass); histories[s] holds the tokens through
  // first_position + n (the one after the last computed). draft: ask for k drafts (a pass that
  // sampled); decode: count the time as a decode step's.
  void after_pass(const std::vector<std::vector<int32_t>>& histories, int first_position, int n, bool draft, bool decode) {
    const auto t0 = std::chrono::steady_clock::now();
    drafts_proposed_ += propose(histories, first_position, n, draft);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (decode) {
      ++decode_steps_;
      decode_s_ += s;
    }
  }
  // The sequences are done (a new iteration starts new ones).
  virtual void finish_all() = 0;

  int64_t decode_steps() const { return decode_steps_; }
  double decode_s() const { return decode_s_; }
  int64_t drafts_proposed() const { return drafts_proposed_; }
  virtual int64_t passes() const = 0;

 protected:
  // Runs the proposer after the pass; returns the drafts it made.
  virtual int64_t propose(const std::vector<std::vector<int32_t>>& histories, int first_position, int n, bool draft) = 0;

 private:
  int64_t decode_steps_ = 0, drafts_proposed_ = 0;
  double decode_s_ = 0;
};

}  // namespace kvasir
