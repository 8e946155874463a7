// The multiprocess executor's step path over shm communicators, ranks in forked processes: a front
// (step-group rank 0, no model) drives two model ranks (step-group ranks 1 and 2, with their own
// group for the forward pass's collectives) through BroadcastingWorker + RemoteWorker; it gets
// model rank 0's setup numbers (also after a load longer than the op timeout) and every step's
// output, in order, with logprobs intact. A step
// that fails on model rank 0 fails the front's step with its message; a model rank that dies
// fails the front's step in bounded time.
#include "executor/remote_worker.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "dist/communicator_test_util.h"
#include "dist/shm_communicator.h"
#include "executor/in_process_executor.h"
#include "executor/step_broadcast.h"

namespace kvasir {
namespace {

// Stands in for a model rank's runner: one all-reduce per step over the model group (as the
// forward pass has), its result sampled for every request with a one-row logprobs table. Fails
// (a Status) or dies (SIGKILL) at a given step.
class FakeModelWorker final : public Worker {
 public:
  FakeModelWorker(dist::Communicator& model_group, int fail_at, int die_at)
      : comm_(model_group), fail_at_(fail_at), die_at_(die_at) {}
  StepResult execute_model(const SchedulerOutput& so, const GrammarBitmaskFuture&) override {
    const int step = step_++;
    if (step == die_at_) raise(SIGKILL);
    if (step == fail_at_) return internal_error("the fake runner failed step " + std::to_string(step));
    float x = static_cast<float>(so.total_num_scheduled_tokens * (comm_.rank() + 1));
    KVASIR_RETURN_IF_ERROR(comm_.all_reduce_sum(&x, 1, DType::kF32));
    ModelRunnerOutput out;
    for (const auto& [id, n] : so.num_scheduled_tokens) {
      LogprobsLists l{1, 2, {static_cast<TokenId>(x), 3}, {-0.5f, -1.5f}, {1}};
      out.outputs.push_back({id, {static_cast<TokenId>(x)}, l, std::nullopt, {static_cast<TokenId>(n)}});
    }
    return out;
  }

 private:
  dist::Communicator& comm_;
  int fail_at_;
  int die_at_;
  int step_ = 0;
};

std::shared_ptr<const SchedulerOutput> step_of(int i) {
  auto so = std::make_shared<SchedulerOutput>();
  NewRequestData r;
  r.req_id = "req-" + std::to_string(i);
  r.prompt_token_ids = std::vector<TokenId>(static_cast<size_t>(i + 1), 7);
  so->scheduled_new_reqs.push_back(r);
  so->num_scheduled_tokens[r.req_id] = i + 1;
  so->total_num_scheduled_tokens = i + 1;
  return so;
}

std::unique_ptr<dist::ShmCommunicator> join(const std::string& id, int rank, int size, int64_t timeout_ms) {
  dist::ShmCommunicatorOptions o;
  o.group_id = id;
  o.rank = rank;
  o.world_size = size;
  o.timeout_ms = timeout_ms;
  auto c = dist::ShmCommunicator::create(o);
  if (!c.ok()) {
    std::fprintf(stderr, "rank %d of %s: %s\n", rank, id.c_str(), c.status().to_string().c_str());
    _exit(3);
  }
  return std::move(c).value();
}

// Runs the front and two model ranks; model rank 0 fails its step `fail_at`, model rank 1 dies
// at step `die_at`. `front` gets the front's executor and returns its exit code.
std::vector<int> run_group(int fail_at, int die_at, const std::function<int(Executor&, const ModelRankInfo&)>& front,
                           int64_t timeout_ms = 20'000, int load_ms = 0) {
  static int counter = 0;
  const std::string id = "remote-test-" + std::to_string(getpid()) + "-" + std::to_string(++counter);
  return dist::testing::run_ranks(3, [&](int rank) {
    auto steps = join(id + "-steps", rank, 3, timeout_ms);
    if (rank == 0) {
      auto info = recv_model_rank_info(*steps, 1);
      if (!info.ok()) {
        std::fprintf(stderr, "front: %s\n", info.status().to_string().c_str());
        return 7;
      }
      InProcessExecutor ex(std::make_unique<BroadcastingWorker>(*steps, std::make_unique<RemoteWorker>(*steps, 1)),
                           InProcessExecutor::Mode::kWorkerThread);
      return front(ex, *info);
    }
    const int model_rank = rank - 1;
    auto model_group = join(id + "-model", model_rank, 2, timeout_ms);
    // Every model rank loads (as for real, in parallel); only model rank 0 talks to the front.
    if (load_ms > 0 && model_rank != 0) std::this_thread::sleep_for(std::chrono::milliseconds(load_ms));
    std::unique_ptr<Worker> w = std::make_unique<FakeModelWorker>(*model_group, model_rank == 0 ? fail_at : -1,
                                                                  model_rank == 1 ? die_at : -1);
    if (model_rank == 0) {
      // A load longer than the op timeout (the front waits in one recv): "still loading" keeps it.
      ModelRankInfoSender info(*steps, 0, std::chrono::milliseconds(100));
      if (load_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(load_ms));
      if (!info.send(ModelRankInfo{123, 456}).ok()) return 8;
      w = std::make_unique<ReplyingWorker>(*steps, 0, std::move(w));
    }
    Status s = serve_steps(*steps, *w);
    if (!s.ok()) std::fprintf(stderr, "model rank %d ended: %s\n", model_rank, s.to_string().c_str());
    return s.ok() ? 0 : 2;
  });
}

TEST(RemoteWorker, TheFrontGetsModelRankZerosOutputForEveryStepInOrder) {
  constexpr int kSteps = 6;
  const auto codes = run_group(-1, -1, [](Executor& ex, const ModelRankInfo& info) {
    if (info.num_kv_blocks != 123 || info.max_model_len != 456) return 9;
    std::vector<StepFuture> futures;
    for (int i = 0; i < kSteps; ++i) futures.push_back(ex.execute(step_of(i)));
    for (int i = 0; i < kSteps; ++i) {
      StepResult r = futures[i].get();
      const TokenId want = static_cast<TokenId>((i + 1) * 3);  // (i + 1) * 1 + (i + 1) * 2
      if (!r.ok() || r->outputs.size() != 1 || r->outputs[0].req_id != "req-" + std::to_string(i) ||
          r->outputs[0].sampled_token_ids != std::vector<TokenId>{want} || !r->outputs[0].logprobs ||
          r->outputs[0].logprobs->token_ids != std::vector<TokenId>{want, 3} ||
          r->outputs[0].spec_token_ids != std::vector<TokenId>{i + 1}) {
        std::fprintf(stderr, "front: step %d: %s\n", i, r.ok() ? "wrong output" : r.status().to_string().c_str());
        return 1;
      }
    }
    return 0;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0, 0}));
}

TEST(RemoteWorker, AModelLoadLongerThanTheOpTimeoutIsWaitedFor) {
  const auto codes = run_group(
      -1, -1,
      [](Executor& ex, const ModelRankInfo& info) {
        if (info.num_kv_blocks != 123) return 9;
        return ex.execute(step_of(0)).get().ok() ? 0 : 1;
      },
      /*timeout_ms=*/800, /*load_ms=*/2000);
  EXPECT_EQ(codes, (std::vector<int>{0, 0, 0}));
}

TEST(RemoteWorker, AStepThatFailsOnModelRankZeroFailsTheFrontsStepWithItsMessage) {
  const auto codes = run_group(2, -1, [](Executor& ex, const ModelRankInfo&) {
    for (int i = 0; i < 2; ++i) {
      if (!ex.execute(step_of(i)).get().ok()) return 1;
    }
    StepResult r = ex.execute(step_of(2)).get();
    if (r.ok()) return 2;
    std::fprintf(stderr, "front: %s\n", r.status().to_string().c_str());
    if (r.status().message().find("the fake runner failed step 2") == std::string::npos) return 3;
    if (r.status().code() != StatusCode::kInternal) return 4;
    return ex.execute(step_of(3)).get().ok() ? 5 : 0;  // later steps fail too
  });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 2) << "model rank 0 ends with its step's error";
  EXPECT_EQ(codes[2], 2) << "model rank 1 sees the group end";
}

TEST(RemoteWorker, AModelRankThatDiesFailsTheFrontsStepInBoundedTime) {
  const auto codes = run_group(-1, 3, [](Executor& ex, const ModelRankInfo&) {
    const auto t0 = std::chrono::steady_clock::now();
    int first_failed = -1;
    for (int i = 0; i < 6; ++i) {
      StepResult r = ex.execute(step_of(i)).get();
      if (!r.ok() && first_failed < 0) {
        first_failed = i;
        std::fprintf(stderr, "front: step %d: %s\n", i, r.status().to_string().c_str());
      }
      if (r.ok() && first_failed >= 0) return 4;
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (first_failed != 3) return 1;
    return s < 5.0 ? 0 : 6;
  });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 2) << "model rank 0 ends with an error";
  EXPECT_EQ(codes[2], 128 + SIGKILL);
}

}  // namespace
}  // namespace kvasir
