// Request: one generation request as the engine thread sees it: its tokens (prompt then output,
// append-only), how far the KV cache has computed them, its lifecycle status and the hashes of its
// full KV blocks. Owned by the scheduler; must not know about blocks, tensors or text.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/ids.h"
#include "core/sampling_params.h"

namespace kvasir {
namespace structured {
class CompiledGrammar;  // structured/grammar_compiler.h; opaque here
}

enum class RequestStatus {
  kWaiting,
  kRunning,
  kPreempted,
  kFinishedStopped,  // EOS, a stop token id, or a stop string found by the output processor
  kFinishedLength,   // max_tokens or max_model_len reached
  kFinishedAborted,  // the client went away or cancelled
  kFinishedError,    // the engine cannot serve it (e.g. it can never fit in the KV cache)
};

// OpenAI's finish_reason vocabulary, plus kError for requests the engine had to give up on.
enum class FinishReason { kStop, kLength, kAbort, kError };

const char* request_status_name(RequestStatus s);
const char* finish_reason_name(FinishReason r);  // "stop", "length", "abort", "error"
inline bool is_finished(RequestStatus s) { return s >= RequestStatus::kFinishedStopped; }
// nullopt for unfinished states.
std::optional<FinishReason> finish_reason_of(RequestStatus s);

// Inputs besides the prompt and sampling parameters, all optional.
struct RequestOptions {
  int priority = 0;                       // lower is served earlier (vLLM's convention)
  double arrival_time = 0.0;              // seconds on any monotonic clock; orders FCFS
  std::optional<std::string> cache_salt;  // isolates prefix-cache hits between tenants
  std::optional<int64_t> adapter_id;      // LoRA adapter; different adapters never share KV
  std::optional<TokenId> eos_token_id;    // from the tokenizer / generation config
  // The compiled form of sampling_params.structured_outputs (the engine compiles it before the
  // request reaches the core); null when the output is free.
  std::shared_ptr<const structured::CompiledGrammar> grammar;
  // With a reasoning parser: the grammar applies only after the output contains these tokens
  // (e.g. the id of "</think>"); empty = from the first output token.
  std::vector<TokenId> grammar_starts_after;
};

class Request {
 public:
  Request(std::string req_id, std::vector<TokenId> prompt_token_ids, SamplingParams sampling_params,
          RequestOptions options = {});

  const std::string& req_id() const { return req_id_; }
  RequestIdx idx() const { return idx_; }
  void set_idx(RequestIdx idx) { idx_ = idx; }

  const SamplingParams& sampling_params() const { return sampling_params_; }
  int priority() const { return options_.priority; }
  double arrival_time() const { return options_.arrival_time; }
  const std::optional<std::string>& cache_salt() const { return options_.cache_salt; }
  std::optional<int64_t> adapter_id() const { return options_.adapter_id; }
  std::optional<TokenId> eos_token_id() const { return options_.eos_token_id; }
  const std::shared_ptr<const structured::CompiledGrammar>& grammar() const { return options_.grammar; }
  const std::vector<TokenId>& grammar_starts_after() const { return options_.grammar_starts_after; }
  int max_tokens() const { return sampling_params_.max_tokens; }

  // Tokens: one append-only vector, prompt first, so KV positions index it directly.
  std::span<const TokenId> all_token_ids() const { return all_token_ids_; }
  std::span<const TokenId> prompt_token_ids() const {
    return std::span<const TokenId>(all_token_ids_).first(num_prompt_tokens_);
  }
  std::span<const TokenId> output_token_ids() const {
    return std::span<const TokenId>(all_token_ids_).subspan(num_prompt_tokens_);
  }
  int num_tokens() const { return static_cast<int>(all_token_ids_.size()); }
  int num_prompt_tokens() const { return num_prompt_tokens_; }
  int num_output_tokens() const { return num_tokens() - num_prompt_tokens_; }
  void append_output_token(TokenId t) { all_token_ids_.push_back(t); }

  RequestStatus status() const { return status_; }
  void set_status(RequestStatus s) { status_ = s; }
  bool finished() const { return is_finished(status_); }

  // Tokens whose KV is in the cache (or is being computed by the step just scheduled).
  int num_computed_tokens() const { return num_computed_tokens_; }
  void set_num_computed_tokens(int n) { num_computed_tokens_ = n; }

  // Prefix-cache hit of the first admission, for usage reporting; -1 until first scheduled.
  int num_cached_tokens() const { return num_cached_tokens_; }
  void set_num_cached_tokens(int n) { num_cached_tokens_ = n; }

  // Async scheduling: tokens being sampled by steps in flight, not yet appended (vLLM's name).
  int num_output_placeholders() const { return num_output_placeholders_; }
  void set_num_output_placeholders(int n) { num_output_placeholders_ = n; }

  // Speculative decoding: the drafts the runner proposed after this request's last step, verified
  // by the next one (vLLM's spec_token_ids); and the request's running estimate of the chance that
  // one draft is accepted, which decides how many drafts are worth verifying.
  const std::vector<TokenId>& spec_token_ids() const { return spec_token_ids_; }
  void set_spec_token_ids(std::vector<TokenId> t) { spec_token_ids_ = std::move(t); }
  double spec_acceptance_rate() const { return spec_acceptance_rate_; }
  void set_spec_acceptance_rate(double a) { spec_acceptance_rate_ = a; }
  // The last step asked the runner for no drafts (SchedulerOutput::num_drafts_to_propose): none
  // is coming because the budget would drop them, not because none was found.
  bool spec_drafts_withheld() const { return spec_drafts_withheld_; }
  void set_spec_drafts_withheld(bool w) { spec_drafts_withheld_ = w; }

  int num_preemptions() const { return num_preemptions_; }
  void count_preemption() { ++num_preemptions_; }

  // Whether any SchedulerOutput has carried it, so the runner may hold state for it.
  bool ever_scheduled() const { return ever_scheduled_; }
  void mark_scheduled() { ever_scheduled_ = true; }

  // Hash of each full block of all_token_ids(), in order; filled by kv/ as blocks fill.
  const std::vector<BlockHash>& block_hashes() const { return block_hashes_; }
  std::vector<BlockHash>& mutable_block_hashes() { return block_hashes_; }

  // Why it finished, beyond the status: the stop_token_ids entry that ended it, or an error text.
  std::optional<TokenId> stop_token_id() const { return stop_token_id_; }
  void set_stop_token_id(std::optional<TokenId> t) { stop_token_id_ = t; }
  const std::string& finish_message() const { return finish_message_; }
  void set_finish_message(std::string m) { finish_message_ = std::move(m); }

 private:
  std::string req_id_;
  RequestIdx idx_ = 0;
  SamplingParams sampling_params_;
  RequestOptions options_;
  std::vector<TokenId> all_token_ids_;
  int num_prompt_tokens_ = 0;
  RequestStatus status_ = RequestStatus::kWaiting;
  int num_computed_tokens_ = 0;
  int num_cached_tokens_ = -1;
  int num_output_placeholders_ = 0;
  int num_preemptions_ = 0;
  std::vector<TokenId> spec_token_ids_;
  double spec_acceptance_rate_ = 0.7;  // a prior that tries a few drafts before any evidence
  bool spec_drafts_withheld_ = false;
  bool ever_scheduled_ = false;
  std::vector<BlockHash> block_hashes_;
  std::optional<TokenId> stop_token_id_;
  std::string finish_message_;
};

}  // namespace kvasir
