// Scheduler: the phase-free token-budget loop (vLLM v1). Each step gives running requests their
// next tokens (one to decode, or the next prompt chunk), then admits waiting ones, within
// max_num_batched_tokens and max_num_seqs; preempts the last running request when KV blocks run
// out; folds sampled tokens back and applies stop conditions. Runs on the engine thread only.
// Must not touch tensors, text or the device: block ids and token ids are all it hands out.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"
#include "core/request.h"
#include "kv/kv_cache_manager.h"
#include "sched/partial_prefill_limits.h"
#include "sched/request_queue.h"
#include "sched/scheduler_config.h"
#include "sched/scheduler_output.h"
#include "sched/step_cost_curve.h"

namespace kvasir {

class Scheduler {
 public:
  // config must pass validate().
  explicit Scheduler(const SchedulerConfig& config);

  // Queues a request the engine's RequestValidator passed: an empty prompt, max_tokens < 1 or
  // prompt + max_tokens past max_model_len abort (KVASIR_CHECK). A duplicate id or a prompt larger
  // than the whole KV cache is a Status; nothing is queued then.
  // Assigns the request's idx. sampling_params.n is not looked at: the engine fans n > 1 out
  // into n requests.
  Status add_request(std::unique_ptr<Request> request);

  // Ends a request in any state and frees its blocks at once; status must be a finished one
  // (kFinishedAborted for a client abort, kFinishedStopped for a stop string). Emits no output:
  // the caller already knows. Returns false for unknown (or already finished) ids.
  bool finish_request(std::string_view req_id, RequestStatus status);
  bool abort_request(std::string_view req_id) {
    return finish_request(req_id, RequestStatus::kFinishedAborted);
  }

  // Decides this step. Advances num_computed_tokens of the scheduled requests as if the step
  // will run: call update_from_output with its result before the next schedule().
  SchedulerOutput schedule();

  // Appends the sampled tokens, applies stop conditions, publishes newly computed full blocks to
  // the prefix cache and frees finished requests. Call it after EVERY schedule(), even one that
  // scheduled nothing (with an empty ModelRunnerOutput): requests the scheduler had to fail are
  // reported here.
  EngineCoreOutputs update_from_output(const SchedulerOutput& scheduler_output,
                                       const ModelRunnerOutput& runner_output);

  // A step's wall time, from hand-off to result: pure decode / verify steps teach the draft
  // budget's step-cost curve (step_cost_curve.h); other steps are ignored.
  void observe_step_time(const SchedulerOutput& scheduler_output, double seconds);
  const StepCostCurve& step_costs() const { return step_costs_; }

  bool has_unfinished_requests() const { return !requests_.empty(); }
  int num_running_reqs() const { return static_cast<int>(running_.size()); }
  int num_waiting_reqs() const { return static_cast<int>(waiting_.size()); }
  SchedulerStats make_stats() const;

  const Request* get_request(std::string_view req_id) const;
  const std::vector<Request*>& running() const { return running_; }
  const KvCacheManager& kv_cache_manager() const { return kv_; }
  const SchedulerConfig& config() const { return config_; }

  // KV invariants plus: every request is running xor waiting with a matching status, the running
  // list is in order and within max_num_seqs, and only running requests hold blocks.
  void check_invariants() const;

 private:
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct ScheduledRunning {
    Request* request;
    std::vector<BlockId> new_block_ids;
    int num_drafts = 0;  // speculative drafts verified: the last num_drafts scheduled tokens
  };
  // One step's decisions before they are encoded into a SchedulerOutput.
  struct StepPlan {
    int token_budget = 0;
    std::vector<ScheduledRunning> running;
    std::vector<Request*> new_reqs;
    std::vector<Request*> resumed_reqs;
    std::vector<Request*> preempted;
    std::vector<std::pair<Request*, int>> num_tokens;  // scheduled tokens, in decision order
  };

  // Known tokens plus those steps in flight are sampling (async scheduling; else known tokens).
  static int num_tokens_with_placeholders(const Request& r) { return r.num_tokens() + r.num_output_placeholders(); }
  static int num_tokens_to_compute(const Request& r) { return num_tokens_with_placeholders(r) - r.num_computed_tokens(); }
  // Async: the tokens in flight reach max_tokens or max_model_len, so the request ends when they
  // are folded in whatever they are. Never true without placeholders.
  bool certain_to_finish(const Request& r) const {
    const int p = r.num_output_placeholders();
    return p > 0 && (r.num_output_tokens() + p >= r.max_tokens() || r.num_tokens() + p >= config_.max_model_len);
  }
  // vLLM's from_queues: the running prefills, then the waiting prompts the long limit admits, up
  // to max_num_partial_prefills.
  PartialPrefillLimits make_partial_prefill_limits() const;
  void schedule_running(StepPlan& plan, PartialPrefillLimits& limits);
  // Speculation: how many of r's drafts to verify with `budget` tokens to spare (0: none), and
  // their slots when they fit without preempting anyone (speculation never evicts work).
  // num_step_tokens: what the step holds already (r's decode and the decodes still to come).
  int num_drafts_to_verify(Request& r, int budget, int num_decodes, int num_step_tokens);
  // Whether the next step's budget could verify any of r's drafts at a batch of num_decodes (or
  // a probe could take one): a model-running proposer's passes are wasted otherwise.
  bool drafts_worth_proposing(const Request& r, int num_decodes) const;
  bool allocate_with_drafts(Request& r, int num_drafts, std::vector<BlockId>& new_blocks);
  void schedule_waiting(StepPlan& plan, PartialPrefillLimits& limits);
  SchedulerOutput encode(StepPlan& plan);

  enum class AllocResult {
    kAllocated,      // new_blocks filled
    kPreemptedSelf,  // request was the last running one and is now preempted
    kFailed,         // request can never fit: failed and removed from running_
  };
  // allocate_slots for a running request, preempting from the back of running_ until it fits.
  AllocResult allocate_or_preempt(Request* request, int num_new_tokens, int& pending_decodes,
                                  StepPlan& plan, std::vector<BlockId>& new_blocks);
  bool fits_in_cache(int num_tokens) const;  // could ever fit, with the whole pool to itself
  std::string cannot_fit_message(int num_tokens) const;
  void preempt(Request* request, StepPlan& plan);
  void insert_running(Request* request);
  void remove_running(const Request* request);
  // Ends a request the scheduler cannot serve; reported by the next update_from_output.
  void fail_request(Request* request, std::string message);
  // Frees blocks, records the id for the runner and destroys the request.
  void retire(Request* request);
  Request* find(std::string_view req_id) const;

  SchedulerConfig config_;
  KvCacheManager kv_;
  std::unordered_map<std::string, std::unique_ptr<Request>, StringHash, std::equal_to<>> requests_;
  RequestQueue waiting_;
  std::vector<Request*> running_;  // ordered by running_order_key: the back is preempted first
  std::vector<std::string> finished_since_last_;
  std::vector<EngineCoreOutput> pending_outputs_;
  RequestIdx next_idx_ = 1;
  int64_t num_preemptions_ = 0;
  SchedulerStats spec_stats_;  // only its spec_* fields: speculative decoding since start
  StepCostCurve step_costs_;
  // Every kProbeEvery steps one request may verify one draft more than the budget chose, when the
  // step size that makes is not learned yet: otherwise a step size the prior prices too high would
  // never be run, so never measured. Only in steps of at most kProbeMaxDecodes decodes: on a GPU a
  // probe at batch 64 made steps of new shapes (graph captures, eager steps), 0.943x plain
  // throughput on an H200 (BENCHMARKS.md, 2026-12-03), and learning one token a probe is too slow
  // to pay there.
  static constexpr int kProbeEvery = 8;
  static constexpr int kProbeMaxDecodes = 4;
  int steps_since_probe_ = 0;
  bool probe_this_step_ = false;
};

}  // namespace kvasir
