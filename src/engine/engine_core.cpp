#include "engine/engine_core.h"

#include <chrono>
#include <utility>

#include "common/log.h"
#include "executor/fault_injecting_executor.h"

namespace kvasir {

EngineCore::EngineCore(const SchedulerConfig& config, std::unique_ptr<Executor> executor, EngineMetrics& metrics,
                       BlockingQueue<EngineCoreOutputs>& outputs, int32_t vocab_size)
    : scheduler_(config),
      vocab_size_(vocab_size),
      executor_(wrap_fault_injection_from_env(std::move(executor))),
      async_scheduling_(config.async_scheduling),
      metrics_(metrics),
      outputs_(outputs) {}

EngineCore::~EngineCore() { stop(); }

void EngineCore::start() { thread_ = std::thread([this] { loop(); }); }

void EngineCore::stop() {
  stop_ = true;
  inputs_.close();
  if (thread_.joinable()) thread_.join();
}

void EngineCore::handle(EngineCoreCmd& cmd, EngineCoreOutputs& early) {
  if (auto* add = std::get_if<AddRequestCmd>(&cmd)) {
    std::string id = add->request->req_id();
    const int num_prompt = add->request->num_prompt_tokens();
    Status s;
    if (add->request->grammar()) {
      if (vocab_size_ <= 0) {
        s = unimplemented("this engine was built without grammar support");
      } else {
        if (!structured_) structured_ = std::make_unique<StructuredOutputManager>(vocab_size_);
        structured_->add_request(*add->request);
      }
    }
    if (s.ok()) s = scheduler_.add_request(std::move(add->request));
    if (s.ok()) live_.insert(id);
    if (!s.ok() && structured_) structured_->remove_request(id);
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
    if (structured_) structured_->remove_request(fin->req_id);
  } else if (auto* fail = std::get_if<FailEngineCmd>(&cmd)) {
    if (!dead_) fail_everything(fail->message);
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
  // One scheduler per core and metrics object: its totals are the counters.
  if (s.spec_num_drafts != metrics_.spec_decode_num_drafts.load()) {
    metrics_.spec_decode_num_drafts = s.spec_num_drafts;
    metrics_.spec_decode_num_draft_tokens = s.spec_num_draft_tokens;
    metrics_.spec_decode_num_accepted_tokens = s.spec_num_accepted_tokens;
    metrics_.set_spec_decode_accepted_per_pos(s.spec_num_accepted_tokens_per_pos);
  }
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
  std::function<void(const std::string&)> hook;
  {
    std::lock_guard<std::mutex> lock(on_fault_mu_);
    hook = on_fault_;
  }
  if (hook) hook(message);
}

namespace {
using Clock = std::chrono::steady_clock;
double us_since(Clock::time_point t0) { return std::chrono::duration<double, std::micro>(Clock::now() - t0).count(); }
}  // namespace

EngineCore::InFlight EngineCore::submit_step(std::shared_future<void> folded) {
  const auto t0 = Clock::now();
  auto so = std::make_shared<const SchedulerOutput>(scheduler_.schedule());
  LoopTimes& times = times_[constrained(*so)];
  times.schedule_us += us_since(t0);
  const auto t1 = Clock::now();
  GrammarBitmaskFuture bitmask;
  if (structured_ && constrained(*so)) bitmask = structured_->fill_async(*so, std::move(folded));
  StepFuture result = executor_->execute(so, std::move(bitmask));
  times.hand_off_us += us_since(t1);
  return InFlight{std::move(so), std::move(result), t1};
}

bool EngineCore::finish_step(InFlight& step) {
  const auto t0 = Clock::now();
  StepResult ro = step.result.get();
  LoopTimes& times = times_[constrained(*step.so)];
  const double waited_us = us_since(t0);
  execute_s_ = execute_s_.load() + waited_us / 1e6;
  times.wait_us += waited_us;
  ++times.steps;
  const auto t1 = Clock::now();
  if (!ro.ok()) {
    fail_everything(ro.status().message());
    return false;
  }
  // The draft budget's step costs: a synchronous loop's step runs from hand-off to result alone
  // (with async scheduling two steps overlap, and speculation is off).
  if (!async_scheduling_) scheduler_.observe_step_time(*step.so, std::chrono::duration<double>(Clock::now() - step.handed_off).count());
  EngineCoreOutputs outs = scheduler_.update_from_output(*step.so, *ro);
  if (structured_) {
    const auto t2 = Clock::now();
    structured_->accept_outputs(outs);
    times.grammar_accept_us += us_since(t2);
  }
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
  times.fold_us += us_since(t1);
  return true;
}

void EngineCore::loop() {
  // Async scheduling keeps one step in flight: step N+1 is scheduled (from the requests as step N
  // left them, its sampled tokens counted as placeholders) and submitted before step N is folded
  // back, so the scheduler's work and the output push overlap the device's step.
  InFlight in_flight;  // async only, between iterations: the step the executor is running
  while (!stop_) {
    const bool idle = !scheduler_.has_unfinished_requests() && !in_flight.so;
    if (!drain_inputs(/*block=*/idle)) break;
    if (dead_) break;  // failed from outside (FailEngineCmd)
    InFlight next;
    // Async: the step in flight is folded after the next is submitted; grammar masks of the next
    // step wait for that fold (a broken promise, when the fold fails, releases them too).
    std::promise<void> folded;
    std::shared_future<void> folded_future;
    if (in_flight.so) folded_future = folded.get_future().share();
    if (scheduler_.has_unfinished_requests()) next = submit_step(folded_future);
    if (!async_scheduling_) std::swap(in_flight, next);  // fold the step just submitted
    if (in_flight.so) {
      // Nothing newer was submitted: an executor holding this step for the next one answers now.
      if (!next.so) executor_->flush();
      const bool ok = finish_step(in_flight);
      // Released even when the fold failed: the next step's fill must not hold its runner.
      if (folded_future.valid()) folded.set_value();
      in_flight = InFlight{};
      if (!ok) {
        if (next.so) {  // let the executor finish with it before the loop ends
          executor_->flush();
          next.result.wait();
        }
        break;
      }
    }
    in_flight = std::move(next);
    if (!in_flight.so && !scheduler_.has_unfinished_requests()) publish_stats(scheduler_.make_stats());
  }
  // Stopped with a step in flight: its results are dropped (the requests stay unfinished).
  if (in_flight.so) {
    executor_->flush();
    in_flight.result.wait();
  }
  for (int c = 0; c < 2; ++c) {
    const LoopTimes& t = times_[c];
    if (t.steps == 0) continue;
    const double n = static_cast<double>(t.steps);
    KVASIR_LOG_INFO("engine loop, host ms per %s step over %lld: schedule %.3f, hand-off %.3f, waited for the "
                    "executor %.3f, fold %.3f (grammar tokens queued %.3f)",
                    c ? "constrained" : "free", static_cast<long long>(t.steps), t.schedule_us / n / 1e3,
                    t.hand_off_us / n / 1e3, t.wait_us / n / 1e3, t.fold_us / n / 1e3, t.grammar_accept_us / n / 1e3);
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
