#include "engine/engine_core.h"

#include <chrono>
#include <cstdlib>

#include "common/log.h"

namespace kvasir {

EngineCore::EngineCore(const SchedulerConfig& config, std::unique_ptr<ModelRunner> runner, EngineMetrics& metrics,
                       BlockingQueue<EngineCoreOutputs>& outputs)
    : scheduler_(config), runner_(std::move(runner)), metrics_(metrics), outputs_(outputs) {
  // Read once here (not per step): the switch costs nothing when unset.
  if (const char* e = std::getenv(kFaultAfterStepsEnv); e != nullptr && *e != '\0') {
    char* end = nullptr;
    const long long n = std::strtoll(e, &end, 10);
    if (end != nullptr && *end == '\0' && n >= 0) {
      fault_after_steps_ = n;
      KVASIR_LOG_WARN("%s=%lld: test fault injection is on; the engine will fail after %lld steps",
                      kFaultAfterStepsEnv, n, n);
    } else {
      KVASIR_LOG_WARN("ignoring %s='%s' (not a non-negative integer)", kFaultAfterStepsEnv, e);
    }
  }
}

EngineCore::~EngineCore() { stop(); }

void EngineCore::start() { thread_ = std::thread([this] { loop(); }); }

void EngineCore::stop() {
  stop_ = true;
  inputs_.close();
  if (thread_.joinable()) thread_.join();
}

void EngineCore::inject_fault_for_testing(std::string message) {
  std::lock_guard<std::mutex> lock(fault_mu_);
  injected_fault_ = std::move(message);
}

void EngineCore::handle(EngineCoreCmd& cmd, EngineCoreOutputs& early) {
  if (auto* add = std::get_if<AddRequestCmd>(&cmd)) {
    std::string id = add->request->req_id();
    const int num_prompt = add->request->num_prompt_tokens();
    Status s = scheduler_.add_request(std::move(add->request));
    if (s.ok()) live_.insert(id);
    if (!s.ok()) {
      EngineCoreOutput out;
      out.req_id = id;
      out.finish_reason = FinishReason::kError;
      out.error_message = s.message();
      out.num_prompt_tokens = num_prompt;
      early.outputs.push_back(std::move(out));
    }
  } else if (auto* fin = std::get_if<FinishRequestCmd>(&cmd)) {
    scheduler_.finish_request(fin->req_id, fin->status);
    live_.erase(fin->req_id);
  }
}

bool EngineCore::drain_inputs(bool block) {
  EngineCoreOutputs early;
  if (block) {
    auto cmd = inputs_.pop();
    if (!cmd) return false;
    handle(*cmd, early);
  }
  while (auto cmd = inputs_.try_pop()) handle(*cmd, early);
  if (!early.outputs.empty()) outputs_.push(std::move(early));
  return true;
}

void EngineCore::publish_stats(const SchedulerStats& s) {
  metrics_.num_requests_running = s.num_running_reqs;
  metrics_.num_requests_waiting = s.num_waiting_reqs;
  metrics_.kv_cache_usage = s.kv_cache_usage;
  metrics_.num_preemptions += s.num_preemptions - last_preemptions_;
  metrics_.prefix_cache_queries += s.prefix_cache_queries - last_queries_;
  metrics_.prefix_cache_hits += s.prefix_cache_hits - last_hits_;
  last_preemptions_ = s.num_preemptions;
  last_queries_ = s.prefix_cache_queries;
  last_hits_ = s.prefix_cache_hits;
}

void EngineCore::fail_everything(const std::string& message) {
  fault_ = message;
  dead_ = true;
  KVASIR_LOG_ERROR("engine fault: %s", message.c_str());
  // Every unfinished request ends with the error; nothing is left hanging.
  EngineCoreOutputs outs;
  for (const auto& id : live_) {
    EngineCoreOutput out;
    out.req_id = id;
    out.finish_reason = FinishReason::kError;
    out.error_message = "engine fault: " + message;
    outs.outputs.push_back(std::move(out));
  }
  live_.clear();
  outputs_.push(std::move(outs));
}

void EngineCore::loop() {
  using Clock = std::chrono::steady_clock;
  while (!stop_) {
    if (!drain_inputs(/*block=*/!scheduler_.has_unfinished_requests())) break;
    if (!scheduler_.has_unfinished_requests()) {
      publish_stats(scheduler_.make_stats());
      continue;
    }
    SchedulerOutput so = scheduler_.schedule();
    std::string injected;
    {
      std::lock_guard<std::mutex> lock(fault_mu_);
      injected.swap(injected_fault_);
    }
    if (injected.empty() && fault_after_steps_ >= 0 && num_steps_.load() >= fault_after_steps_) {
      injected = "injected test fault after " + std::to_string(fault_after_steps_) + " steps (" +
                 kFaultAfterStepsEnv + ")";
    }
    auto t0 = Clock::now();
    StatusOr<ModelRunnerOutput> ro = injected.empty() ? runner_->execute(so) : StatusOr<ModelRunnerOutput>(internal_error(injected));
    execute_s_ = execute_s_.load() + std::chrono::duration<double>(Clock::now() - t0).count();
    if (!ro.ok()) {
      fail_everything(ro.status().message());
      break;
    }
    EngineCoreOutputs outs = scheduler_.update_from_output(so, *ro);
    ++num_steps_;
    ++metrics_.num_steps;
    publish_stats(outs.stats);
    for (const auto& o : outs.outputs) {
      if (o.finished()) live_.erase(o.req_id);
    }
    if (!outs.outputs.empty()) {
      outputs_.push(std::move(outs));
      if (after_publish_) after_publish_();
    }
  }
  if (dead_) {
    // Answer whatever still arrives so no client waits forever.
    while (auto cmd = inputs_.pop()) {
      if (auto* add = std::get_if<AddRequestCmd>(&*cmd)) {
        EngineCoreOutputs outs;
        EngineCoreOutput o;
        o.req_id = add->request->req_id();
        o.finish_reason = FinishReason::kError;
        o.error_message = "engine is dead: " + fault_;
        outs.outputs.push_back(std::move(o));
        outputs_.push(std::move(outs));
      }
    }
  }
}

}  // namespace kvasir
