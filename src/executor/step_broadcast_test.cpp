// Steps of a tensor-parallel group over the shm communicator, ranks in forked processes: every
// rank runs every step rank 0's executor is given, in order, with the same grammar masks, and the
// group stops cleanly with the executor; a worker that dies mid-run fails rank 0's step with a
// message in bounded time (and every later one), and the surviving workers end with an error.
#include "executor/step_broadcast.h"

#include <signal.h>
#include <sys/mman.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "dist/communicator_test_util.h"
#include "dist/shm_communicator.h"
#include "executor/in_process_executor.h"

namespace kvasir {
namespace {

constexpr int kMaxSteps = 16;

// What a rank saw, step by step, in memory the parent reads after the ranks exit.
struct RankLog {
  int32_t num_steps;
  int32_t tokens[kMaxSteps];      // total_num_scheduled_tokens of each step
  int32_t mask_words[kMaxSteps];  // sum of the step's grammar mask words (0 without masks)
  float reduced[kMaxSteps];       // the step's all-reduce result, as a forward pass would make
};

// Stands in for the ModelRunner: one collective per step (as the forward pass has), its result
// sampled as every request's token; optionally dies at a given step.
class FakeWorker final : public Worker {
 public:
  FakeWorker(dist::Communicator& comm, RankLog* log, int die_at_step)
      : comm_(comm), log_(log), die_at_(die_at_step) {}
  StepResult execute_model(const SchedulerOutput& so, const GrammarBitmaskFuture& bitmask) override {
    const int step = log_->num_steps;
    if (step == die_at_) raise(SIGKILL);
    int32_t words = 0;
    if (bitmask.valid())
      for (int32_t w : bitmask.get()->words) words += w;
    float x = static_cast<float>(so.total_num_scheduled_tokens * (comm_.rank() + 1));
    Status s = comm_.all_reduce_sum(&x, 1, DType::kF32);
    if (!s.ok()) return s;
    log_->tokens[step] = so.total_num_scheduled_tokens;
    log_->mask_words[step] = words;
    log_->reduced[step] = x;
    log_->num_steps = step + 1;
    ModelRunnerOutput out;
    for (const auto& [id, n] : so.num_scheduled_tokens) out.outputs.push_back({id, {static_cast<TokenId>(x)}, {}, {}});
    return out;
  }

 private:
  dist::Communicator& comm_;
  RankLog* log_;
  int die_at_;
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

GrammarBitmaskFuture masks_of(int i) {
  if (i % 2 == 0) return {};
  std::promise<std::shared_ptr<const GrammarBitmask>> p;
  p.set_value(std::make_shared<const GrammarBitmask>(GrammarBitmask{{"req-" + std::to_string(i)}, 1, {i * 100}}));
  return p.get_future().share();
}

struct Group {
  int n;
  std::string id;
  RankLog* logs;
  int64_t timeout_ms = 20'000;
  explicit Group(int ranks) : n(ranks) {
    static int counter = 0;
    id = "step-test-" + std::to_string(getpid()) + "-" + std::to_string(++counter);
    logs = static_cast<RankLog*>(
        mmap(nullptr, sizeof(RankLog) * n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
    std::memset(logs, 0, sizeof(RankLog) * n);
  }
  ~Group() { munmap(logs, sizeof(RankLog) * n); }
  std::unique_ptr<dist::ShmCommunicator> comm(int rank) const {
    dist::ShmCommunicatorOptions o;
    o.group_id = id;
    o.rank = rank;
    o.world_size = n;
    o.timeout_ms = timeout_ms;
    auto c = dist::ShmCommunicator::create(o);
    if (!c.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", rank, c.status().to_string().c_str());
      _exit(3);
    }
    return std::move(c).value();
  }
};

class StepBroadcastTest : public ::testing::TestWithParam<InProcessExecutor::Mode> {};

TEST_P(StepBroadcastTest, EveryRankRunsEveryStepInOrderAndTheGroupStopsWithTheExecutor) {
  Group g(3);
  constexpr int kSteps = 6;
  const auto mode = GetParam();
  const auto codes = dist::testing::run_ranks(g.n, [&](int rank) {
    auto comm = g.comm(rank);
    if (rank != 0) {
      FakeWorker w(*comm, &g.logs[rank], -1);
      Status s = serve_steps(*comm, w);
      if (!s.ok()) std::fprintf(stderr, "rank %d: %s\n", rank, s.to_string().c_str());
      return s.ok() ? 0 : 2;
    }
    {
      InProcessExecutor ex(std::make_unique<BroadcastingWorker>(*comm, std::make_unique<FakeWorker>(*comm, &g.logs[0], -1)),
                           mode);
      std::vector<StepFuture> futures;
      for (int i = 0; i < kSteps; ++i) futures.push_back(ex.execute(step_of(i), masks_of(i)));
      for (int i = 0; i < kSteps; ++i) {
        StepResult r = futures[i].get();
        if (!r.ok() || r->outputs.size() != 1 || r->outputs[0].sampled_token_ids[0] != (i + 1) * 6) {
          std::fprintf(stderr, "rank 0: step %d: %s\n", i, r.ok() ? "wrong output" : r.status().to_string().c_str());
          return 1;
        }
      }
    }  // the executor's BroadcastingWorker stops the workers here
    return 0;
  });
  for (int r = 0; r < g.n; ++r) {
    EXPECT_EQ(codes[r], 0) << "rank " << r;
    ASSERT_EQ(g.logs[r].num_steps, kSteps) << "rank " << r;
    for (int i = 0; i < kSteps; ++i) {
      EXPECT_EQ(g.logs[r].tokens[i], i + 1) << "rank " << r << " step " << i;
      EXPECT_EQ(g.logs[r].mask_words[i], i % 2 ? i * 100 : 0) << "rank " << r << " step " << i;
      EXPECT_EQ(g.logs[r].reduced[i], (i + 1) * 6.0f) << "rank " << r << " step " << i;
    }
  }
}

TEST_P(StepBroadcastTest, AWorkerThatDiesFailsRankZerosStepsAndEndsTheGroup) {
  Group g(3);
  const auto mode = GetParam();
  const auto codes = dist::testing::run_ranks(g.n, [&](int rank) {
    auto comm = g.comm(rank);
    if (rank != 0) {
      FakeWorker w(*comm, &g.logs[rank], rank == 2 ? 3 : -1);
      Status s = serve_steps(*comm, w);
      std::fprintf(stderr, "rank %d ended: %s\n", rank, s.to_string().c_str());
      return s.ok() ? 0 : 2;
    }
    InProcessExecutor ex(std::make_unique<BroadcastingWorker>(*comm, std::make_unique<FakeWorker>(*comm, &g.logs[0], -1)),
                         mode);
    const auto t0 = std::chrono::steady_clock::now();
    int first_failed = -1;
    std::string message;
    for (int i = 0; i < 6; ++i) {
      StepResult r = ex.execute(step_of(i)).get();
      if (!r.ok() && first_failed < 0) {
        first_failed = i;
        message = r.status().message();
      }
      if (r.ok() && first_failed >= 0) return 4;  // a step after a failure must fail too
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "rank 0: step %d failed after %.2f s: %s\n", first_failed, s, message.c_str());
    if (first_failed != 3) return 1;
    if (message.find("rank 2") == std::string::npos) return 5;
    return s < 5.0 ? 0 : 6;
  });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 2) << "the surviving worker must end with an error";
  EXPECT_EQ(codes[2], 128 + SIGKILL);
}

TEST_P(StepBroadcastTest, AnIdleGroupOutlivesItsOpTimeoutThroughKeepAlives) {
  Group g(3);
  g.timeout_ms = 800;  // the workers wait in the next step's broadcast longer than this
  const auto mode = GetParam();
  const auto codes = dist::testing::run_ranks(g.n, [&](int rank) {
    auto comm = g.comm(rank);
    if (rank != 0) {
      FakeWorker w(*comm, &g.logs[rank], -1);
      Status s = serve_steps(*comm, w);
      if (!s.ok()) std::fprintf(stderr, "rank %d: %s\n", rank, s.to_string().c_str());
      return s.ok() ? 0 : 2;
    }
    InProcessExecutor ex(std::make_unique<BroadcastingWorker>(*comm, std::make_unique<FakeWorker>(*comm, &g.logs[0], -1),
                                                              std::chrono::milliseconds(150)),
                         mode);
    if (!ex.execute(step_of(0)).get().ok()) return 1;
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // idle: three op timeouts
    StepResult r = ex.execute(step_of(1)).get();
    if (!r.ok()) std::fprintf(stderr, "rank 0: %s\n", r.status().to_string().c_str());
    return r.ok() ? 0 : 3;
  });
  for (int r = 0; r < g.n; ++r) {
    EXPECT_EQ(codes[r], 0) << "rank " << r;
    EXPECT_EQ(g.logs[r].num_steps, 2) << "rank " << r << ": keep-alives are not steps";
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, StepBroadcastTest,
                         ::testing::Values(InProcessExecutor::Mode::kInline, InProcessExecutor::Mode::kWorkerThread),
                         [](const auto& info) {
                           return std::string(info.param == InProcessExecutor::Mode::kInline ? "Inline" : "WorkerThread");
                         });

}  // namespace
}  // namespace kvasir
