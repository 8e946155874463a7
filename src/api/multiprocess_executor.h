// The multiprocess executor (vLLM's --distributed-executor-backend mp): every model rank runs in
// its own worker process, and the process that serves keeps only the API server, the engine and
// the scheduler (no weights bound, no device). Processes and groups:
//   - the step group (shm): this process is rank 0, model rank r is rank r + 1. The engine's
//     Worker is a BroadcastingWorker around a RemoteWorker (executor/remote_worker.h): each step
//     goes to every model rank, and model rank 0 sends the step's result back;
//   - the model group (shm, --tensor-parallel-size > 1 only): the model ranks among themselves,
//     for the collectives of the forward pass, as a tensor-parallel group's ranks.
// The workers are this program run again (api/tensor_parallel_group.h's launch: the same
// environment variables, KVASIR_TP_RANK being the step-group rank), so the entry points need no
// new case: run_tensor_parallel_worker hands an mp worker to run_multiprocess_worker.
#pragma once

#include <memory>

#include "api/launch_plan.h"
#include "api/tensor_parallel_group.h"
#include "executor/executor.h"
#include "setup/engine_args.h"
#include "setup/loaded_model.h"

namespace kvasir {

// What the engine's process runs on.
struct MultiprocessFront {
  std::unique_ptr<LoadedModel> model;  // tokenizer, config, EOS ids, generation defaults; no backend
  std::unique_ptr<TensorParallelProcesses> group;  // the step group and the worker processes
  int num_kv_blocks = 0;                           // as the model ranks agreed
  int max_model_len = 0;                           // as model rank 0 fitted it to the KV cache
  std::unique_ptr<Worker> worker;                  // the engine's Worker; refers to group->comm
};

// Loads the model's tokenizer and config (no weights), starts the workers, waits until model
// rank 0 says its model and KV cache are ready. A worker that cannot start is named.
// plan: this process's launch plan (plan_launch: rank 0 of a one-host group of the model ranks + 1).
StatusOr<MultiprocessFront> start_multiprocess_front(const EngineArgs& args, const LaunchPlan& plan);

// A worker's whole life: join the step group (and the model group), build this rank's model, KV
// cache and runner, run every step until the front stops the group. Model rank 0 also tells the
// front its KV block count and max_model_len, and sends back each step's result. Returns the
// process exit code (0: stopped by the front).
int run_multiprocess_worker(const EngineArgs& args, const LaunchPlan& plan);

}  // namespace kvasir
