// EngineCore: the step loop on its own thread: take new requests and aborts from the input
// queue, schedule, hand the step to the Executor, fold the results back, push EngineCoreOutputs
// to the output queue. It alone owns the Scheduler (and through it the KV manager); the executor
// owns the device. With async scheduling it schedules step N+1 before folding step N back.
// Must not detokenize or talk to clients: the OutputProcessor does that on its own thread.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_set>
#include <variant>

#include "common/blocking_queue.h"
#include "engine/metrics.h"
#include "engine/structured_output_manager.h"
#include "executor/executor.h"
#include "sched/scheduler.h"

namespace kvasir {

struct AddRequestCmd {
  std::unique_ptr<Request> request;
};
struct FinishRequestCmd {
  std::string req_id;
  RequestStatus status;  // kFinishedAborted (client gone) or kFinishedStopped (stop string)
};
// Another part of a larger engine failed (a data-parallel replica, engine/engine_group.h): this
// core fails too, ending its requests with the message, as one engine's fault would.
struct FailEngineCmd {
  std::string message;
};
using EngineCoreCmd = std::variant<AddRequestCmd, FinishRequestCmd, FailEngineCmd>;

class EngineCore {
 public:
  // Wraps the executor in the fault decorator when $KVASIR_TEST_FAULT_AFTER_STEPS is set
  // (executor/fault_injecting_executor.h; test-only, never set it in production).
  // vocab_size: the logits width, for grammar masks (0: requests with a grammar are refused).
  EngineCore(const SchedulerConfig& config, std::unique_ptr<Executor> executor, EngineMetrics& metrics,
             BlockingQueue<EngineCoreOutputs>& outputs, int32_t vocab_size = 0);
  ~EngineCore();

  void start();
  // Stops the loop after the current step; unfinished requests stay unfinished.
  void stop();
  void submit(EngineCoreCmd cmd) { inputs_.push(std::move(cmd)); }
  // Called on the core thread after each step's outputs are pushed; set before start(). With
  // asynchronous output processing off it waits for the OutputProcessor (no overlap).
  void set_after_publish(std::function<void()> hook) { after_publish_ = std::move(hook); }
  // Called once, on the core thread, when the core fails (after its requests got their error).
  void set_on_fault(std::function<void(const std::string&)> hook) {
    std::lock_guard<std::mutex> lock(on_fault_mu_);
    on_fault_ = std::move(hook);
  }

  // How many leading blocks of the hash chain this core's prefix cache holds now (any thread; the
  // data-parallel router's question).
  int count_cached_prefix(std::span<const BlockHash> chain) const {
    return scheduler_.kv_cache_manager().pool().count_cached_prefix(chain);
  }
  bool dead() const { return dead_.load(); }
  const std::string& fault() const { return fault_; }
  int64_t num_steps() const { return num_steps_.load(); }
  // Seconds the loop spent waiting for the executor's results (overlap report).
  double busy_execute_s() const { return execute_s_.load(); }

 private:
  // A step handed to the executor and not yet folded back; none when so is null.
  struct InFlight {
    std::shared_ptr<const SchedulerOutput> so;
    StepFuture result;
    std::chrono::steady_clock::time_point handed_off;  // when the executor got it
  };
  void loop();
  // `folded`: satisfied once the step before is folded back (async scheduling), so grammar
  // masks of this step see its tokens; invalid when nothing is pending.
  InFlight submit_step(std::shared_future<void> folded);
  // Waits for the step and folds it back; false when it failed (the core is then dead).
  bool finish_step(InFlight& step);
  bool drain_inputs(bool block);
  void handle(EngineCoreCmd& cmd, EngineCoreOutputs& early);
  void publish_stats(const SchedulerStats& stats);
  void fail_everything(const std::string& message);

  Scheduler scheduler_;
  const int32_t vocab_size_;
  std::unique_ptr<StructuredOutputManager> structured_;  // made at the first request with a grammar
  std::unique_ptr<Executor> executor_;
  const bool async_scheduling_;
  EngineMetrics& metrics_;
  BlockingQueue<EngineCoreCmd> inputs_;
  BlockingQueue<EngineCoreOutputs>& outputs_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> dead_{false};
  std::string fault_;
  std::atomic<int64_t> num_steps_{0};
  std::atomic<double> execute_s_{0.0};
  // Host time per phase of the loop, summed over steps and logged when the loop ends: where the
  // device idles between steps of a synchronous loop (engine thread only). [0]: steps without
  // grammar rows, [1]: steps with them.
  struct LoopTimes {
    int64_t steps = 0;
    double fold_us = 0, grammar_accept_us = 0, schedule_us = 0, hand_off_us = 0, wait_us = 0;
  } times_[2];
  static bool constrained(const SchedulerOutput& so) { return !so.structured_output_req_ids.empty(); }
  std::unordered_set<std::string> live_;  // requests added and not yet finished
  int64_t last_preemptions_ = 0, last_queries_ = 0, last_hits_ = 0;
  std::function<void()> after_publish_;
  std::mutex on_fault_mu_;
  std::function<void(const std::string&)> on_fault_;
};

}  // namespace kvasir
