// End-to-end engine behaviour on the real SmolLM2 model (CPU): continuous batching gives the same
// greedy tokens as one request at a time, also when a tiny KV cache forces preemptions; seeded
// sampling is independent of concurrency; prefix caching cuts computed prompt tokens >= 10x with
// identical outputs; stop strings, n > 1, aborts and bad input behave.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "setup/loaded_model.h"
#include "common/json.h"
#include "common/mapped_file.h"
#include "engine/engine.h"
#include "golden.h"
#include "kvasir/llm.h"

namespace kvasir::testing {
namespace {

const char* kModel = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

// 32 varied prompts: the committed test prompts plus short variations of them.
std::vector<std::string> varied_prompts() {
  std::vector<std::string> out;
  auto text = read_text_file(repo_path("tests/data/prompts/prompts.json"));
  if (text.ok()) {
    auto j = parse_json(*text);
    if (j.ok()) {
      for (const Json& p : j->find("prompts")->as_array()) {
        std::string t = p.get_string("text");
        if (t.empty() || t.size() > 1500) continue;  // long ones are covered by the golden test
        out.push_back(t);
      }
    }
  }
  const char* extra[] = {"Once upon a time", "def fibonacci(n):", "The three primary colors are",
                         "Translate to French: good morning", "1, 2, 3, 5, 8,", "Q: What is 2+2?\nA:",
                         "import numpy as np\n", "Dear Sir or Madam,", "The mitochondria is",
                         "Roses are red,", "SELECT * FROM", "In 1492,", "Water boils at", "<html>",
                         "The quick brown fox", "Ein kleiner Test:"};
  for (const char* e : extra) out.push_back(e);
  out.resize(32, "Hello");
  return out;
}

class EngineE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!file_exists(repo_path(kModel))) GTEST_SKIP() << "model missing: run scripts/setup.sh";
  }
  static EngineArgs args(int max_num_seqs, int64_t kv_bytes, bool prefix_caching = true) {
    EngineArgs ea;
    ea.model = repo_path(kModel);
    ea.max_num_seqs = max_num_seqs;
    ea.max_num_batched_tokens = 512;
    ea.kv_cache_memory = kv_bytes;
    ea.enable_prefix_caching = prefix_caching;
    return ea;
  }
  static std::vector<std::vector<int32_t>> run(LLM& llm, const std::vector<PromptInput>& prompts, const SamplingParams& sp) {
    auto res = llm.generate(prompts, sp);
    EXPECT_TRUE(res.ok());
    std::vector<std::vector<int32_t>> out;
    for (const auto& r : *res) {
      EXPECT_TRUE(r.error.empty()) << r.error;
      out.push_back(r.outputs[0].token_ids);
    }
    return out;
  }
};

std::vector<PromptInput> to_inputs(const std::vector<std::string>& texts) {
  std::vector<PromptInput> v;
  for (const auto& t : texts) v.push_back(PromptInput{t, {}, std::nullopt});
  return v;
}

TEST_F(EngineE2ETest, BatchedGreedyEqualsOneAtATimeAlsoUnderPreemption) {
  const auto prompts = to_inputs(varied_prompts());
  SamplingParams sp;
  sp.temperature = 0;
  sp.max_tokens = 24;
  sp.ignore_eos = true;

  auto solo = LLM::create(args(1, int64_t{256} << 20));
  ASSERT_TRUE(solo.ok()) << solo.status().to_string();
  std::vector<std::vector<int32_t>> expected;
  for (const auto& p : prompts) expected.push_back(run(**solo, {p}, sp)[0]);
  solo->reset();

  auto batched = LLM::create(args(32, int64_t{256} << 20));
  ASSERT_TRUE(batched.ok());
  EXPECT_EQ(run(**batched, prompts, sp), expected);
  EXPECT_EQ((*batched)->engine().metrics().num_preemptions.load(), 0);
  batched->reset();

  // About 12 blocks of 16 tokens per request are needed at the end; give the pool far less than
  // 32 requests' worth so the scheduler must preempt and recompute.
  LoadOptions lo;
  auto probe = load_tokenizer_only(repo_path(kModel));
  ASSERT_TRUE(probe.ok());
  const ModelConfig& c = (*probe)->config;
  const int64_t block_bytes = 16 * 2 * c.num_layers * c.num_kv_heads * c.head_dim * 4;
  auto tight = LLM::create(args(32, block_bytes * 48));
  ASSERT_TRUE(tight.ok());
  EXPECT_EQ(run(**tight, prompts, sp), expected);
  const int64_t preemptions = (*tight)->engine().metrics().num_preemptions.load();
  std::printf("[ metrics ] preemptions with a 48-block KV cache: %lld\n", static_cast<long long>(preemptions));
  EXPECT_GT(preemptions, 0);
}

TEST_F(EngineE2ETest, SeededSamplingIsIndependentOfConcurrency) {
  auto texts = varied_prompts();
  std::vector<PromptInput> prompts;
  for (size_t i = 0; i < texts.size(); ++i) {
    SamplingParams sp;
    sp.temperature = 1.0f;
    sp.top_p = 0.95f;
    sp.max_tokens = 16;
    sp.seed = 1000 + i;
    prompts.push_back(PromptInput{texts[i], {}, sp});
  }
  SamplingParams unused;
  auto one = LLM::create(args(1, int64_t{256} << 20));
  ASSERT_TRUE(one.ok());
  std::vector<std::vector<int32_t>> alone;
  for (const auto& p : prompts) alone.push_back(run(**one, {p}, unused)[0]);
  one->reset();
  auto many = LLM::create(args(32, int64_t{256} << 20));
  ASSERT_TRUE(many.ok());
  EXPECT_EQ(run(**many, prompts, unused), alone);
}

TEST_F(EngineE2ETest, PrefixCachingComputesTenTimesFewerPromptTokens) {
  // A ~1,000-token shared prefix, then a distinct question per request.
  std::string prefix = "You are a helpful assistant. Here is the reference document:\n";
  for (int i = 0; prefix.size() < 5000; ++i) {
    prefix += "Section " + std::to_string(i) + ": the quick brown fox jumps over the lazy dog while the "
              "engine schedules tokens in blocks of sixteen. ";
  }
  std::vector<PromptInput> prompts;
  for (int i = 0; i < 50; ++i) prompts.push_back(PromptInput{prefix + "\nQuestion " + std::to_string(i) + ": summarize.", {}, std::nullopt});
  SamplingParams sp;
  sp.temperature = 0;
  sp.max_tokens = 4;
  sp.ignore_eos = true;

  auto cached = LLM::create(args(16, int64_t{512} << 20, true));
  ASSERT_TRUE(cached.ok());
  auto res = (*cached)->generate(prompts, sp);
  ASSERT_TRUE(res.ok());
  int64_t prompt_tokens = 0;
  for (const auto& r : *res) prompt_tokens += static_cast<int64_t>(r.prompt_token_ids.size());
  const auto& m = (*cached)->engine().metrics();
  const int64_t computed = prompt_tokens - m.prefix_cache_hits.load();
  std::printf("[ metrics ] prefix caching: %lld prompt tokens, %lld computed (%.1fx fewer), %lld queried\n",
              static_cast<long long>(prompt_tokens), static_cast<long long>(computed),
              static_cast<double>(prompt_tokens) / static_cast<double>(computed),
              static_cast<long long>(m.prefix_cache_queries.load()));
  EXPECT_GE(prompt_tokens, 50 * 1000);
  EXPECT_LE(computed * 10, prompt_tokens);

  // The same outputs without caching (a sample of the requests keeps the test fast).
  auto uncached = LLM::create(args(16, int64_t{512} << 20, false));
  ASSERT_TRUE(uncached.ok());
  std::vector<PromptInput> sample = {prompts[0], prompts[17], prompts[49]};
  auto ref = run(**uncached, sample, sp);
  EXPECT_EQ(ref[0], (*res)[0].outputs[0].token_ids);
  EXPECT_EQ(ref[1], (*res)[17].outputs[0].token_ids);
  EXPECT_EQ(ref[2], (*res)[49].outputs[0].token_ids);
  EXPECT_EQ((*uncached)->engine().metrics().prefix_cache_hits.load(), 0);
}

TEST_F(EngineE2ETest, TheStopTokenIsNotTextEvenWithSpecialTokensKept) {
  // vLLM: the EOS or stop_token_ids token that ended a request is left out of its text unless
  // include_stop_str_in_output, also when special tokens are kept (tool parsers keep them).
  auto llm = LLM::create(args(4, int64_t{64} << 20));
  ASSERT_TRUE(llm.ok());
  auto run = [&](const SamplingParams& sp) {
    auto r = (*llm)->generate({PromptInput{"The capital of France is", {}, std::nullopt}}, sp);
    EXPECT_TRUE(r.ok());
    return (*r)[0].outputs[0];
  };
  SamplingParams sp;
  sp.temperature = 0;
  sp.max_tokens = 8;
  sp.skip_special_tokens = false;
  const auto full = run(sp);
  ASSERT_GE(full.token_ids.size(), 4u);
  const int32_t stop_id = full.token_ids[3];
  size_t first = 0;
  while (full.token_ids[first] != stop_id) ++first;  // where greedy decoding first emits it
  SamplingParams prefix = sp;
  prefix.max_tokens = static_cast<int>(first);
  const std::string before = first == 0 ? std::string() : run(prefix).text;
  prefix.max_tokens = static_cast<int>(first) + 1;
  const std::string through = run(prefix).text;

  SamplingParams stop = sp;
  stop.stop_token_ids = {stop_id};
  const auto o = run(stop);
  EXPECT_EQ(o.finish_reason, "stop");
  EXPECT_EQ(o.token_ids.size(), first + 1);
  EXPECT_EQ(o.text, before);
  stop.include_stop_str_in_output = true;
  EXPECT_EQ(run(stop).text, through);
}

TEST_F(EngineE2ETest, StopStringsNAndLogprobs) {
  auto llm = LLM::create(args(8, int64_t{128} << 20));
  ASSERT_TRUE(llm.ok());
  SamplingParams sp;
  sp.temperature = 0;
  sp.max_tokens = 40;
  auto base = (*llm)->generate({PromptInput{"The capital of France is", {}, std::nullopt}}, sp);
  ASSERT_TRUE(base.ok());
  const std::string full = (*base)[0].outputs[0].text;
  ASSERT_GE(full.size(), 8u);
  // Stop on a substring from the middle of the greedy text.
  const std::string stop = full.substr(full.size() / 2, 3);
  sp.stop = {stop};
  auto cut = (*llm)->generate({PromptInput{"The capital of France is", {}, std::nullopt}}, sp);
  ASSERT_TRUE(cut.ok());
  const auto& c = (*cut)[0].outputs[0];
  EXPECT_EQ(c.finish_reason, "stop");
  EXPECT_EQ(c.text, full.substr(0, full.find(stop)));
  ASSERT_TRUE(c.stop_reason_str.has_value());
  sp.include_stop_str_in_output = true;
  auto with = (*llm)->generate({PromptInput{"The capital of France is", {}, std::nullopt}}, sp);
  EXPECT_EQ((*with)[0].outputs[0].text, full.substr(0, full.find(stop) + stop.size()));

  SamplingParams many;
  many.n = 3;
  many.temperature = 1.0f;
  many.seed = 7;
  many.max_tokens = 8;
  many.ignore_eos = true;  // at temperature 1 a sample may draw EOS early; the count check needs 8
  many.logprobs = 2;
  auto nres = (*llm)->generate({PromptInput{"Tell me a story", {}, std::nullopt}}, many);
  ASSERT_TRUE(nres.ok());
  ASSERT_EQ((*nres)[0].outputs.size(), 3u);
  for (const auto& o : (*nres)[0].outputs) {
    EXPECT_EQ(o.token_ids.size(), 8u);
    ASSERT_EQ(o.logprobs.size(), 8u);
    for (size_t i = 0; i < o.logprobs.size(); ++i) {
      EXPECT_EQ(o.logprobs[i].chosen.token_id, o.token_ids[i]);
      EXPECT_LE(o.logprobs[i].chosen.logprob, 0.0f);
      EXPECT_EQ(o.logprobs[i].top.size(), 2u);
    }
  }
}

// --kv-cache-dtype: float16 halves a block's bytes (so --kv-cache-memory holds twice the blocks),
// fp8 / fp8_e4m3 / fp8_e5m2 quarter them (one byte per element); what the backend cannot hold,
// and unknown names, are refused before anything loads.
TEST_F(EngineE2ETest, KvCacheDtypeFlag) {
  LoadOptions lo;
  auto f32 = load_model(repo_path(kModel), lo);
  lo.kv_cache_dtype = "float16";
  auto f16 = load_model(repo_path(kModel), lo);
  ASSERT_TRUE(f32.ok() && f16.ok());
  EXPECT_EQ((*f32)->backend->kv_cache_dtype(), DType::kF32);
  EXPECT_EQ((*f16)->backend->kv_cache_dtype(), DType::kF16);
  EXPECT_EQ((*f32)->model->kv_cache_bytes_per_block(16), 2 * (*f16)->model->kv_cache_bytes_per_block(16));
  for (auto [name, dtype] : {std::pair{"fp8", DType::kF8E4M3}, std::pair{"fp8_e4m3", DType::kF8E4M3},
                             std::pair{"fp8_e5m2", DType::kF8E5M2}}) {
    lo.kv_cache_dtype = name;
    auto f8 = load_model(repo_path(kModel), lo);
    ASSERT_TRUE(f8.ok()) << name << ": " << f8.status().to_string();
    EXPECT_EQ((*f8)->backend->kv_cache_dtype(), dtype) << name;
    EXPECT_EQ((*f16)->model->kv_cache_bytes_per_block(16), 2 * (*f8)->model->kv_cache_bytes_per_block(16)) << name;
  }
  lo.kv_cache_dtype = "bfloat16";
  auto bf16 = load_model(repo_path(kModel), lo);
  ASSERT_FALSE(bf16.ok());
  EXPECT_NE(bf16.status().message().find("float32, float16 or FP8"), std::string::npos) << bf16.status().message();
  EngineArgs ea = args(4, int64_t{64} << 20);
  ea.kv_cache_dtype = "fp4";
  auto bad = LLM::create(ea);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--kv-cache-dtype"), std::string::npos) << bad.status().message();
}

// An FP8 cache through the engine: a greedy request completes, and the same request twice gives
// the same tokens (the cache is rewritten, never read stale, across requests and prefix hits).
TEST_F(EngineE2ETest, Fp8KvCacheServesRequests) {
  EngineArgs ea = args(4, int64_t{64} << 20);
  ea.kv_cache_dtype = "fp8";
  auto llm = LLM::create(ea);
  ASSERT_TRUE(llm.ok()) << llm.status().to_string();
  SamplingParams sp;
  sp.temperature = 0;
  sp.max_tokens = 16;
  sp.ignore_eos = true;
  std::vector<PromptInput> prompts(2, PromptInput{"The capital of France is", {}, std::nullopt});
  auto first = (*llm)->generate(prompts, sp);
  auto again = (*llm)->generate(prompts, sp);
  ASSERT_TRUE(first.ok() && again.ok());
  ASSERT_EQ((*first)[0].outputs.at(0).token_ids.size(), 16u);
  EXPECT_EQ((*first)[0].outputs[0].token_ids, (*first)[1].outputs.at(0).token_ids);
  EXPECT_EQ((*first)[0].outputs[0].token_ids, (*again)[0].outputs.at(0).token_ids);
}

// --dtype on the CPU: a GGUF loads with it (its blocks stay as they are; the HF directories'
// conversion is dense_weight_dtype_test's and model_golden_test's), an unknown name is refused.
TEST_F(EngineE2ETest, DtypeFlag) {
  LoadOptions lo;
  lo.device = "cpu";
  lo.dtype = "bfloat16";
  auto gguf = load_model(repo_path(kModel), lo);
  ASSERT_TRUE(gguf.ok()) << gguf.status().to_string();
  lo.dtype = "int4";
  auto bad = load_model(repo_path(kModel), lo);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--dtype"), std::string::npos) << bad.status().message();
}

// A sequence longer than the whole KV cache could never finish: max_model_len is capped to the
// cache at start (an explicit --max-model-len past it refuses to start), so such a request is
// refused when added instead of running until the cache runs out and then failing.
TEST_F(EngineE2ETest, MaxModelLenIsCappedToWhatTheKvCacheHolds) {
  EngineArgs ea = args(4, int64_t{8} << 20);  // a few blocks, far below the model's 8192 tokens
  auto llm = LLM::create(ea);
  ASSERT_TRUE(llm.ok()) << llm.status().message();
  const int capacity = ((*llm)->num_kv_blocks() - 1) * ea.block_size;
  ASSERT_LT(capacity, 8192);
  EXPECT_EQ((*llm)->max_model_len(), capacity);
  SamplingParams past_the_cache;
  past_the_cache.max_tokens = capacity;  // with a 3-token prompt: 3 tokens more than the cache
  past_the_cache.ignore_eos = true;
  const auto refused = (*llm)->engine().add_request("past-the-cache", {1, 2, 3}, past_the_cache);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("maximum context length is " + std::to_string(capacity)), std::string::npos)
      << refused.status().message();
  llm->reset();

  ea.max_model_len = 8192;
  auto explicit_too_long = LLM::create(ea);
  ASSERT_FALSE(explicit_too_long.ok());
  EXPECT_NE(explicit_too_long.status().message().find("max_model_len 8192 is larger than the maximum number of tokens "
                                                      "that can be stored in KV cache (" + std::to_string(capacity)),
            std::string::npos)
      << explicit_too_long.status().message();
}

TEST_F(EngineE2ETest, BadRequestsAreRejectedAndAbortFreesBlocks) {
  auto llm = LLM::create(args(8, int64_t{128} << 20));
  ASSERT_TRUE(llm.ok());
  Engine& engine = (*llm)->engine();
  SamplingParams sp;
  sp.max_tokens = 4;
  EXPECT_FALSE(engine.add_request("bad-token", {1, 2, 999999}, sp).ok());
  EXPECT_FALSE(engine.add_request("empty", {}, sp).ok());
  SamplingParams too_long = sp;
  too_long.max_tokens = (*llm)->max_model_len();
  EXPECT_FALSE(engine.add_request("too-long", {1, 2, 3}, too_long).ok());
  SamplingParams bad = sp;
  bad.temperature = -1;
  EXPECT_FALSE(engine.add_request("bad-temp", {1, 2, 3}, bad).ok());

  // A long generation aborted mid-way frees its blocks within a step: the step in flight when
  // the abort arrives may finish, no further one runs for it. Counted in steps, not seconds, so
  // that a sanitizer build (a step can take seconds) checks the same thing.
  SamplingParams lots;
  lots.max_tokens = 2000;
  lots.ignore_eos = true;
  auto stream = engine.add_request("long", std::vector<int32_t>(200, 42), lots);
  ASSERT_TRUE(stream.ok());
  RequestOutput d;
  ASSERT_TRUE((*stream)->next(&d));
  const auto& m = engine.metrics();
  const int64_t steps_at_abort = m.num_steps.load();
  engine.abort("long");
  std::string reason;
  while ((*stream)->next(&d)) {
    if (d.finished) reason = d.finish_reason;
  }
  EXPECT_EQ(reason, "abort");
  // Bounded only against a hang; the check is the step count below.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while ((m.kv_cache_usage.load() > 0 || m.num_requests_running.load() > 0) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(m.kv_cache_usage.load(), 0.0);
  EXPECT_EQ(m.num_requests_running.load(), 0);
  EXPECT_LE(m.num_steps.load(), steps_at_abort + 1) << "steps ran for an aborted request";
}

TEST_F(EngineE2ETest, LockStepOutputProcessingGivesTheSameStreams) {
  // --disable-async-output-proc only changes when detokenization runs, never what it produces.
  std::vector<PromptInput> prompts = to_inputs(varied_prompts());
  prompts.resize(8);
  SamplingParams sp;
  sp.temperature = 0;
  sp.max_tokens = 12;
  sp.ignore_eos = true;
  auto overlapped = LLM::create(args(8, int64_t{128} << 20));
  ASSERT_TRUE(overlapped.ok());
  auto a = (*overlapped)->generate(prompts, sp);
  ASSERT_TRUE(a.ok());
  EXPECT_GT((*overlapped)->engine().output_processing_s(), 0.0);
  overlapped->reset();
  EngineArgs ea = args(8, int64_t{128} << 20);
  ea.disable_async_output_proc = true;
  auto lock_step = LLM::create(ea);
  ASSERT_TRUE(lock_step.ok());
  auto b = (*lock_step)->generate(prompts, sp);
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(a->size(), b->size());
  for (size_t i = 0; i < a->size(); ++i) {
    EXPECT_EQ((*a)[i].outputs[0].text, (*b)[i].outputs[0].text);
    EXPECT_EQ((*a)[i].outputs[0].token_ids, (*b)[i].outputs[0].token_ids);
  }
}

// --async-scheduling schedules step N+1 before step N's tokens are known. Every output must be
// what the synchronous loop gives: greedy tokens and text, EOS, max_tokens, stop strings, n > 1
// seeded sampling with logprobs, also under preemption; an abort stops it within two steps.
TEST_F(EngineE2ETest, AsyncSchedulingGivesTheSameOutputs) {
  std::vector<PromptInput> prompts = to_inputs(varied_prompts());
  prompts.resize(12);
  for (size_t i = 0; i < prompts.size(); ++i) {
    SamplingParams sp;
    sp.temperature = 0;
    sp.max_tokens = 4 + static_cast<int>(i * 5) % 21;
    if (i % 4 == 0) sp.stop = {" the", "\n\n"};
    if (i % 3 == 1) {
      sp.n = 3;
      sp.temperature = 1.0f;
      sp.seed = 11 + i;
      sp.logprobs = 2;
    }
    prompts[i].params = sp;
  }
  LoadOptions lo;
  auto probe = load_tokenizer_only(repo_path(kModel));
  ASSERT_TRUE(probe.ok());
  const ModelConfig& c = (*probe)->config;
  const int64_t block_bytes = 16 * 2 * c.num_layers * c.num_kv_heads * c.head_dim * 4;
  auto generate = [&](bool async, int64_t kv_bytes, int64_t* preemptions) {
    EngineArgs ea = args(16, kv_bytes);
    ea.async_scheduling = async;
    auto llm = LLM::create(ea);
    EXPECT_TRUE(llm.ok());
    auto res = (*llm)->generate(prompts, SamplingParams{});
    EXPECT_TRUE(res.ok());
    *preemptions = (*llm)->engine().metrics().num_preemptions.load();
    return *res;
  };
  int64_t p_sync = 0, p_async = 0, p_tight = 0;
  const auto sync = generate(false, int64_t{128} << 20, &p_sync);
  const auto async = generate(true, int64_t{128} << 20, &p_async);
  const auto tight = generate(true, block_bytes * 48, &p_tight);
  std::printf("[ metrics ] async scheduling with a 48-block KV cache: %lld preemptions\n", static_cast<long long>(p_tight));
  EXPECT_GT(p_tight, 0);
  int num_stop_strings = 0;
  for (const auto* other : {&async, &tight}) {
    ASSERT_EQ(other->size(), sync.size());
    for (size_t i = 0; i < sync.size(); ++i) {
      ASSERT_TRUE(sync[i].error.empty() && (*other)[i].error.empty()) << sync[i].error << (*other)[i].error;
      ASSERT_EQ(sync[i].outputs.size(), (*other)[i].outputs.size());
      for (size_t k = 0; k < sync[i].outputs.size(); ++k) {
        const auto& a = sync[i].outputs[k];
        const auto& b = (*other)[i].outputs[k];
        EXPECT_EQ(a.token_ids, b.token_ids) << "prompt " << i << " output " << k;
        EXPECT_EQ(a.text, b.text) << "prompt " << i << " output " << k;
        EXPECT_EQ(a.finish_reason, b.finish_reason) << "prompt " << i << " output " << k;
        EXPECT_EQ(a.stop_reason_str, b.stop_reason_str) << "prompt " << i << " output " << k;
        ASSERT_EQ(a.logprobs.size(), b.logprobs.size());
        for (size_t t = 0; t < a.logprobs.size(); ++t) {
          EXPECT_EQ(a.logprobs[t].chosen.logprob, b.logprobs[t].chosen.logprob) << "prompt " << i << " token " << t;
        }
        if (other == &async && a.stop_reason_str) ++num_stop_strings;
      }
    }
  }
  EXPECT_GT(num_stop_strings, 0) << "no request ended on a stop string: the comparison misses that case";

  // Abort: the step in flight and the one already scheduled may finish, no further one runs.
  EngineArgs ea = args(8, int64_t{128} << 20);
  ea.async_scheduling = true;
  auto llm = LLM::create(ea);
  ASSERT_TRUE(llm.ok());
  Engine& engine = (*llm)->engine();
  SamplingParams lots;
  lots.max_tokens = 2000;
  lots.ignore_eos = true;
  auto stream = engine.add_request("long", std::vector<int32_t>(200, 42), lots);
  ASSERT_TRUE(stream.ok());
  RequestOutput d;
  ASSERT_TRUE((*stream)->next(&d));
  const auto& m = engine.metrics();
  const int64_t steps_at_abort = m.num_steps.load();
  engine.abort("long");
  while ((*stream)->next(&d)) {
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while ((m.kv_cache_usage.load() > 0 || m.num_requests_running.load() > 0) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(m.kv_cache_usage.load(), 0.0);
  EXPECT_LE(m.num_steps.load(), steps_at_abort + 2) << "steps ran for an aborted request";
}

}  // namespace
}  // namespace kvasir::testing
