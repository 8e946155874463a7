// The two ends of a step's result in the multiprocess executor (--distributed-executor-backend
// mp, api/multiprocess_executor.h): every model rank runs in a worker process, and the process
// that runs the engine (the front, rank 0 of the step group) holds no model. The front's Worker is
// a BroadcastingWorker (executor/step_broadcast.h) around a RemoteWorker: the step goes to every
// model rank exactly as in a tensor-parallel group, then RemoteWorker waits for model rank 0's
// ModelRunnerOutput (sched/runner_output_codec.h) over point-to-point messages. Model rank 0 runs
// serve_steps with a ReplyingWorker: its runner's result, or the Status that failed it, goes back
// to the front. The other model ranks run serve_steps on their plain runner, as TP workers do.
//
// Also here: the few numbers the front learns from model rank 0 once, before the first step
// (ModelRankInfo): the KV block count the model ranks agreed and the max_model_len fitted to it.
//
// Failure: a model rank that dies breaks the group (the communicator sees it), so the front's
// broadcast or receive fails and the step fails with that Status, as in a TP group.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/status.h"
#include "dist/communicator.h"
#include "executor/executor.h"

namespace kvasir {

// The front's end: receives each step's result from `source` (model rank 0's rank in the step
// group). Runs nothing itself; the BroadcastingWorker around it sends the step first.
class RemoteWorker final : public Worker {
 public:
  // comm: not owned, must outlive this worker.
  RemoteWorker(dist::Communicator& comm, int source);
  StepResult execute_model(const SchedulerOutput& so, const GrammarBitmaskFuture& bitmask) override;

 private:
  dist::Communicator& comm_;
  int source_;
  std::vector<uint8_t> message_;  // reused between steps
};

// Model rank 0's end: runs the step on `local` (its runner) and sends the result, or the Status
// that failed it, to `dest` (the front's rank in the step group).
class ReplyingWorker final : public Worker {
 public:
  ReplyingWorker(dist::Communicator& comm, int dest, std::unique_ptr<Worker> local);
  StepResult execute_model(const SchedulerOutput& so, const GrammarBitmaskFuture& bitmask) override;

 private:
  dist::Communicator& comm_;
  int dest_;
  std::unique_ptr<Worker> local_;
  std::vector<uint8_t> message_;
};

// What the front sizes its scheduler by, decided by the model ranks (api/rank_setup.h).
struct ModelRankInfo {
  int32_t num_kv_blocks = 0;
  int32_t max_model_len = 0;
};

// Model rank 0 while it loads: a load may take longer than a communicator op's timeout (a large
// checkpoint, CUDA graph capture), and the front waits for the info in one. So from construction
// until send(), a thread sends a "still loading" message every kInterval; recv_model_rank_info
// skips those.
class ModelRankInfoSender {
 public:
  static constexpr std::chrono::milliseconds kInterval{5'000};
  ModelRankInfoSender(dist::Communicator& comm, int dest, std::chrono::milliseconds interval = kInterval);
  ~ModelRankInfoSender();  // stops the thread (the front then sees this rank fail or exit)
  Status send(const ModelRankInfo& info);

 private:
  void stop();

  dist::Communicator& comm_;
  int dest_;
  std::mutex mu_;
  bool done_ = false;
  Status failed_;
  std::condition_variable wake_;
  std::thread thread_;
};
StatusOr<ModelRankInfo> recv_model_rank_info(dist::Communicator& comm, int source);

}  // namespace kvasir
