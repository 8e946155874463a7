#include "kvasir/llm.h"

#include "common/log.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "api/rank_setup.h"
#include "api/tensor_parallel_group.h"
#include "engine/engine.h"
#include "executor/step_broadcast.h"
#include "setup/kv_cache_sizing.h"
#include "setup/loaded_model.h"

namespace kvasir {

struct LLM::KvHolder {
  std::unique_ptr<KvCache> cache;  // the runner keeps a reference
  LoadedDraftModel draft;          // speculative "draft_model": the runner's proposer keeps references
};

LLM::~LLM() {
  if (engine_) engine_->shutdown();
  // Device time (busy, idle between steps, graph replays) for a server's or a script's log.
  if (model_ && model_->backend) {
    if (const std::string st = model_->backend->stats(); !st.empty()) KVASIR_LOG_INFO("%s", st.c_str());
  }
}

StatusOr<std::unique_ptr<LLM>> LLM::create(const EngineArgs& args) {
  KVASIR_RETURN_IF_ERROR(args.validate());
  std::unique_ptr<LLM> llm(new LLM());
  if (args.tensor_parallel_size > 1) {
    if (tensor_parallel_worker_rank())
      return internal_error("a tensor-parallel worker must run run_tensor_parallel_worker, not serve");
    KVASIR_RETURN_IF_ERROR(check_tensor_parallel_model(args));  // before any worker starts
    KVASIR_ASSIGN_OR_RETURN(llm->tp_, start_tensor_parallel_group(args.tensor_parallel_size));
  }
  KVASIR_ASSIGN_OR_RETURN(RankSetup setup, set_up_rank(args, llm->tp_.get()));
  llm->model_ = std::move(setup.model);
  const ModelConfig& cfg = llm->model_->config;
  llm->max_model_len_ = setup.max_model_len;
  llm->num_kv_blocks_ = setup.num_kv_blocks;
  llm->kv_ = std::make_unique<KvHolder>();
  llm->kv_->cache = std::move(setup.cache);
  llm->kv_->draft = std::move(setup.draft);

  EngineOptions eo;
  eo.scheduler.max_num_seqs = args.max_num_seqs;
  eo.scheduler.max_num_batched_tokens = args.max_num_batched_tokens;
  eo.scheduler.max_model_len = llm->max_model_len_;
  eo.scheduler.block_size = args.block_size;
  eo.scheduler.num_blocks = llm->num_kv_blocks_;
  eo.scheduler.enable_prefix_caching = args.enable_prefix_caching;
  eo.scheduler.long_prefill_token_threshold = args.long_prefill_token_threshold;
  eo.scheduler.max_num_partial_prefills = args.max_num_partial_prefills;
  eo.scheduler.max_long_partial_prefills = args.max_long_partial_prefills;
  eo.scheduler.policy = args.scheduling_policy == "priority" ? SchedulingPolicy::kPriority : SchedulingPolicy::kFcfs;
  eo.scheduler.async_scheduling = args.async_scheduling;
  eo.scheduler.num_speculative_tokens = args.speculative.enabled() ? args.speculative.num_speculative_tokens : 0;
  if (const char* all = std::getenv("KVASIR_TEST_SPEC_VERIFY_ALL_DRAFTS"); all && std::string(all) == "1") {
    eo.scheduler.spec_verify_all_drafts = true;  // tests and verify-step measurements only
  }
  eo.scheduler.fill_defaults();
  KVASIR_RETURN_IF_ERROR(eo.scheduler.validate());
  eo.max_logprobs = args.max_logprobs;
  eo.async_output_proc = !args.disable_async_output_proc;
  eo.eos_token_ids = llm->model_->eos_token_ids;
  eo.grammar_json_any_whitespace = !args.structured_outputs.disable_any_whitespace;
  eo.grammar_in_reasoning = args.structured_outputs.enable_in_reasoning;

  std::unique_ptr<Worker> worker = std::make_unique<RunnerWorker>(std::move(setup.runner));
  // Rank 0 of a tensor-parallel group sends each step to the workers before running its own.
  if (llm->tp_) worker = std::make_unique<BroadcastingWorker>(*llm->tp_->comm, std::move(worker));
  auto executor = std::make_unique<InProcessExecutor>(
      std::move(worker), args.async_scheduling ? InProcessExecutor::Mode::kWorkerThread : InProcessExecutor::Mode::kInline);
  llm->engine_ = std::make_unique<Engine>(eo, *llm->model_->tokenizer, cfg.vocab_size, std::move(executor));
  return llm;
}

StatusOr<std::vector<GenerationResult>> LLM::generate(const std::vector<PromptInput>& prompts, const SamplingParams& params,
                                                      const std::function<void(size_t, size_t)>& on_progress) {
  std::vector<GenerationResult> results(prompts.size());
  std::vector<std::shared_ptr<RequestStream>> streams(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    const PromptInput& p = prompts[i];
    GenerationResult& r = results[i];
    r.request_id = std::to_string(next_id_++);
    r.prompt_token_ids = p.token_ids.empty() ? model_->tokenizer->encode(p.text, true) : p.token_ids;
    const SamplingParams& sp = p.params ? *p.params : params;
    r.outputs.resize(static_cast<size_t>(std::max(1, sp.n)));
    for (size_t k = 0; k < r.outputs.size(); ++k) r.outputs[k].index = static_cast<int>(k);
    auto s = engine_->add_request(r.request_id, r.prompt_token_ids, sp);
    if (!s.ok()) {
      r.error = s.status().message();
      continue;
    }
    streams[i] = *s;
  }
  size_t done = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (!streams[i]) {
      if (on_progress) on_progress(++done, prompts.size());
      continue;
    }
    RequestOutput d;
    while (streams[i]->next(&d)) {
      GenerationResult& r = results[i];
      r.prompt_logprobs.insert(r.prompt_logprobs.end(), d.prompt_logprobs.begin(), d.prompt_logprobs.end());
      if (d.index < 0 || static_cast<size_t>(d.index) >= r.outputs.size()) continue;
      CompletionResult& c = r.outputs[static_cast<size_t>(d.index)];
      c.text += d.text;
      c.token_ids.insert(c.token_ids.end(), d.token_ids.begin(), d.token_ids.end());
      c.logprobs.insert(c.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
      if (d.finished) {
        c.finish_reason = d.finish_reason;
        c.stop_reason_token = d.stop_reason_token;
        c.stop_reason_str = d.stop_reason_str;
        r.num_cached_tokens = d.num_cached_tokens;
        if (d.finish_reason == "error") r.error = d.error_message;
      }
    }
    if (on_progress) on_progress(++done, prompts.size());
  }
  return results;
}

}  // namespace kvasir
