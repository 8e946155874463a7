// Engine: the thread-safe front of the engine: validates and admits requests from any thread,
// fans n > 1 out into n child requests (sharing the prompt's KV through the prefix cache), hands
// back a RequestStream per request, and aborts on demand (client gone). Owns the EngineCore
// thread and the OutputProcessor thread. Must not hold per-step state itself.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine_core.h"
#include "engine/metrics.h"
#include "engine/output_processor.h"
#include "engine/request_stream.h"
#include "engine/request_validator.h"
#include "executor/in_process_executor.h"

namespace kvasir::structured {
class GrammarCompiler;
struct GrammarCompilerOptions;
}

namespace kvasir {

struct EngineOptions {
  SchedulerConfig scheduler;
  int max_logprobs = 20;
  std::vector<int32_t> eos_token_ids;  // first is the primary EOS; the rest act as stop tokens
  // Detokenize step i while step i+1 runs (vLLM's asynchronous output processing); off only to
  // measure what the overlap buys (--disable-async-output-proc).
  bool async_output_proc = true;
  // Grammar compilation (--structured-outputs-config): JSON whitespace and open objects.
  bool grammar_json_any_whitespace = true;
  // Objects closed and arrays bounded where a schema leaves them open (XGrammar's strict mode,
  // vLLM's default): narrower than the schema, never wider.
  bool grammar_json_strict = true;
  bool grammar_in_reasoning = false;  // constrain reasoning too (the server reads it)
  // Whitespace characters allowed in a row between JSON tokens (0: unbounded). Any JSON value
  // stays expressible (pretty-printed to depth 5 included); what it stops is the small-model
  // failure of looping on newlines inside "{" until max_tokens.
  int grammar_json_max_whitespace = 24;
};

struct AddRequestOptions {
  int priority = 0;
  std::optional<std::string> cache_salt;
  // With a reasoning parser: params.structured_outputs applies only after these output tokens
  // (the end of reasoning, e.g. "</think>"); empty = from the first output token.
  std::vector<int32_t> grammar_starts_after;
};

class Engine {
 public:
  // opts.scheduler.async_scheduling picks the step loop (EngineCore).
  Engine(const EngineOptions& opts, const Tokenizer& tokenizer, int32_t vocab_size,
         std::unique_ptr<Executor> executor);
  // The runner in this process (InProcessExecutor): on its own worker thread with async
  // scheduling, else inline on the engine thread.
  Engine(const EngineOptions& opts, const Tokenizer& tokenizer, int32_t vocab_size,
         std::unique_ptr<ModelRunner> runner)
      : Engine(opts, tokenizer, vocab_size,
               std::make_unique<InProcessExecutor>(std::move(runner), opts.scheduler.async_scheduling
                                                                          ? InProcessExecutor::Mode::kWorkerThread
                                                                          : InProcessExecutor::Mode::kInline)) {}
  ~Engine();

  // Checks the request with validator() and queues it. Errors are Status (bad input); on
  // success the stream delivers every delta. params.structured_outputs is compiled here, on the
  // caller's thread (through the compiler's cache), never on the engine's: a schema, regex or
  // grammar that does not compile is an invalid_argument / unimplemented naming the problem.
  StatusOr<std::shared_ptr<RequestStream>> add_request(const std::string& request_id,
                                                       std::vector<int32_t> prompt_token_ids,
                                                       const SamplingParams& params,
                                                       const AddRequestOptions& options = {});
  // Ends the request (every child) and frees its KV blocks within one step.
  void abort(const std::string& request_id);

  bool dead() const { return core_->dead(); }
  // Fails the engine from outside (another data-parallel replica died): every live request ends
  // with an error carrying `message`, and the engine is dead from then on.
  void fail(const std::string& message) { core_->submit(FailEngineCmd{message}); }
  // Called once on the engine thread when the engine fails, whatever failed it.
  void set_on_fault(std::function<void(const std::string&)> hook) { core_->set_on_fault(std::move(hook)); }
  // Why the engine died (empty while it runs).
  const std::string& fault() const { return core_->fault(); }
  // How many leading blocks of a prompt's hash chain (kv/block_hash.h, hashed with this engine's
  // block size) its prefix cache holds now. Any thread.
  int cached_prefix_blocks(std::span<const BlockHash> chain) const { return core_->count_cached_prefix(chain); }
  const EngineMetrics& metrics() const { return metrics_; }
  EngineMetrics& metrics() { return metrics_; }
  EngineCore& core() { return *core_; }
  int num_unfinished() const { return processor_->num_tracked(); }
  double output_processing_s() const { return processor_->busy_s(); }
  const EngineOptions& options() const { return opts_; }
  // The request rules this engine enforces; callers that answer before add_request (the server)
  // check with the same one.
  const RequestValidator& validator() const { return validator_; }
  // The grammar compiler for this engine's tokenizer, made on first use (thread-safe).
  StatusOr<structured::GrammarCompiler*> grammar_compiler();

  // Stops both threads. Unfinished streams end with finish_reason "abort".
  void shutdown();

 private:
  EngineOptions opts_;
  const Tokenizer& tokenizer_;
  const int32_t vocab_size_;
  RequestValidator validator_;
  std::mutex grammar_mu_;
  std::unique_ptr<structured::GrammarCompiler> grammar_compiler_;
  structured::GrammarCompilerOptions grammar_options() const;
  EngineMetrics metrics_;
  BlockingQueue<EngineCoreOutputs> core_outputs_;
  std::unique_ptr<EngineCore> core_;
  std::unique_ptr<OutputProcessor> processor_;
  std::mutex mu_;
  struct Family {
    std::vector<std::string> child_ids;
    std::weak_ptr<RequestStream> stream;
  };
  void prune_finished_locked();
  std::unordered_map<std::string, Family> families_;  // request id -> its children and stream
  size_t adds_since_prune_ = 0;
  std::atomic<bool> shut_down_{false};
};

}  // namespace kvasir
