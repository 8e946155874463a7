// EngineCore: the step loop on its own thread: take new requests and aborts from the input
// queue, schedule, execute on the runner, fold the results back, push EngineCoreOutputs to the
// output queue. It alone owns the Scheduler (and through it the KV manager) and the runner.
// Must not detokenize or talk to clients: the OutputProcessor does that on its own thread.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <unordered_set>
#include <variant>

#include "common/blocking_queue.h"
#include "engine/metrics.h"
#include "runner/model_runner.h"
#include "sched/scheduler.h"

namespace kvasir {

struct AddRequestCmd {
  std::unique_ptr<Request> request;
};
struct FinishRequestCmd {
  std::string req_id;
  RequestStatus status;  // kFinishedAborted (client gone) or kFinishedStopped (stop string)
};
using EngineCoreCmd = std::variant<AddRequestCmd, FinishRequestCmd>;

class EngineCore {
 public:
  EngineCore(const SchedulerConfig& config, std::unique_ptr<ModelRunner> runner, EngineMetrics& metrics,
             BlockingQueue<EngineCoreOutputs>& outputs);
  ~EngineCore();

  void start();
  // Stops the loop after the current step; unfinished requests stay unfinished.
  void stop();
  void submit(EngineCoreCmd cmd) { inputs_.push(std::move(cmd)); }
  // Called on the core thread after each step's outputs are pushed; set before start(). With
  // asynchronous output processing off it waits for the OutputProcessor (no overlap).
  void set_after_publish(std::function<void()> hook) { after_publish_ = std::move(hook); }

  bool dead() const { return dead_.load(); }
  const std::string& fault() const { return fault_; }
  int64_t num_steps() const { return num_steps_.load(); }
  // Seconds the loop spent inside runner.execute and in total while it had work (overlap report).
  double busy_execute_s() const { return execute_s_.load(); }

  // Test-only: the next forward pass fails with this message (fault injection).
  void inject_fault_for_testing(std::string message);
  // Test-only: with $KVASIR_TEST_FAULT_AFTER_STEPS=N (N >= 0) in the environment at construction,
  // the forward pass after N successful steps fails as a runner error would: every unfinished
  // request ends with an error and the core is dead (Engine::dead()). Never set it in production.
  static constexpr const char* kFaultAfterStepsEnv = "KVASIR_TEST_FAULT_AFTER_STEPS";

 private:
  void loop();
  bool drain_inputs(bool block);
  void handle(EngineCoreCmd& cmd, EngineCoreOutputs& early);
  void publish_stats(const SchedulerStats& stats);
  void fail_everything(const std::string& message);

  Scheduler scheduler_;
  std::unique_ptr<ModelRunner> runner_;
  EngineMetrics& metrics_;
  BlockingQueue<EngineCoreCmd> inputs_;
  BlockingQueue<EngineCoreOutputs>& outputs_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> dead_{false};
  std::string fault_;
  std::atomic<int64_t> num_steps_{0};
  std::atomic<double> execute_s_{0.0};
  std::mutex fault_mu_;
  std::string injected_fault_;
  int64_t fault_after_steps_ = -1;  // $KVASIR_TEST_FAULT_AFTER_STEPS; -1: off
  std::unordered_set<std::string> live_;  // requests added and not yet finished
  int64_t last_preemptions_ = 0, last_queries_ = 0, last_hits_ = 0;
  std::function<void()> after_publish_;
};

}  // namespace kvasir
