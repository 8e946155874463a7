// The runner's device verify path (one-query-rows layout, bucket padding, Backend::
// sample_and_verify) on the CPU: the tiny Llama runs on a backend that forwards every op to the
// CPU backend but says it samples on the device and pads decode batches to buckets, its sample()
// being the host Sampler. Greedy and seeded outputs with ngram drafts must equal the plain ones
// token for token (the verify rows draw at the positions a plain step would), and the verify steps
// must have taken the device path as pure decode steps. A GPU runs the same runner code
// (src/backend/cuda/cuda_spec_decode_e2e_test.cpp); this catches its host-side mistakes without one.
// The same with eagle3 and eagle drafts (the tiny target and EAGLE-3 head of tests/data/eagle3,
// the EAGLE-1 head of tests/data/eagle): the head is fed each step's accepted rows as the device
// path packs them.
#include <gtest/gtest.h>

#include <cctype>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "common/mapped_file.h"
#include "model/decoder_model.h"
#include "model/draft_heads/eagle3_head.h"
#include "model/draft_heads/eagle_head.h"
#include "model/registry.h"
#include "runner/host_sampling_backend_test_util.h"
#include "runner/model_runner.h"
#include "setup/loaded_model.h"
#include "tiny_llama_test_util.h"

namespace kvasir {
namespace {

const std::string kEagle3 = std::string(KVASIR_SOURCE_DIR) + "/tests/data/eagle3/";
const std::string kEagle = std::string(KVASIR_SOURCE_DIR) + "/tests/data/eagle/";

struct Run {
  std::vector<std::vector<int32_t>> outputs;
  int verify_steps = 0, pure_decode_verify_steps = 0;
  int64_t accepted = 0;  // drafts kept
  int64_t drafts = 0;    // draft tokens verified
};

constexpr int kBlocks = 96, kMaxTokens = 24;

// The eagle3 / eagle runs' model: the tiny target of tests/data/eagle3 and a head (the tokenizer,
// which only detokenizes here, stays the tiny Llama's: both have 256 ids). One config is set.
struct Eagle3Models {
  std::unique_ptr<WeightSource> target_weights, head_weights;
  ModelConfig target_config;
  std::optional<Eagle3HeadConfig> head_config;      // method "eagle3"
  std::optional<EagleHeadConfig> eagle_head_config;  // method "eagle"
};

// seed_base + i seeds prompt i of a sampled run. eagle3: draft with the head instead of ngram.
Run generate(LoadedModel& lm, bool speculative, const SamplingParams& sp, const std::vector<std::vector<int32_t>>& prompts,
             uint64_t seed_base = 100, const Eagle3Models* eagle3 = nullptr) {
  Run run;
  HostSamplingBackend backend(static_cast<int32_t>(lm.config.vocab_size));
  ModelOptions mo;
  mo.max_num_tokens = 256;
  mo.max_num_logits = 16 * 5;  // max_num_seqs x (1 + k), as setup sizes it on a GPU
  auto model = eagle3 != nullptr ? DecoderModel::create(eagle3->target_config, *eagle3->target_weights, backend, mo)
                                 : DecoderModel::create(lm.config, *lm.weights, backend, mo);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  if (!model.ok()) return run;
  auto cache = (*model)->allocate_kv_cache(kBlocks, 16);
  EXPECT_TRUE(cache.ok());
  if (!cache.ok()) return run;
  RunnerConfig rc;
  rc.max_model_len = 256;
  rc.eos_token_ids = lm.eos_token_ids;
  rc.max_num_seqs = 16;
  EngineOptions eo;
  eo.scheduler.max_num_seqs = 16;
  eo.scheduler.max_num_batched_tokens = 256;
  eo.scheduler.max_model_len = 256;
  eo.scheduler.num_blocks = kBlocks;
  eo.eos_token_ids = lm.eos_token_ids;
  if (speculative) {
    rc.speculative.method = "ngram";
    rc.speculative.num_speculative_tokens = 4;
    rc.speculative.prompt_lookup_min = 1;
    rc.speculative.prompt_lookup_max = 3;
    eo.scheduler.num_speculative_tokens = 4;
    eo.scheduler.spec_verify_all_drafts = true;
  }
  std::unique_ptr<DraftHead> head;
  KvCache head_cache;
  DraftModelRef draft;
  if (speculative && eagle3 != nullptr) {
    if (eagle3->head_config) {
      auto h = Eagle3Head::create(*eagle3->head_config, *eagle3->head_weights, **model, mo.max_num_tokens, mo.max_num_logits);
      EXPECT_TRUE(h.ok()) << h.status().to_string();
      if (!h.ok()) return run;
      head = std::move(h).value();
    } else {
      auto h = EagleHead::create(*eagle3->eagle_head_config, *eagle3->head_weights, **model, mo.max_num_tokens,
                                 mo.max_num_logits);
      EXPECT_TRUE(h.ok()) << h.status().to_string();
      if (!h.ok()) return run;
      head = std::move(h).value();
    }
    auto hc = head->allocate_kv_cache(kBlocks + 16 * 2, 16);
    EXPECT_TRUE(hc.ok());
    if (!hc.ok()) return run;
    head_cache = std::move(hc).value();
    rc.speculative = SpeculativeConfig{};
    rc.speculative.method = eagle3->head_config ? "eagle3" : "eagle";
    rc.speculative.num_speculative_tokens = 4;
    draft.cache = &head_cache;
    draft.eagle_head = head.get();
  }
  eo.scheduler.fill_defaults();
  {
    Engine engine(eo, *lm.tokenizer, static_cast<int32_t>(lm.config.vocab_size),
                  std::make_unique<ModelRunner>(**model, *cache, rc, draft));
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (size_t i = 0; i < prompts.size(); ++i) {
      SamplingParams p = sp;
      if (p.temperature > 0) p.seed = seed_base + i;
      auto s = engine.add_request("r" + std::to_string(i), prompts[i], p);
      EXPECT_TRUE(s.ok()) << s.status().to_string();
      if (!s.ok()) return run;
      streams.push_back(*s);
    }
    for (auto& s : streams) {
      std::vector<int32_t> out;
      RequestOutput d;
      while (s->next(&d)) {
        out.insert(out.end(), d.token_ids.begin(), d.token_ids.end());
        if (d.finished) break;
      }
      run.outputs.push_back(out);
    }
    run.accepted = engine.metrics().spec_decode_num_accepted_tokens.load();
    run.drafts = engine.metrics().spec_decode_num_draft_tokens.load();
  }
  run.verify_steps = backend.verify_steps_;
  run.pure_decode_verify_steps = backend.pure_decode_verify_steps_;
  return run;
}


// Repetitive prompts so ngram drafts from the first step; lengths (first, then `step` more each)
// cross block boundaries.
std::vector<std::vector<int32_t>> repetitive_prompts(int count, int first, int step) {
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < count; ++i) {
    std::vector<int32_t> p;
    for (int n = 0; n < first + step * i; ++n) p.push_back(40 + (n % (2 + i)) * 7 + i);
    prompts.push_back(p);
  }
  return prompts;
}

void expect_speculative_equals_plain(const SamplingParams& sp) {
  auto lm = load_tiny_llama();
  ASSERT_TRUE(lm.ok()) << lm.status().to_string();
  const std::vector<std::vector<int32_t>> prompts = repetitive_prompts(5, 9, 6);
  const Run plain = generate(**lm, false, sp, prompts);
  const Run spec = generate(**lm, true, sp, prompts);
  ASSERT_EQ(plain.outputs.size(), prompts.size());
  ASSERT_EQ(spec.outputs.size(), prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(plain.outputs[i].size(), static_cast<size_t>(kMaxTokens));
    EXPECT_EQ(spec.outputs[i], plain.outputs[i]) << "prompt " << i;
  }
  std::printf("verify steps %d (%d as pure decode steps), %lld drafts kept\n", spec.verify_steps,
              spec.pure_decode_verify_steps, static_cast<long long>(spec.accepted));
  EXPECT_EQ(plain.verify_steps, 0);
  // Kept drafts make rows past the first count: each must draw where a plain step would.
  EXPECT_GT(spec.accepted, 0);
  EXPECT_GT(spec.verify_steps, 0) << "no verify step took the device path";
  EXPECT_GT(spec.pure_decode_verify_steps, 0) << "no verify step ran as a pure decode step";
  // One request at a time too (batch 1: the bucket padding of 1 + k rows).
  const Run one = generate(**lm, true, sp, {prompts[2]}, 102);
  ASSERT_EQ(one.outputs.size(), 1u);
  EXPECT_EQ(one.outputs[0], plain.outputs[2]);
  // Sampled outputs wander off the prompt's tokens, so one request may find nothing to draft.
  if (sp.temperature == 0.0f) {
    EXPECT_GT(one.pure_decode_verify_steps, 0);
  }
}

// Grammar rows on the device path: each verify position's mask lands on its own logits row of the
// one-query-rows layout. The grammar forbids a character plain greedy decoding writes, so the
// masks change the output; the constrained outputs with drafts equal those without.
TEST(SpecDecodeDevicePath, GrammarMasksEachDraftPositionThroughOneQueryRowVerifySteps) {
  auto lm = load_tiny_llama();
  ASSERT_TRUE(lm.ok()) << lm.status().to_string();
  const std::vector<std::vector<int32_t>> prompts = repetitive_prompts(4, 12, 5);
  SamplingParams sp;
  sp.temperature = 0.0f;
  sp.max_tokens = kMaxTokens;
  sp.ignore_eos = true;
  const auto free_run = generate(**lm, false, sp, prompts);
  ASSERT_EQ(free_run.outputs.size(), prompts.size());
  std::string text;
  for (const auto& o : free_run.outputs) text += (*lm)->tokenizer->decode(o, true);
  char forbidden = 0;
  for (char c : text) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      forbidden = c;
      break;
    }
  }
  ASSERT_NE(forbidden, 0) << "plain outputs have no letter or digit to forbid: " << text;
  sp.structured_outputs = StructuredOutputSpec{};
  sp.structured_outputs->kind = StructuredOutputSpec::Kind::kRegex;
  // No stop token before 64 characters: the masks, not EOS, shape every step.
  sp.structured_outputs->text = std::string("[^") + forbidden + "]{64,256}";
  const auto plain = generate(**lm, false, sp, prompts);
  const auto spec = generate(**lm, true, sp, prompts);
  ASSERT_EQ(plain.outputs.size(), prompts.size());
  ASSERT_EQ(spec.outputs.size(), prompts.size());
  EXPECT_NE(plain.outputs, free_run.outputs) << "the grammar changed nothing: nothing was tested";
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(spec.outputs[i], plain.outputs[i]) << "prompt " << i;
    EXPECT_EQ((*lm)->tokenizer->decode(plain.outputs[i], true).find(forbidden), std::string::npos);
  }
  std::printf("constrained: verify steps %d (%d as pure decode steps), %lld drafts kept\n", spec.verify_steps,
              spec.pure_decode_verify_steps, static_cast<long long>(spec.accepted));
  EXPECT_GT(spec.accepted, 0);
  EXPECT_GT(spec.pure_decode_verify_steps, 0) << "no constrained verify step took the device path";
}

TEST(SpecDecodeDevicePath, GreedyEqualsPlainThroughOneQueryRowVerifySteps) {
  SamplingParams sp;
  sp.temperature = 0.0f;
  sp.max_tokens = kMaxTokens;
  sp.ignore_eos = true;
  expect_speculative_equals_plain(sp);
}

TEST(SpecDecodeDevicePath, SeededSamplingEqualsPlainThroughOneQueryRowVerifySteps) {
  SamplingParams sp;
  // Peaked enough that drafts are often kept, random enough that a draw at the wrong position
  // would change tokens.
  sp.temperature = 0.5f;
  sp.top_p = 0.95f;
  sp.top_k = 3;
  sp.max_tokens = kMaxTokens;
  sp.ignore_eos = true;
  expect_speculative_equals_plain(sp);
}

// method: "eagle3" or "eagle".
void eagle_greedy_and_seeded_equal_plain(const std::string& method) {
  LoadOptions lo;
  lo.device = "cpu";
  lo.num_threads = 1;
  lo.exact_matmul = true;
  auto lm = load_model(kTinyLlamaGguf, lo);  // for its tokenizer
  ASSERT_TRUE(lm.ok()) << lm.status().to_string();
  Eagle3Models e;
  auto tw = open_weights(kEagle3 + "tiny_target");
  const std::string head_dir = (method == "eagle3" ? kEagle3 : kEagle) + "tiny_head";
  auto hw = open_weights(head_dir);
  ASSERT_TRUE(tw.ok() && hw.ok());
  e.target_weights = std::move(tw).value();
  e.head_weights = std::move(hw).value();
  auto tc = load_model_config(*e.target_weights);
  ASSERT_TRUE(tc.ok());
  e.target_config = *tc;
  if (method == "eagle3") {
    auto hc = parse_eagle3_head_config(*read_text_file(head_dir + "/config.json"), *tc, "tiny_head");
    ASSERT_TRUE(hc.ok()) << hc.status().to_string();
    e.head_config = *hc;
  } else {
    auto hc = parse_eagle_head_config(*read_text_file(head_dir + "/config.json"), *tc, "tiny_head");
    ASSERT_TRUE(hc.ok()) << hc.status().to_string();
    e.eagle_head_config = *hc;
  }
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 5; ++i) {
    std::vector<int32_t> p;
    for (int n = 0; n < 9 + 6 * i; ++n) p.push_back(40 + (n % (2 + i)) * 7 + i);
    prompts.push_back(p);
  }
  for (float temperature : {0.0f, 0.5f}) {
    SamplingParams sp;
    sp.temperature = temperature;
    sp.top_k = 3;
    sp.max_tokens = kMaxTokens;
    sp.ignore_eos = true;
    const kvasir::Run plain = generate(**lm, false, sp, prompts, 100, &e);
    const kvasir::Run spec = generate(**lm, true, sp, prompts, 100, &e);
    ASSERT_EQ(spec.outputs.size(), prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(spec.outputs[i], plain.outputs[i]) << "prompt " << i;
    std::printf("%s, temperature %.1f: verify steps %d (%d as pure decode steps), %lld of %lld drafts kept\n",
                method.c_str(), temperature, spec.verify_steps, spec.pure_decode_verify_steps, static_cast<long long>(spec.accepted),
                static_cast<long long>(spec.drafts));
    EXPECT_GT(spec.pure_decode_verify_steps, 0) << "no verify step ran as a pure decode step";
    EXPECT_GT(spec.drafts, 0);
  }
}

TEST(SpecDecodeDevicePath, Eagle3GreedyAndSeededEqualPlainThroughOneQueryRowVerifySteps) {
  eagle_greedy_and_seeded_equal_plain("eagle3");
}

TEST(SpecDecodeDevicePath, EagleGreedyAndSeededEqualPlainThroughOneQueryRowVerifySteps) {
  eagle_greedy_and_seeded_equal_plain("eagle");
}

}  // namespace
}  // namespace kvasir
