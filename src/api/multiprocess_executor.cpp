#include "api/multiprocess_executor.h"

#include <signal.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "api/rank_setup.h"
#include "common/log.h"
#include "dist/shm_communicator.h"
#include "executor/in_process_executor.h"
#include "executor/remote_worker.h"
#include "executor/step_broadcast.h"

namespace kvasir {
namespace {

constexpr int kFront = 0;         // the front's rank in the step group
constexpr int kModelRankZero = 1;  // model rank 0's rank in the step group
constexpr int64_t kModelGroupTimeoutMs = 60'000;
constexpr int64_t kGpuStepBusyWaitUs = 50'000;  // longer than a large decode step

std::string prefixed(const std::string& what) { return "--distributed-executor-backend mp: " + what; }

// The step group's waits yield for up to a step before they sleep when the model runs on a GPU:
// the front and the workers' CPUs are idle while the device steps, and a sleep's wake-up on each
// side of a step added ~2% to a batch-1 decode (H200, Llama-3.1-8B: 221 vs 226 tok/s). On the
// CPU backend the cores compute, so the default backoff stays.
LaunchPlan step_group_plan(const EngineArgs& args, LaunchPlan plan) {
  if (device_flag_selects_gpu(args.device)) plan.busy_wait_us = kGpuStepBusyWaitUs;
  return plan;
}

// The model ranks' own group, named after the step group (unique per launch).
StatusOr<std::unique_ptr<TensorParallelProcesses>> join_model_group(const EngineArgs& args, int model_rank) {
  const char* steps = std::getenv("KVASIR_TP_GROUP");  // set by the launch (tensor_parallel_group.cpp)
  if (steps == nullptr) return internal_error("no step group in the environment (KVASIR_TP_GROUP)");
  dist::ShmCommunicatorOptions o;
  o.group_id = std::string(steps) + "-model";
  o.rank = model_rank;
  o.world_size = args.tensor_parallel_size;
  o.timeout_ms = kModelGroupTimeoutMs;
  KVASIR_ASSIGN_OR_RETURN(auto comm, dist::ShmCommunicator::create(o));
  auto group = std::make_unique<TensorParallelProcesses>();
  group->comm = std::move(comm);
  // Every model rank is on this host: model rank r drives GPU r.
  group->local_rank = model_rank;
  group->ranks_on_host = args.tensor_parallel_size;
  return group;
}

}  // namespace

StatusOr<MultiprocessFront> start_multiprocess_front(const EngineArgs& args, const LaunchPlan& plan) {
  MultiprocessFront f;
  // Before any worker starts: a model that cannot be read or split is said once, here.
  KVASIR_ASSIGN_OR_RETURN(f.model,
                          load_model_without_weights(args.model.empty() ? default_model_path() : args.model,
                                                     LoadOptions::from(args)));
  KVASIR_RETURN_IF_ERROR(check_tensor_parallel_model(args));
  auto group = form_tensor_parallel_group(step_group_plan(args, plan));
  if (!group.ok()) {
    return Status(group.status().code(), prefixed(group.status().message() + " (worker rank r is model rank r - 1)"));
  }
  f.group = std::move(group).value();
  dist::Communicator& comm = *f.group->comm;
  auto info = recv_model_rank_info(comm, kModelRankZero);
  if (!info.ok()) {
    return Status(info.status().code(),
                  prefixed("the model ranks did not start: " + info.status().message() + "; see their messages above"));
  }
  f.num_kv_blocks = info->num_kv_blocks;
  f.max_model_len = info->max_model_len;
  f.worker = std::make_unique<BroadcastingWorker>(comm, std::make_unique<RemoteWorker>(comm, kModelRankZero));
  KVASIR_LOG_INFO("multiprocess executor: %d model rank(s) in worker processes, %d KV blocks", args.tensor_parallel_size,
                  f.num_kv_blocks);
  return f;
}

int run_multiprocess_worker(const EngineArgs& args, const LaunchPlan& plan) {
  const int step_rank = plan.rank;
  // Ctrl-C reaches the whole process group; the front decides when the workers stop.
  signal(SIGINT, SIG_IGN);
  const int model_rank = step_rank - 1;
  auto fail = [model_rank](const Status& s) {
    KVASIR_LOG_ERROR("multiprocess executor: model rank %d: %s", model_rank, s.to_string().c_str());
    return 1;
  };
  // Test-only (tests/server/test_multiprocess_executor.py): a worker that cannot start.
  if (std::getenv("KVASIR_TEST_TP_WORKER_FAIL_AT_START") != nullptr)
    return fail(internal_error("failing at start ($KVASIR_TEST_TP_WORKER_FAIL_AT_START)"));
  auto steps = form_tensor_parallel_group(step_group_plan(args, plan));
  if (!steps.ok()) return fail(steps.status());
  dist::Communicator& comm = *(*steps)->comm;
  std::unique_ptr<TensorParallelProcesses> model_group;
  if (args.tensor_parallel_size > 1) {
    auto g = join_model_group(args, model_rank);
    if (!g.ok()) return fail(g.status());
    model_group = std::move(g).value();
  }
  // Model rank 0 tells the front it is still loading, so a long load does not time it out.
  std::optional<ModelRankInfoSender> info;
  if (model_rank == 0) info.emplace(comm, kFront);
  auto setup = set_up_rank(args, model_group.get());
  if (!setup.ok()) return fail(setup.status());
  std::unique_ptr<Worker> worker = std::make_unique<RunnerWorker>(std::move(setup->runner));
  if (model_rank == 0) {
    Status s = info->send(ModelRankInfo{setup->num_kv_blocks, setup->max_model_len});
    if (!s.ok()) return fail(s);
    worker = std::make_unique<ReplyingWorker>(comm, kFront, std::move(worker));
  }
  Status s = serve_steps(comm, *worker);
  if (!s.ok()) return fail(s);
  return 0;
}

}  // namespace kvasir
