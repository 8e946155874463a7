#include "engine/engine.h"

#include <chrono>

#include "structured/grammar_compiler.h"

namespace kvasir {

Engine::Engine(const EngineOptions& opts, const Tokenizer& tokenizer, int32_t vocab_size,
               std::unique_ptr<Executor> executor)
    : opts_(opts),
      tokenizer_(tokenizer),
      vocab_size_(vocab_size),
      validator_(RequestLimits{vocab_size, opts.scheduler.max_model_len, opts.max_logprobs}) {
  core_ = std::make_unique<EngineCore>(opts.scheduler, std::move(executor), metrics_, core_outputs_, vocab_size);
  processor_ = std::make_unique<OutputProcessor>(tokenizer, *core_, metrics_, core_outputs_);
  if (!opts.async_output_proc) core_->set_after_publish([p = processor_.get()] { p->wait_idle(); });
  processor_->start();
  core_->start();
}

Engine::~Engine() { shutdown(); }

structured::GrammarCompilerOptions Engine::grammar_options() const {
  structured::GrammarCompilerOptions o;
  o.json_any_whitespace = opts_.grammar_json_any_whitespace;
  o.json_strict = opts_.grammar_json_strict;
  o.json_max_whitespace = opts_.grammar_json_max_whitespace;
  return o;
}

StatusOr<structured::GrammarCompiler*> Engine::grammar_compiler() {
  std::lock_guard<std::mutex> lock(grammar_mu_);
  if (!grammar_compiler_) {
    KVASIR_ASSIGN_OR_RETURN(grammar_compiler_,
                            structured::GrammarCompiler::create(tokenizer_, vocab_size_, opts_.eos_token_ids, grammar_options()));
  }
  return grammar_compiler_.get();
}

void Engine::shutdown() {
  if (shut_down_.exchange(true)) return;
  core_->stop();
  // Whatever is still open ends as aborted so no consumer blocks forever.
  std::vector<std::string> open;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, fam] : families_) open.insert(open.end(), fam.child_ids.begin(), fam.child_ids.end());
    families_.clear();
  }
  EngineCoreOutputs outs;
  for (const auto& id : open) {
    EngineCoreOutput o;
    o.req_id = id;
    o.finish_reason = FinishReason::kAbort;
    outs.outputs.push_back(std::move(o));
  }
  if (!outs.outputs.empty()) core_outputs_.push(std::move(outs));
  processor_->stop();
}

StatusOr<std::shared_ptr<RequestStream>> Engine::add_request(const std::string& request_id,
                                                             std::vector<int32_t> prompt_token_ids,
                                                             const SamplingParams& params,
                                                             const AddRequestOptions& options) {
  if (shut_down_ || core_->dead()) return unavailable("engine is not running" + (core_->dead() ? ": " + core_->fault() : std::string()));
  KVASIR_RETURN_IF_ERROR(validator_.check(prompt_token_ids, params));
  std::shared_ptr<const structured::CompiledGrammar> grammar;
  if (params.structured_outputs) {
    KVASIR_ASSIGN_OR_RETURN(structured::GrammarCompiler * compiler, grammar_compiler());
    KVASIR_ASSIGN_OR_RETURN(grammar, compiler->compile(*params.structured_outputs));
  }
  const int n = params.n;
  std::vector<std::string> child_ids;
  auto stream = std::make_shared<RequestStream>(request_id, n);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (++adds_since_prune_ >= 64) prune_finished_locked();
    auto it = families_.find(request_id);
    if (it != families_.end()) {
      auto old = it->second.stream.lock();
      if (old && !old->all_finished()) return invalid_argument("duplicate request id " + request_id);
    }
    for (int i = 0; i < n; ++i) child_ids.push_back(n == 1 ? request_id : std::to_string(i) + "_" + request_id);
    families_[request_id] = Family{child_ids, stream};
  }
  const double arrival = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  for (int i = 0; i < n; ++i) {
    SamplingParams child = params;
    child.n = 1;
    if (params.seed && n > 1) child.seed = *params.seed + static_cast<uint64_t>(i);  // vLLM: child i gets seed + i
    // Secondary EOS ids (e.g. Gemma's <end_of_turn>) stop generation like stop_token_ids.
    for (size_t k = 1; k < opts_.eos_token_ids.size(); ++k) {
      if (!child.ignore_eos) child.stop_token_ids.push_back(opts_.eos_token_ids[k]);
    }
    RequestOptions ro;
    ro.priority = options.priority;
    ro.arrival_time = arrival;
    ro.cache_salt = options.cache_salt;
    ro.grammar = grammar;
    if (grammar && !opts_.grammar_in_reasoning) ro.grammar_starts_after = options.grammar_starts_after;
    if (!opts_.eos_token_ids.empty()) ro.eos_token_id = opts_.eos_token_ids[0];
    processor_->add(child_ids[static_cast<size_t>(i)], i, prompt_token_ids, child, stream);
    core_->submit(AddRequestCmd{std::make_unique<Request>(child_ids[static_cast<size_t>(i)], prompt_token_ids, child, ro)});
  }
  return stream;
}

void Engine::prune_finished_locked() {
  adds_since_prune_ = 0;
  for (auto it = families_.begin(); it != families_.end();) {
    auto s = it->second.stream.lock();
    if (!s || s->all_finished()) it = families_.erase(it);
    else ++it;
  }
}

void Engine::abort(const std::string& request_id) {
  std::vector<std::string> kids;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = families_.find(request_id);
    if (it == families_.end()) return;
    kids = std::move(it->second.child_ids);
    families_.erase(it);
  }
  EngineCoreOutputs outs;
  for (const auto& id : kids) {
    core_->submit(FinishRequestCmd{id, RequestStatus::kFinishedAborted});
    EngineCoreOutput o;
    o.req_id = id;
    o.finish_reason = FinishReason::kAbort;
    outs.outputs.push_back(std::move(o));
  }
  // Through the same queue as engine outputs, so the abort lands after anything already sent.
  core_outputs_.push(std::move(outs));
}

}  // namespace kvasir
