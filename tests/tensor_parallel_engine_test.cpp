// Tensor parallelism through the whole engine on the CPU: SmolLM2's Q4_1 GGUF split over 3 ranks
// (forked processes, shm communicator; 9 heads, so not 2) and the tiny Qwen3-MoE GGUF over 2 and 4
// (experts sharded, or whole per rank with expert parallelism, as the tiny DeepSeek-V3 GGUF's
// too) behind the real executor seam: rank 0 runs the Engine with a
// BroadcastingWorker, the others run serve_steps over their own ModelRunner. Greedy tokens of a
// batch of prompts equal TP=1's; a worker killed mid-generation ends every live request with an
// error and the group exits (no hang). Pipeline parallelism the same way: SmolLM2 in 2 stages,
// the tiny Qwen3-MoE in 2 stages of 2 tensor-parallel ranks (dist/parallel_layout.h order), a
// killed stage-1 worker.
#include <signal.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dist/communicator_test_util.h"
#include "dist/parallel_layout.h"
#include "dist/shm_communicator.h"
#include "engine/engine.h"
#include "executor/step_broadcast.h"
#include "setup/loaded_model.h"

namespace kvasir {
namespace {

constexpr int kPrompts = 3, kMaxTokens = 12, kBlocks = 64;
const std::string kSmolLm2 = std::string(KVASIR_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
const std::string kTinyMoe = std::string(KVASIR_SOURCE_DIR) + "/tests/data/tiny/qwen3_moe/model.gguf";
const std::string kTinyDeepseekV3 = std::string(KVASIR_SOURCE_DIR) + "/tests/data/tiny/deepseek_v3/model.gguf";

// What rank 0's engine produced, in memory the parent reads after the ranks exit.
struct Result {
  int32_t num_tokens[kPrompts];
  int32_t tokens[kPrompts][kMaxTokens];
  char finish_reason[kPrompts][16];
  char error[kPrompts][256];
};

// A worker that dies (SIGKILL, no cleanup) when asked for step `die_at`.
class DyingWorker final : public Worker {
 public:
  DyingWorker(std::unique_ptr<Worker> inner, int die_at) : inner_(std::move(inner)), die_at_(die_at) {}
  StepResult execute_model(const SchedulerOutput& so, const GrammarBitmaskFuture& bitmask) override {
    if (step_++ == die_at_) raise(SIGKILL);
    return inner_->execute_model(so, bitmask);
  }

 private:
  std::unique_ptr<Worker> inner_;
  int die_at_;
  int step_ = 0;
};

// Token ids below `vocab` (the tiny models have 256).
std::vector<int32_t> prompt_of(int i, int64_t vocab) {
  std::vector<int32_t> ids;
  const int range = static_cast<int>(std::min<int64_t>(3000, vocab - 100));
  for (int k = 0; k < 5 + 7 * i; ++k) ids.push_back(100 + (k * 37 + i * 11) % range);
  return ids;
}

// One rank's life: load its shard, then either drive the engine (rank 0) or serve steps.
int run_rank(const std::string& path, int rank, dist::ParallelLayout layout, const std::string& group, int die_rank,
             int die_at, Result* out, bool expert_parallel = false) {
  auto join = [](const std::string& id, int rank, int size) {
    dist::ShmCommunicatorOptions o;
    o.group_id = id;
    o.rank = rank;
    o.world_size = size;
    o.timeout_ms = 30'000;
    return dist::ShmCommunicator::create(o);
  };
  // The whole group's communicator, and with both kinds of parallelism the stage's own.
  std::unique_ptr<dist::ShmCommunicator> comm, stage_comm;
  if (layout.world_size() > 1) {
    auto c = join(group, rank, layout.world_size());
    if (!c.ok()) return std::fprintf(stderr, "rank %d: %s\n", rank, c.status().to_string().c_str()), 3;
    comm = std::move(c).value();
  }
  if (layout.pipeline_parallel > 1 && layout.tensor_parallel > 1) {
    auto c = join(group + "-stage" + std::to_string(layout.pp_rank(rank)), layout.tp_rank(rank), layout.tensor_parallel);
    if (!c.ok()) return std::fprintf(stderr, "rank %d: %s\n", rank, c.status().to_string().c_str()), 3;
    stage_comm = std::move(c).value();
  }
  LoadOptions lo;
  lo.device = "cpu";
  lo.num_threads = 1;
  lo.exact_matmul = true;  // reduction order is then the only difference between TP and not
  lo.model.max_num_tokens = 256;
  lo.model.max_num_logits = 16;
  if (layout.pipeline_parallel > 1) {
    lo.model.tp = TensorParallelGroup{layout.tp_rank(rank), layout.tensor_parallel, stage_comm.get(), expert_parallel};
    lo.model.pp = PipelineParallelGroup{layout.pp_rank(rank), layout.pipeline_parallel, comm.get()};
  } else {
    lo.model.tp = TensorParallelGroup{rank, layout.tensor_parallel, comm.get(), expert_parallel};
  }
  auto m = load_model(path, lo);
  if (!m.ok()) return std::fprintf(stderr, "rank %d: %s\n", rank, m.status().to_string().c_str()), 3;
  // Every rank sizes its cache alike: the scheduler's block ids index each rank's own cache.
  auto cache = (*m)->model->allocate_kv_cache(kBlocks, 16);
  if (!cache.ok()) return 3;
  RunnerConfig rc;
  rc.max_model_len = 256;
  rc.eos_token_ids = (*m)->eos_token_ids;
  rc.max_num_seqs = 16;
  auto runner = std::make_unique<ModelRunner>(*(*m)->model, *cache, rc);
  std::unique_ptr<Worker> worker = std::make_unique<RunnerWorker>(std::move(runner));
  if (rank == die_rank) worker = std::make_unique<DyingWorker>(std::move(worker), die_at);
  if (rank != 0) {
    Status s = serve_steps(*comm, *worker);
    if (!s.ok()) std::fprintf(stderr, "rank %d ended: %s\n", rank, s.to_string().c_str());
    return s.ok() ? 0 : 2;
  }
  if (comm) worker = std::make_unique<BroadcastingWorker>(*comm, std::move(worker));
  EngineOptions eo;
  eo.scheduler.max_num_seqs = 16;
  eo.scheduler.max_num_batched_tokens = 256;
  eo.scheduler.max_model_len = 256;
  eo.scheduler.num_blocks = kBlocks;
  eo.eos_token_ids = (*m)->eos_token_ids;
  Engine engine(eo, *(*m)->tokenizer, static_cast<int32_t>((*m)->config.vocab_size),
                std::make_unique<InProcessExecutor>(std::move(worker), InProcessExecutor::Mode::kInline));
  SamplingParams sp;
  sp.temperature = 0;
  sp.max_tokens = kMaxTokens;
  sp.ignore_eos = true;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < kPrompts; ++i) {
    auto s = engine.add_request("p" + std::to_string(i), prompt_of(i, (*m)->config.vocab_size), sp);
    if (!s.ok()) return std::fprintf(stderr, "add_request: %s\n", s.status().to_string().c_str()), 3;
    streams.push_back(*s);
  }
  for (int i = 0; i < kPrompts; ++i) {
    RequestOutput d;
    while (streams[i]->next(&d)) {
      for (int32_t t : d.token_ids)
        if (out->num_tokens[i] < kMaxTokens) out->tokens[i][out->num_tokens[i]++] = t;
      if (d.finished) {
        std::snprintf(out->finish_reason[i], sizeof(out->finish_reason[i]), "%s", d.finish_reason.c_str());
        std::snprintf(out->error[i], sizeof(out->error[i]), "%s", d.error_message.c_str());
      }
    }
  }
  return 0;
}

struct Shared {
  Result* r;
  Shared() {
    r = static_cast<Result*>(mmap(nullptr, sizeof(Result), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
    std::memset(r, 0, sizeof(Result));
  }
  ~Shared() { munmap(r, sizeof(Result)); }
};

void expect_split_greedy_equals_whole(const std::string& path, int tp, int pp = 1, bool expert_parallel = false) {
  Shared whole, split;
  const auto one =
      dist::testing::run_ranks(1, [&](int rank) { return run_rank(path, rank, {1, 1}, "", -1, -1, whole.r); });
  ASSERT_EQ(one[0], 0);
  const dist::ParallelLayout layout{tp, pp};
  const std::string group = "tp-engine-" + std::to_string(getpid()) + "-" + std::to_string(tp) + "x" + std::to_string(pp);
  const auto codes = dist::testing::run_ranks(layout.world_size(),
                                              [&](int rank) { return run_rank(path, rank, layout, group, -1, -1, split.r, expert_parallel); });
  for (int r = 0; r < layout.world_size(); ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
  for (int i = 0; i < kPrompts; ++i) {
    EXPECT_STREQ(split.r->finish_reason[i], "length") << split.r->error[i];
    ASSERT_EQ(whole.r->num_tokens[i], kMaxTokens);
    ASSERT_EQ(split.r->num_tokens[i], kMaxTokens) << "prompt " << i;
    for (int t = 0; t < kMaxTokens; ++t)
      EXPECT_EQ(split.r->tokens[i][t], whole.r->tokens[i][t]) << "prompt " << i << " token " << t;
  }
}

TEST(TensorParallelEngineTest, SmolLm2ThreeRanksGreedyEqualsOneRank) {
  if (access(kSmolLm2.c_str(), R_OK) != 0) GTEST_SKIP() << kSmolLm2 << " is not here (scripts/fetch_models.sh)";
  expect_split_greedy_equals_whole(kSmolLm2, 3);
}

TEST(TensorParallelEngineTest, TinyQwen3MoeTwoAndFourRanksGreedyEqualsOneRank) {
  expect_split_greedy_equals_whole(kTinyMoe, 2);
  expect_split_greedy_equals_whole(kTinyMoe, 4);
}

// --enable-expert-parallel: each rank holds whole experts (the tiny models have 8).
TEST(TensorParallelEngineTest, ExpertParallelTinyMoeModelsGreedyEqualsOneRank) {
  expect_split_greedy_equals_whole(kTinyMoe, 2, /*pp=*/1, /*expert_parallel=*/true);
  expect_split_greedy_equals_whole(kTinyMoe, 4, /*pp=*/1, /*expert_parallel=*/true);
  expect_split_greedy_equals_whole(kTinyDeepseekV3, 2, /*pp=*/1, /*expert_parallel=*/true);
}

TEST(TensorParallelEngineTest, AWorkerKilledMidGenerationEndsEveryRequestWithAnError) {
  if (access(kSmolLm2.c_str(), R_OK) != 0) GTEST_SKIP() << kSmolLm2 << " is not here (scripts/fetch_models.sh)";
  Shared split;
  const std::string group = "tp-engine-kill-" + std::to_string(getpid());
  const auto codes = dist::testing::run_ranks(
      3, [&](int rank) { return run_rank(kSmolLm2, rank, {3, 1}, group, 2, 4, split.r); }, std::chrono::seconds(60));
  EXPECT_EQ(codes[0], 0) << "rank 0 must end its requests and exit, not hang";
  EXPECT_EQ(codes[1], 2) << "the surviving worker ends with an error";
  EXPECT_EQ(codes[2], 128 + SIGKILL);
  for (int i = 0; i < kPrompts; ++i) {
    EXPECT_STREQ(split.r->finish_reason[i], "error") << "prompt " << i;
    EXPECT_NE(std::string(split.r->error[i]).find("rank 2"), std::string::npos) << split.r->error[i];
    EXPECT_LT(split.r->num_tokens[i], kMaxTokens);
  }
}

TEST(PipelineParallelEngineTest, SmolLm2TwoStagesGreedyEqualsOneRank) {
  if (access(kSmolLm2.c_str(), R_OK) != 0) GTEST_SKIP() << kSmolLm2 << " is not here (scripts/fetch_models.sh)";
  expect_split_greedy_equals_whole(kSmolLm2, 1, 2);
}

TEST(PipelineParallelEngineTest, TinyQwen3MoeTwoStagesOfTwoRanksGreedyEqualsOneRank) {
  expect_split_greedy_equals_whole(kTinyMoe, 1, 2);
  expect_split_greedy_equals_whole(kTinyMoe, 2, 2);
}

TEST(PipelineParallelEngineTest, AStageOneWorkerKilledMidGenerationEndsEveryRequestWithAnError) {
  if (access(kSmolLm2.c_str(), R_OK) != 0) GTEST_SKIP() << kSmolLm2 << " is not here (scripts/fetch_models.sh)";
  Shared split;
  const std::string group = "pp-engine-kill-" + std::to_string(getpid());
  const auto codes = dist::testing::run_ranks(
      2, [&](int rank) { return run_rank(kSmolLm2, rank, {1, 2}, group, 1, 4, split.r); }, std::chrono::seconds(60));
  EXPECT_EQ(codes[0], 0) << "rank 0 must end its requests and exit, not hang";
  EXPECT_EQ(codes[1], 128 + SIGKILL);
  for (int i = 0; i < kPrompts; ++i) {
    EXPECT_STREQ(split.r->finish_reason[i], "error") << "prompt " << i;
    EXPECT_NE(std::string(split.r->error[i]).find("rank 1"), std::string::npos) << split.r->error[i];
    EXPECT_LT(split.r->num_tokens[i], kMaxTokens);
  }
}

}  // namespace
}  // namespace kvasir
