// ModelRunner: turns one SchedulerOutput into one flattened ForwardBatch, runs the model, samples
// and answers with a ModelRunnerOutput. Its per-request state (token ids, block table, sampling
// params) is an InputBatch updated from the diff-encoded scheduler output; it reuses its host
// arrays every step. Runs on one thread (the executor's worker), steps strictly in order: a step
// may compute a token that the step before sampled. Must not decide anything the scheduler decides.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "model/decoder_model.h"
#include "runner/eagle_proposer.h"
#include "runner/input_batch.h"
#include "sample/sampler.h"
#include "sched/grammar_bitmask.h"
#include "sched/scheduler_output.h"
#include "spec/proposer.h"

namespace kvasir {

struct RunnerConfig {
  int block_size = 16;
  int max_model_len = 2048;
  uint64_t seed = 0;  // engine seed for unseeded requests
  std::vector<int32_t> eos_token_ids;
  int max_num_seqs = 256;       // largest decode batch padded to a CUDA-graph bucket
  bool device_sampling = true;  // sample on the device when the backend can and no row needs the host
  // Overlapped steps (launch / finish): a device-sampled step is launched with the previous
  // step's sampled ids read on the device, before they are back on the host, where the backend
  // and the model can (DecoderModel::feeds_sampled_tokens). Off: every step is read back before
  // the next one is recorded.
  bool overlap_steps = false;
  // Speculative decoding: the runner proposes drafts after each sampled step (method set) and
  // verifies the drafts the scheduler sends back: on the device (Backend::sample_and_verify) when
  // every row of the step can be sampled there, else on the host sampling path.
  SpeculativeConfig speculative;
};

// The draft model of speculative method "draft_model": loaded and given its own KV cache at setup
// (setup/draft_model.h), run by the runner's DraftModelProposer. For methods "eagle" and "eagle3"
// the EAGLE head (setup/eagle_head_setup.h) and its cache instead, run by the runner's
// EagleProposer.
// All outlive the runner.
struct DraftModelRef {
  DecoderModel* model = nullptr;
  KvCache* cache = nullptr;
  int max_tokens_per_forward = 0;  // the draft's workspace bound (--max-num-batched-tokens)
  DraftHead* eagle_head = nullptr;
};

class ModelRunner {
 public:
  // `draft`: required when config.speculative.method is "draft_model", else unused.
  ModelRunner(DecoderModel& model, KvCache& cache, const RunnerConfig& config, const DraftModelRef& draft = {});
  ~ModelRunner();

  // `bitmask`: the grammar rows of so.structured_output_req_ids, awaited right before sampling
  // (the forward pass runs meanwhile); invalid when no row of the step has a grammar.
  // launch() + finish(), with no step launched before.
  StatusOr<ModelRunnerOutput> execute(const SchedulerOutput& so, const GrammarBitmaskFuture& bitmask = {});
  // The same in two parts, so a step can start before the previous one is answered: launch()
  // records and starts the step; finish() answers the oldest launched step, in launch order.
  // With overlap_steps, a device-sampled step is left on the device at launch (its tokens stay
  // unknown on the host until finish), and the next step launched reads them there. A step that
  // cannot (it needs the host sampler, grammar masks or drafts) first completes the earlier one.
  // After an error the runner's state is unspecified: no further step may run.
  Status launch(const SchedulerOutput& so, const GrammarBitmaskFuture& bitmask = {});
  StatusOr<ModelRunnerOutput> finish();
  int num_launched() const { return static_cast<int>(launched_.size()); }
  // Whether steps may overlap at all (overlap_steps, no proposer, a model that feeds ids on the device).
  bool overlaps_steps() const { return overlap_; }
  // Whether the newest launched step's tokens are still on the device.
  bool newest_on_device() const { return !launched_.empty() && launched_.back().on_device; }
  // Whether `so` (not yet applied) may be launched while the step before is unanswered: what
  // launch() decides after applying it, decided from the step and the requests' parameters.
  bool can_launch_behind(const SchedulerOutput& so) const;
  int num_cached_requests() const { return static_cast<int>(input_batch_.size()); }

 private:
  // A launched step not yet answered: its output, complete, or (on_device) still missing the
  // tokens of its sampling rows, which stand in the requests' tokens as placeholders until then.
  struct LaunchedStep {
    ModelRunnerOutput result;
    bool on_device = false;
    struct Sampled {
      int32_t output;       // index in result.outputs
      int32_t logits_row;   // row of the step's samples
      int32_t token_index;  // where its placeholder stands in the request's tokens
    };
    std::vector<Sampled> sampled;
    int32_t num_sample_rows = 0;
  };
  // A token sampled by an uncollected step: -(row + 1) of that step's samples.
  static constexpr bool is_placeholder(TokenId t) { return t < 0; }
  static constexpr int32_t placeholder_row(TokenId t) { return -t - 1; }
  Status launch_step(const SchedulerOutput& so, const GrammarBitmaskFuture& bitmask, LaunchedStep& step);
  // Steps whose tokens are still on the device, oldest first (at most two).
  int num_uncollected() const;
  // Brings the oldest uncollected step's tokens back into its output and the requests' tokens.
  Status collect_oldest();
  struct ScheduledRow {
    const std::string* req_id;
    CachedRequestState* req;
    int32_t num_tokens;
    int32_t first_token_row;
    int32_t start = 0;         // position of the step's first token
    uint64_t rng_key = 0;
    int logits_row = -1;       // row in the sampling logits, -1 when this step samples nothing
    int num_drafts = 0;        // verify step: logits rows logits_row .. logits_row + num_drafts
    int prompt_row_begin = -1; // first row of prompt-logprob logits, -1 when none
    int num_prompt_rows = 0;
  };

  // pad_for_device: pad pure-decode batches to a bucket size and block tables to a power of two,
  // so a device backend sees few distinct step shapes (each replayed as one CUDA graph).
  // feed: placeholders of the previous step's tokens become input_id_sources (else one is an error).
  Status build_batch(bool pad_for_device, bool feed);
  bool can_sample_on_device(const SchedulerOutput& so) const;
  // Every scheduled request computes only its last known token and its drafts, and samples.
  bool all_rows_decode_or_verify() const;
  // async: a plain step's tokens stay on the device (Backend::sample_async), collected later.
  Status sample_on_device(const GrammarBitmaskFuture& bitmask, bool async);
  // Waits for the step's bitmask and lists, per grammar row, the sampling-logits row it masks.
  Status collect_bitmask_rows(const GrammarBitmaskFuture& bitmask);
  Status compute_logits(const std::vector<int32_t>& rows, std::vector<float>& out);
  void fill_prompt_logprobs(const ScheduledRow& r, RunnerRequestOutput& out);
  // Drafts for every row that sampled this step (result.outputs is in rows_ order); caps: the
  // step's SchedulerOutput::num_drafts_to_propose.
  void propose_drafts(ModelRunnerOutput& result, const std::unordered_map<std::string, int32_t>& caps);
  // eagle / eagle3: every row's accepted tokens go through the head, whose drafts follow the
  // sampling rows.
  void propose_eagle_drafts(ModelRunnerOutput& result, const std::unordered_map<std::string, int32_t>& caps);
  // How many drafts to ask a request's proposer for: k, within `room` (max_model_len), and for a
  // proposer that runs a model within the scheduler's cap.
  int drafts_to_propose(const std::string& req_id, int room, const std::unordered_map<std::string, int32_t>& caps) const;

  DecoderModel& model_;
  KvCache& cache_;
  RunnerConfig config_;
  BackendCapabilities caps_;  // read once: a backend's capabilities do not change while it runs
  Sampler sampler_;
  InputBatch input_batch_;
  std::vector<ScheduledRequest> scheduled_;  // this step's requests, in batch order

  // The most ints a device verify step reads back (the CUDA backend's pinned buffer).
  static constexpr int kMaxDeviceVerifyReadBack = 65536;

  // Per-step host arrays, reused (they only grow).
  std::vector<ScheduledRow> rows_;
  std::vector<int32_t> seq_rows_;  // [attention sequence] -> index in rows_ (verify tokens may be one sequence each)
  bool one_query_rows_ = false;    // this step's verify tokens are one-query sequences (build_batch)
  // A device verify step: one request per sampling row (rows_ order), the drafts, and what came back.
  std::vector<DraftVerifyRow> verify_rows_;
  std::vector<int32_t> verify_drafts_, verify_num_emitted_;
  // Verify steps by path, logged at destruction: the host-path ones are the fallbacks (a row needs
  // the host sampler, a grammar, or more rows than the logits workspace).
  enum { kVerifyOneQueryRows, kVerifyDevice, kVerifyHost, kNumVerifyPaths };
  int64_t verify_steps_[kNumVerifyPaths] = {};
  std::vector<int32_t> input_ids_, input_id_sources_, positions_, query_start_loc_, seq_lens_, block_tables_;
  std::deque<LaunchedStep> launched_;
  std::vector<int32_t> collected_;  // an uncollected step's samples, brought back
  // Device-sampled steps by how they ended: launched with the previous step's tokens fed on the
  // device (its read-back overlapped), left on the device but not overlapped, read back at once.
  int64_t overlapped_steps_ = 0, async_steps_ = 0, read_back_steps_ = 0;
  bool step_fed_ = false;  // the step built last reads some ids on the device
  // config_.overlap_steps where this runner and its model can: no proposer, ids fed on the device.
  bool overlap_ = false;
  std::vector<int64_t> slot_mapping_;
  std::vector<int32_t> sample_rows_, prompt_rows_, prompt_targets_;
  std::vector<float> sample_logits_, prompt_logits_;
  std::vector<SamplingRequestState> states_;
  SamplerOutput sampler_out_;
  std::vector<DeviceSamplingRow> device_rows_;
  LogprobsTensors prompt_lp_;
  std::shared_ptr<const GrammarBitmask> bitmask_;  // this step's, while it samples
  std::vector<int32_t> bitmask_logits_rows_;       // [bitmask row] -> sampling-logits row, -1: none
  int64_t bitmask_steps_ = 0, bitmask_wait_us_ = 0;  // steps with masks, time spent waiting for them
  // Device-sampled steps: host time recording the step (entry until its forward pass is handed to
  // the backend), in the backend's sample call (the device's step and the read-back), and after
  // it (logged at destruction; the sync loop's device idles through the first and the last).
  // [0]: steps without grammar masks, [1]: with.
  struct StepTimes {
    int64_t steps = 0;
    double record_us = 0, sample_us = 0, after_us = 0;
  } device_times_[2];
  std::chrono::steady_clock::time_point t_submitted_;
  ForwardBatch batch_;
  std::unique_ptr<Proposer> proposer_;  // null without speculative decoding or with eagle / eagle3
  std::unique_ptr<EagleProposer> eagle_;  // methods "eagle", "eagle3": they need the target's hidden states
  std::vector<EagleStepRow> eagle_rows_;
  // propose_drafts' per-step lists, reused.
  std::vector<ProposalContext> proposal_ctxs_;
  std::vector<int> proposal_max_;
  std::vector<std::vector<TokenId>*> proposal_out_;
};

}  // namespace kvasir
