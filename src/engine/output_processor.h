// OutputProcessor: its own thread turns EngineCoreOutputs into client deltas, overlapped with
// the next forward pass: incremental detokenization (never a broken UTF-8 character), stop
// strings (with include_stop_str_in_output and a hold-back so a partial stop string is never
// streamed), logprob packaging, usage counts, latency metrics. A stop string ends the request
// in the engine core through a FinishRequestCmd. Must not touch the scheduler directly.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>

#include "common/blocking_queue.h"
#include "engine/engine_core.h"
#include "engine/metrics.h"
#include "engine/request_stream.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace kvasir {

class OutputProcessor {
 public:
  OutputProcessor(const Tokenizer& tokenizer, EngineCore& core, EngineMetrics& metrics,
                  BlockingQueue<EngineCoreOutputs>& inputs);
  ~OutputProcessor();

  // Registers a request before it reaches the engine core (so no output can arrive first).
  void add(const std::string& req_id, int index, const std::vector<int32_t>& prompt_ids,
           const SamplingParams& params, std::shared_ptr<RequestStream> stream);
  void start();
  void stop();
  int num_tracked() const;
  // Blocks until every batch pushed to the input queue so far has been processed. Used only when
  // asynchronous output processing is off (--disable-async-output-proc), to measure the overlap.
  void wait_idle();
  // Seconds spent processing batches (what the overlap hides from the engine loop).
  double busy_s() const { return busy_s_.load(); }

 private:
  struct State;
  void loop();
  void process(EngineCoreOutput& out);
  static std::optional<std::string> find_stop_string(State& st, size_t prev);
  static void cut_output(EngineCoreOutput& out, size_t n);

  const Tokenizer& tokenizer_;
  EngineCore& core_;
  EngineMetrics& metrics_;
  BlockingQueue<EngineCoreOutputs>& inputs_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::unique_ptr<State>> states_;
  std::thread thread_;
  std::mutex done_mu_;
  std::condition_variable done_cv_;
  uint64_t num_done_ = 0;  // batches processed
  std::atomic<double> busy_s_{0.0};
};

}  // namespace kvasir
