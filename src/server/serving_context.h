// ServingContext: what every OpenAI handler shares once the model is loaded: the engine, the
// tokenizer, the served model names, the chat template, sampling defaults, bounded admission
// (sequences waiting for their first token), the registry of in-flight generation jobs that
// shutdown drains or aborts, and the stored /v1/responses results. Thread-safe. Must not parse
// requests or format responses.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "chat/chat_template.h"
#include "core/sampling_params.h"
#include "engine/engine_group.h"
#include "server/admission_bound.h"
#include "server/chat_output_parser.h"
#include "server/response_store.h"
#include "server/serving_pump.h"
#include "tokenizer/tokenizer.h"

namespace kvasir::server {

class GenerationJob;

struct ServingOptions {
  std::vector<std::string> served_model_names;  // the first is the name responses carry
  std::string model_root;                       // the model path, shown by /v1/models
  bool trust_request_chat_template = false;
  int64_t max_num_queued_reqs = 8192;           // sequences (prompts x n) waiting for a first token
  SamplingParams default_params;                // generation_config.json defaults (or vLLM's)
  std::optional<int> default_max_tokens;        // generation_config.json max_new_tokens
  int num_pump_threads = 1;
  // Tool calling and reasoning (vLLM's flags): which parsers shape chat and responses output.
  OutputParserConfig output_parsers;
  bool exclude_tools_when_tool_choice_none = false;
  // /v1/responses kept for previous_response_id and GET: an LRU bounded by count and bytes.
  size_t max_stored_responses = 1000;
  size_t max_stored_response_bytes = size_t{256} << 20;
};

class ServingContext {
 public:
  // chat_template: nullopt when the model has none (or it failed to parse: chat_template_error).
  ServingContext(EngineGroup& engine, const Tokenizer& tokenizer, int32_t vocab_size, int max_model_len,
                 std::optional<ChatTemplate> chat_template, std::string chat_template_error, ServingOptions opts);
  ~ServingContext();

  // The engine replicas (one unless --data-parallel-size > 1), routed between by the group.
  EngineGroup& engine() { return engine_; }
  const EngineOptions& engine_options() const { return engine_.options(); }
  // The engine's request rules (prompt, vocabulary, ranges, max_model_len).
  const RequestValidator& validator() const { return engine_.validator(); }
  const Tokenizer& tokenizer() const { return tokenizer_; }
  // The prompt text of every route goes through here: text longer than max_prompt_bytes() is
  // refused (400) before the tokenizer builds anything for it, which bounds a request's memory.
  StatusOr<std::vector<int32_t>> tokenize_prompt(std::string_view text, bool add_special_tokens) const;
  // The same bound on prompt material before it becomes a prompt (the messages' text, which a
  // chat template copies into the prompt): refused before the template renders it.
  Status check_prompt_bytes(size_t num_bytes) const;
  // max_model_len x the longest token in bytes: no BPE vocabulary covers more text with
  // max_model_len tokens, so a longer prompt could never fit the context anyway.
  size_t max_prompt_bytes() const { return max_prompt_bytes_; }
  int32_t vocab_size() const { return vocab_size_; }
  int max_model_len() const { return max_model_len_; }
  const ServingOptions& options() const { return opts_; }
  const std::string& model_name() const { return opts_.served_model_names.front(); }
  // A request's "model": empty means the default; anything else must be a served name (404).
  Status check_model(const std::string& name) const;
  const ChatTemplate* chat_template() const { return chat_template_ ? &*chat_template_ : nullptr; }
  const std::string& chat_template_error() const { return chat_template_error_; }
  ResponseStore& response_store() { return response_store_; }

  // Bounded admission in sequences (AdmissionBound): ResourceExhausted (-> 429) when they do not
  // fit beside those already waiting, InvalidArgument (-> 400) when more than the whole bound.
  Status try_admit(int64_t num_sequences);
  void release_waiting(int64_t num_sequences) { admission_.release(num_sequences); }
  int64_t num_waiting() const { return admission_.num_waiting(); }

  // In-flight generation jobs: start_job hands a launched job to the pump; the job calls
  // finish_job when it answered its client.
  void start_job(std::shared_ptr<GenerationJob> job);
  void finish_job(GenerationJob* job);
  size_t num_inflight() const;
  // Waits (woken by finish_job, no polling) until no job is in flight or `until` passes; true
  // when none is.
  bool wait_idle_until(std::chrono::steady_clock::time_point until) const;
  // Shutdown: jobs still running end with an error event / 503 instead of their result.
  void begin_shutdown() { shutting_down_ = true; }
  bool shutting_down() const { return shutting_down_.load(); }
  void abort_all();
  void stop_pump() { pump_.stop(); }

  // HTTP-level counters for /metrics.
  std::atomic<int64_t> num_aborted_by_client{0};
  std::atomic<int64_t> num_rejected_queue_full{0};

 private:
  EngineGroup& engine_;
  const Tokenizer& tokenizer_;
  int32_t vocab_size_;
  int max_model_len_;
  size_t max_prompt_bytes_;
  std::optional<ChatTemplate> chat_template_;
  std::string chat_template_error_;
  ServingOptions opts_;
  AdmissionBound admission_;
  std::atomic<bool> shutting_down_{false};
  mutable std::mutex jobs_mu_;
  mutable std::condition_variable idle_cv_;  // jobs_ became empty
  std::unordered_map<GenerationJob*, std::shared_ptr<GenerationJob>> jobs_;
  ResponseStore response_store_;
  ServingPump pump_;  // last: its threads stop before the rest goes away
};

}  // namespace kvasir::server
