// Overlapped steps (ModelRunner::launch / finish, the InProcessExecutor launching step N+1 before
// it answers step N, token ids fed on the device) on the CPU: the tiny Llama runs on a backend that
// forwards every op to the CPU backend but keeps each step's samples "on the device" until the
// runner collects them, and embeds tokens from there. A placeholder read on the host would be a
// negative id, which the CPU embedding refuses. Every run must produce exactly what the engine's
// read-back loop produces (greedy and seeded), through stops, preemptions, aborts and rows that
// need the host sampler, and the overlapped path must actually have run.
#include <gtest/gtest.h>

#include <cctype>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "model/decoder_model.h"
#include "runner/host_sampling_backend_test_util.h"
#include "runner/model_runner.h"
#include "setup/loaded_model.h"
#include "tiny_llama_test_util.h"

namespace kvasir {
namespace {


struct Request {
  std::vector<int32_t> prompt;
  SamplingParams params;
  bool abort_after_first = false;  // aborted once its first output arrives
};

struct GenerateRun {
  std::vector<std::vector<int32_t>> outputs;
  std::vector<bool> aborted;
  int64_t async_samples = 0, fed_tokens = 0, preemptions = 0;
};

struct LoopSetup {
  int num_blocks = 96;
  int max_num_seqs = 8;
  bool async_scheduling = true;
  bool overlap = true;
};

GenerateRun generate(LoadedModel& lm, const LoopSetup& setup, const std::vector<Request>& requests) {
  GenerateRun run;
  HostSamplingBackend backend(static_cast<int32_t>(lm.config.vocab_size), /*pad_decode_batches=*/true,
                              /*feedback=*/true);
  ModelOptions mo;
  mo.max_num_tokens = 128;
  mo.max_num_logits = setup.max_num_seqs;
  auto model = DecoderModel::create(lm.config, *lm.weights, backend, mo);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  if (!model.ok()) return run;
  auto cache = (*model)->allocate_kv_cache(setup.num_blocks, 16);
  EXPECT_TRUE(cache.ok());
  if (!cache.ok()) return run;
  RunnerConfig rc;
  rc.max_model_len = 256;
  rc.eos_token_ids = lm.eos_token_ids;
  rc.max_num_seqs = setup.max_num_seqs;
  rc.overlap_steps = setup.overlap;
  EngineOptions eo;
  eo.scheduler.max_num_seqs = setup.max_num_seqs;
  eo.scheduler.max_num_batched_tokens = 128;
  eo.scheduler.max_model_len = 256;
  eo.scheduler.num_blocks = setup.num_blocks;
  eo.scheduler.async_scheduling = setup.async_scheduling;
  eo.eos_token_ids = lm.eos_token_ids;
  eo.scheduler.fill_defaults();
  {
    Engine engine(eo, *lm.tokenizer, static_cast<int32_t>(lm.config.vocab_size),
                  std::make_unique<ModelRunner>(**model, *cache, rc));
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (size_t i = 0; i < requests.size(); ++i) {
      auto s = engine.add_request("r" + std::to_string(i), requests[i].prompt, requests[i].params);
      EXPECT_TRUE(s.ok()) << s.status().to_string();
      if (!s.ok()) return run;
      streams.push_back(*s);
    }
    for (size_t i = 0; i < streams.size(); ++i) {
      std::vector<int32_t> out;
      RequestOutput d;
      bool aborted = false;
      while (streams[i]->next(&d)) {
        out.insert(out.end(), d.token_ids.begin(), d.token_ids.end());
        if (d.finished) break;
        if (requests[i].abort_after_first && !aborted) {
          engine.abort("r" + std::to_string(i));
          aborted = true;
        }
      }
      run.outputs.push_back(out);
      run.aborted.push_back(aborted);
    }
    run.preemptions = engine.metrics().num_preemptions.load();
  }
  run.async_samples = backend.async_samples_;
  run.fed_tokens = backend.fed_tokens_;
  return run;
}


// More requests than sequences per step, of several prompt and output lengths, so steps mix
// prefills with decodes and requests finish (and new ones start) all along.
std::vector<Request> mixed_requests(int count, float temperature) {
  std::vector<Request> rs;
  for (int i = 0; i < count; ++i) {
    Request r;
    for (int n = 0; n < 5 + 7 * (i % 5); ++n) r.prompt.push_back(30 + (n * 11 + i * 3) % 200);
    r.params.max_tokens = 6 + (i * 5) % 23;
    r.params.ignore_eos = true;
    r.params.temperature = temperature;
    if (temperature > 0) r.params.seed = 1000 + static_cast<uint64_t>(i);
    rs.push_back(std::move(r));
  }
  return rs;
}

void expect_same_outputs(const GenerateRun& got, const GenerateRun& want, const std::vector<Request>& rs) {
  ASSERT_EQ(got.outputs.size(), rs.size());
  ASSERT_EQ(want.outputs.size(), rs.size());
  for (size_t i = 0; i < rs.size(); ++i) {
    if (rs[i].abort_after_first) continue;
    EXPECT_EQ(got.outputs[i], want.outputs[i]) << "request " << i;
  }
}

class OverlappedSteps : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto lm = load_tiny_llama();
    ASSERT_TRUE(lm.ok()) << lm.status().to_string();
    lm_ = std::move(lm).value().release();
  }
  static void TearDownTestSuite() {
    delete lm_;
    lm_ = nullptr;
  }
  static LoadedModel* lm_;
};
LoadedModel* OverlappedSteps::lm_ = nullptr;

TEST_F(OverlappedSteps, GreedyAndSeededEqualTheReadBackLoop) {
  for (const float temperature : {0.0f, 0.9f}) {
    const std::vector<Request> rs = mixed_requests(14, temperature);
    const GenerateRun read_back = generate(*lm_, LoopSetup{.overlap = false}, rs);
    const GenerateRun sync = generate(*lm_, LoopSetup{.async_scheduling = false, .overlap = false}, rs);
    const GenerateRun overlapped = generate(*lm_, LoopSetup{}, rs);
    expect_same_outputs(read_back, sync, rs);
    expect_same_outputs(overlapped, read_back, rs);
    for (size_t i = 0; i < rs.size(); ++i) {
      EXPECT_EQ(overlapped.outputs[i].size(), static_cast<size_t>(rs[i].params.max_tokens)) << "request " << i;
    }
    EXPECT_EQ(read_back.async_samples, 0);
    EXPECT_GT(overlapped.async_samples, 0);
    EXPECT_GT(overlapped.fed_tokens, 0) << "no step was launched before the previous one's tokens were back";
    std::printf("temperature %.1f: %lld steps left on the device, %lld ids fed there\n", temperature,
                static_cast<long long>(overlapped.async_samples), static_cast<long long>(overlapped.fed_tokens));
  }
}

// Too few blocks for every running request: preempted requests keep the tokens the device fed
// them, and recompute from them when they resume.
TEST_F(OverlappedSteps, PreemptionsKeepFedTokens) {
  std::vector<Request> rs = mixed_requests(10, 0.0f);
  for (auto& r : rs) r.params.max_tokens = 40;
  const LoopSetup small{.num_blocks = 14};
  const GenerateRun read_back = generate(*lm_, LoopSetup{.num_blocks = 14, .overlap = false}, rs);
  const GenerateRun overlapped = generate(*lm_, small, rs);
  EXPECT_GT(overlapped.preemptions, 0) << "the cache was meant to be too small";
  EXPECT_GT(overlapped.fed_tokens, 0);
  expect_same_outputs(overlapped, read_back, rs);
}

// Stop tokens end requests at a step whose successor was already launched with them; aborts
// drop requests whose tokens are still on the device; a row needing the host sampler (penalties)
// makes its steps read back first. Everything else must be unchanged.
TEST_F(OverlappedSteps, StopsAbortsAndHostSampledRows) {
  std::vector<Request> rs = mixed_requests(12, 0.0f);
  const GenerateRun free_run = generate(*lm_, LoopSetup{.overlap = false}, rs);
  // Stop at a token request 1 and 4 produce mid-way (stop tokens are not host-sampler rows).
  for (const int i : {1, 4}) {
    ASSERT_GE(free_run.outputs[static_cast<size_t>(i)].size(), 4u);
    rs[static_cast<size_t>(i)].params.stop_token_ids = {free_run.outputs[static_cast<size_t>(i)][2]};
    rs[static_cast<size_t>(i)].params.ignore_eos = false;
  }
  rs[3].params.repetition_penalty = 1.3f;
  rs[7].abort_after_first = true;
  rs[9].abort_after_first = true;
  const GenerateRun read_back = generate(*lm_, LoopSetup{.overlap = false}, rs);
  const GenerateRun overlapped = generate(*lm_, LoopSetup{}, rs);
  expect_same_outputs(overlapped, read_back, rs);
  EXPECT_LE(overlapped.outputs[1].size(), 3u);
  EXPECT_LE(overlapped.outputs[4].size(), 3u);
  EXPECT_TRUE(overlapped.aborted[7] && overlapped.aborted[9]);
  EXPECT_GT(overlapped.fed_tokens, 0);
}

// Grammar rows: their masks wait for the engine's fold of the step before, so a step with one is
// launched only after the step before is answered (else runner and engine would wait on each
// other). Constrained and free requests share the batch; all must match the read-back loop.
TEST_F(OverlappedSteps, GrammarRowsWaitForTheStepBefore) {
  std::vector<Request> rs = mixed_requests(8, 0.0f);
  const GenerateRun free_run = generate(*lm_, LoopSetup{.overlap = false}, rs);
  std::string text;
  for (const auto& o : free_run.outputs) text += lm_->tokenizer->decode(o, true);
  char forbidden = 0;
  for (char c : text) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      forbidden = c;
      break;
    }
  }
  ASSERT_NE(forbidden, 0) << "free outputs have no letter or digit to forbid: " << text;
  for (const int i : {0, 3, 5}) {
    StructuredOutputSpec spec;
    spec.kind = StructuredOutputSpec::Kind::kRegex;
    spec.text = std::string("[^") + forbidden + "]{64,256}";
    rs[static_cast<size_t>(i)].params.structured_outputs = spec;
  }
  const GenerateRun read_back = generate(*lm_, LoopSetup{.overlap = false}, rs);
  const GenerateRun overlapped = generate(*lm_, LoopSetup{}, rs);
  EXPECT_NE(read_back.outputs, free_run.outputs) << "the grammar changed nothing: nothing was tested";
  expect_same_outputs(overlapped, read_back, rs);
  for (const int i : {0, 3, 5}) {
    EXPECT_EQ(lm_->tokenizer->decode(overlapped.outputs[static_cast<size_t>(i)], true).find(forbidden), std::string::npos);
  }
}

}  // namespace
}  // namespace kvasir
