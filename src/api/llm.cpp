#include "kvasir/llm.h"

#include "common/log.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

#include "api/launch_plan.h"
#include "api/multiprocess_executor.h"
#include "api/rank_setup.h"
#include "api/remote_replica.h"
#include "api/tensor_parallel_group.h"
#include "api/data_parallel.h"
#include "engine/engine.h"
#include "engine/engine_group.h"
#include "executor/in_process_executor.h"
#include "executor/step_broadcast.h"
#include "setup/draft_cost.h"
#include "setup/kv_cache_sizing.h"
#include "setup/loaded_model.h"

namespace kvasir {

LLM::~LLM() {
  if (engines_) engines_->shutdown();
  engines_.reset();  // before the caches and models its runners use
  // Device time (busy, idle between steps, graph replays) for a server's or a script's log.
  for (const Replica& r : replicas_) {
    if (r.model && r.model->backend) {
      if (const std::string st = r.model->backend->stats(); !st.empty()) KVASIR_LOG_INFO("%s", st.c_str());
    }
  }
}

Engine& LLM::engine() { return engines_->replica(0); }

bool LLM::lost_remote_replica() const {
  for (const auto& link : remote_replica_links_) {
    if (link->lost()) return true;
  }
  return false;
}

namespace {

// What one engine is sized by: the planned KV cache and the model's EOS ids.
EngineOptions engine_options(const EngineArgs& args, int max_model_len, int num_kv_blocks,
                             const std::vector<int32_t>& eos_token_ids, bool async_scheduling, const ModelConfig& target) {
  EngineOptions eo;
  eo.scheduler.max_num_seqs = args.max_num_seqs;
  eo.scheduler.max_num_batched_tokens = args.max_num_batched_tokens;
  eo.scheduler.max_model_len = max_model_len;
  eo.scheduler.block_size = args.block_size;
  eo.scheduler.num_blocks = num_kv_blocks;
  eo.scheduler.enable_prefix_caching = args.enable_prefix_caching;
  eo.scheduler.long_prefill_token_threshold = args.long_prefill_token_threshold;
  eo.scheduler.max_num_partial_prefills = args.max_num_partial_prefills;
  eo.scheduler.max_long_partial_prefills = args.max_long_partial_prefills;
  eo.scheduler.policy = args.scheduling_policy == "priority" ? SchedulingPolicy::kPriority : SchedulingPolicy::kFcfs;
  eo.scheduler.async_scheduling = async_scheduling;
  eo.scheduler.num_speculative_tokens = args.speculative.enabled() ? args.speculative.num_speculative_tokens : 0;
  eo.scheduler.spec_draft_cost_ratio = args.speculative.enabled() ? draft_cost_ratio(args, target) : 0.0;
  if (eo.scheduler.spec_draft_cost_ratio > 0) {
    KVASIR_LOG_INFO("speculative %s: a draft token costs %.3f of a target token (weights read per pass / per step); "
                    "drafts are proposed only where the budget expects them to pay for that",
                    args.speculative.method.c_str(), eo.scheduler.spec_draft_cost_ratio);
  }
  if (const char* all = std::getenv("KVASIR_TEST_SPEC_VERIFY_ALL_DRAFTS"); all && std::string(all) == "1") {
    eo.scheduler.spec_verify_all_drafts = true;  // tests and verify-step measurements only
  }
  eo.scheduler.fill_defaults();
  eo.max_logprobs = args.max_logprobs;
  eo.async_output_proc = !args.disable_async_output_proc;
  eo.eos_token_ids = eos_token_ids;
  eo.grammar_json_any_whitespace = !args.structured_outputs.disable_any_whitespace;
  eo.grammar_in_reasoning = args.structured_outputs.enable_in_reasoning;
  return eo;
}

std::unique_ptr<Executor> executor_for(bool async_scheduling, std::unique_ptr<Worker> worker) {
  return std::make_unique<InProcessExecutor>(
      std::move(worker), async_scheduling ? InProcessExecutor::Mode::kWorkerThread : InProcessExecutor::Mode::kInline);
}

// Said once at start: whether the loop keeps a step in flight, and why (the default depends on
// the device, so a user comparing runs sees which loop ran).
bool resolve_async_scheduling(const EngineArgs& args, bool model_on_gpu) {
  const bool on = args.async_scheduling_on(model_on_gpu);
  if (!args.async_scheduling.has_value()) {
    KVASIR_LOG_INFO("async scheduling %s by default %s (--async-scheduling / --no-async-scheduling to choose)",
                    on ? "on" : "off",
                    args.speculative.enabled() ? "with speculative decoding"
                    : model_on_gpu             ? "for a model on a GPU"
                                               : "on the CPU backend");
  }
  return on;
}

}  // namespace

StatusOr<std::unique_ptr<LLM>> LLM::create(const EngineArgs& args) {
  KVASIR_RETURN_IF_ERROR(args.validate());
  std::unique_ptr<LLM> llm(new LLM());
  if (args.parallel_layout().world_size() == 1 && args.enable_expert_parallel) {
    KVASIR_RETURN_IF_ERROR(check_tensor_parallel_model(args));  // one rank holds every expert
  }
  KVASIR_ASSIGN_OR_RETURN(const LaunchPlan plan, plan_launch(args));
  if (plan.is_worker()) return internal_error("a tensor-parallel worker must run run_tensor_parallel_worker, not serve");
  std::vector<std::unique_ptr<Engine>> engines;
  if (args.distributed_executor_backend == "mp") {
    // Every model rank in a worker process; this process holds no weights and no device.
    KVASIR_ASSIGN_OR_RETURN(MultiprocessFront front, start_multiprocess_front(args, plan));
    llm->tp_ = std::move(front.group);
    llm->max_model_len_ = front.max_model_len;
    llm->num_kv_blocks_ = front.num_kv_blocks;
    const bool async = resolve_async_scheduling(args, device_flag_selects_gpu(args.device));
    llm->async_scheduling_ = async;
    EngineOptions eo = engine_options(args, front.max_model_len, front.num_kv_blocks, front.model->eos_token_ids, async,
                                      front.model->config);
    KVASIR_RETURN_IF_ERROR(eo.scheduler.validate());
    const LoadedModel& m = *front.model;
    engines.push_back(std::make_unique<Engine>(eo, *m.tokenizer, m.config.vocab_size,
                                               executor_for(async, std::move(front.worker))));
    llm->replicas_.push_back(Replica{std::move(front.model), nullptr, nullptr});
    llm->engines_ = std::make_unique<EngineGroup>(std::move(engines));
    return llm;
  }
  if (plan.launcher != LaunchPlan::Launcher::kNone) {
    // Before any worker starts.
    KVASIR_RETURN_IF_ERROR(check_tensor_parallel_model(args));
    KVASIR_RETURN_IF_ERROR(check_pipeline_parallel_model(args));
    KVASIR_ASSIGN_OR_RETURN(llm->tp_, form_tensor_parallel_group(plan));
  }
  // One whole engine per data-parallel replica of this node, each on its share of the host
  // (api/data_parallel.h); the group in front routes requests between them.
  const int hardware_threads = static_cast<int>(std::thread::hardware_concurrency());
  const int num_local = args.data_parallel.local_size(args.data_parallel_size);
  for (int i = 0; i < num_local; ++i) {
    const EngineArgs ra = data_parallel_replica_args(args, i, hardware_threads);
    KVASIR_ASSIGN_OR_RETURN(RankSetup setup, set_up_rank(ra, llm->tp_.get()));
    if (args.data_parallel_size > 1 && setup.model->backend->device() != Device::kCpu) {
      return unimplemented("--data-parallel-size > 1 runs on the CPU backend only (one device per replica is not "
                           "built); pass --device cpu");
    }
    const bool async = i == 0 ? resolve_async_scheduling(ra, setup.model->backend->device() != Device::kCpu)
                              : ra.async_scheduling_on(setup.model->backend->device() != Device::kCpu);
    EngineOptions eo = engine_options(ra, setup.max_model_len, setup.num_kv_blocks, setup.model->eos_token_ids, async,
                                      setup.model->config);
    KVASIR_RETURN_IF_ERROR(eo.scheduler.validate());
    if (i == 0) {
      llm->async_scheduling_ = async;
      llm->max_model_len_ = setup.max_model_len;
      llm->num_kv_blocks_ = setup.num_kv_blocks;
    } else if (setup.max_model_len != llm->max_model_len_ || setup.num_kv_blocks != llm->num_kv_blocks_) {
      return internal_error("data-parallel replica " + std::to_string(i) + " planned a different KV cache than replica 0");
    }
    if (args.data_parallel_size > 1) {
      KVASIR_LOG_INFO("data-parallel replica %d: %s, %d KV blocks", i, setup.model->backend->name().c_str(),
                      setup.num_kv_blocks);
    }
    // Pipeline x tensor parallel (one replica only): rank 0's stage group, which its model uses.
    if (setup.stage_comm) llm->stage_comm_ = std::move(setup.stage_comm);
    std::unique_ptr<Worker> worker = std::make_unique<RunnerWorker>(std::move(setup.runner));
    // Rank 0 of a parallel group sends each step to the workers before running its own.
    if (llm->tp_) worker = std::make_unique<BroadcastingWorker>(*llm->tp_->comm, std::move(worker));
    const LoadedModel& m = *setup.model;
    engines.push_back(std::make_unique<Engine>(eo, *m.tokenizer, m.config.vocab_size, executor_for(async, std::move(worker))));
    llm->replicas_.push_back(Replica{std::move(setup.model), std::move(setup.cache),
                                     std::make_unique<LoadedDraftModel>(std::move(setup.draft)),
                                     std::make_unique<LoadedEagleHead>(std::move(setup.eagle_head))});
  }
  KVASIR_RETURN_IF_ERROR(llm->add_remote_replicas(args, engines));
  llm->engines_ = std::make_unique<EngineGroup>(std::move(engines));
  return llm;
}

Status LLM::add_remote_replicas(const EngineArgs& args, std::vector<std::unique_ptr<Engine>>& engines) {
  const int num_local = args.data_parallel.local_size(args.data_parallel_size);
  if (num_local == args.data_parallel_size) return Status();
  if (replicas_.empty()) {
    // An API-only node 0: the engines still need the tokenizer, config and EOS ids.
    KVASIR_ASSIGN_OR_RETURN(auto front, load_model_without_weights(args.model.empty() ? default_model_path() : args.model,
                                                                   LoadOptions::from(args)));
    replicas_.push_back(Replica{std::move(front), nullptr, nullptr});
  }
  const LoadedModel& m = *replicas_.front().model;
  for (int i = num_local; i < args.data_parallel_size; ++i) {
    KVASIR_ASSIGN_OR_RETURN(RemoteReplica remote, connect_remote_replica(args, i));
    const bool async = args.async_scheduling_on(/*model_on_gpu=*/false);  // remote replicas run on the CPU
    if (num_local == 0 && i == 0) {
      async_scheduling_ = async;
      max_model_len_ = remote.max_model_len;
      num_kv_blocks_ = remote.num_kv_blocks;
    } else if (remote.max_model_len != max_model_len_ || remote.num_kv_blocks != num_kv_blocks_) {
      // The server checks every request against one max_model_len; the same flags on every node give one plan.
      return invalid_argument("data-parallel replica " + std::to_string(i) + " planned " +
                              std::to_string(remote.num_kv_blocks) + " KV blocks and max_model_len " +
                              std::to_string(remote.max_model_len) + ", replica 0 " +
                              std::to_string(num_kv_blocks_) + " and " + std::to_string(max_model_len_) +
                              ": give every node the same --kv-cache-memory, --max-model-len and model");
    }
    EngineOptions eo = engine_options(args, remote.max_model_len, remote.num_kv_blocks, m.eos_token_ids, async, m.config);
    KVASIR_RETURN_IF_ERROR(eo.scheduler.validate());
    engines.push_back(std::make_unique<Engine>(eo, *m.tokenizer, m.config.vocab_size,
                                               executor_for(async, std::move(remote.worker))));
    remote_replica_links_.push_back(std::move(remote.comm));
  }
  return Status();
}

StatusOr<std::vector<GenerationResult>> LLM::generate(const std::vector<PromptInput>& prompts, const SamplingParams& params,
                                                      const std::function<void(size_t, size_t)>& on_progress) {
  std::vector<GenerationResult> results(prompts.size());
  std::vector<std::shared_ptr<RequestStream>> streams(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    const PromptInput& p = prompts[i];
    GenerationResult& r = results[i];
    r.request_id = std::to_string(next_id_++);
    r.prompt_token_ids = p.token_ids.empty() ? model().tokenizer->encode(p.text, true) : p.token_ids;
    const SamplingParams& sp = p.params ? *p.params : params;
    r.outputs.resize(static_cast<size_t>(std::max(1, sp.n)));
    for (size_t k = 0; k < r.outputs.size(); ++k) r.outputs[k].index = static_cast<int>(k);
    auto s = engines_->add_request(r.request_id, r.prompt_token_ids, sp);
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
