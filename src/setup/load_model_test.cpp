// The setup library: where the default model is found, KV cache sizing, generation_config.json
// read once into the loaded model (eos ids and sampling defaults), and bad paths -> a clear Status.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/scoped_env_test_util.h"
#include "setup/generation_defaults.h"
#include "setup/kv_cache_sizing.h"
#include "setup/loaded_model.h"

namespace kvasir {
namespace {

namespace fs = std::filesystem;

constexpr const char* kTinyLlama = R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
  "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 512,
  "tie_word_embeddings": true, "eos_token_id": 2, "bos_token_id": 1})";

// A fresh folder under the test's temp dir, removed at the end.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name) : path_(fs::path(::testing::TempDir()) / (name + std::to_string(::getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~ScratchDir() { fs::remove_all(path_); }
  std::string path() const { return path_.string(); }
  void write(const std::string& file, const std::string& text) const { std::ofstream(path_ / file) << text; }

 private:
  fs::path path_;
};

LoadOptions dummy_cpu() {
  LoadOptions o;
  o.device = "cpu";
  o.num_threads = 1;
  o.load_format = "dummy";
  o.model.max_num_tokens = 64;
  o.model.max_num_logits = 4;
  return o;
}

TEST(DefaultModelPath, EnvironmentModelWinsThenModelsDir) {
  {
    ScopedEnv model("KVASIR_MODEL", "/some/where/model.gguf");
    EXPECT_EQ(default_model_path(), "/some/where/model.gguf");
  }
  ScopedEnv no_model("KVASIR_MODEL", nullptr);
  ScratchDir dir("kvasir_models_dir");
  dir.write("SmolLM2-135M-Instruct.Q4_1.gguf", "");
  ScopedEnv models("KVASIR_MODELS_DIR", dir.path().c_str());
  EXPECT_EQ(default_model_path(), dir.path() + "/SmolLM2-135M-Instruct.Q4_1.gguf");
}

TEST(DefaultModelPath, FallsBackToTheModelsFolderName) {
  ScopedEnv no_model("KVASIR_MODEL", nullptr);
  ScopedEnv no_dir("KVASIR_MODELS_DIR", "/nonexistent-kvasir-models");
  // Found under ./models (tests run from the repository root) or, when absent, named there anyway
  // so the error that follows names a useful path.
  const std::string p = default_model_path();
  EXPECT_NE(p.find("models/SmolLM2-135M-Instruct.Q4_1.gguf"), std::string::npos) << p;
}

TEST(KvCacheSizing, BlocksFromABudget) {
  EXPECT_EQ(*num_kv_blocks_for_budget(1000, 100), 10);
  EXPECT_EQ(*num_kv_blocks_for_budget(1099, 100), 10);  // a partial block does not count
  EXPECT_EQ(*num_kv_blocks_for_budget(200, 100), 2);
  const auto too_small = num_kv_blocks_for_budget(199, 100);
  ASSERT_FALSE(too_small.ok());
  EXPECT_EQ(too_small.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_small.status().message().find("fewer than 2 blocks"), std::string::npos);
  EXPECT_EQ(*num_kv_blocks_for_budget(int64_t{1} << 40, 16), 1 << 24);  // capped
}

TEST(KvCacheSizing, MaxModelLenDefaultsToTheModels) {
  ModelConfig c;
  c.max_position_embeddings = 8192;
  EngineArgs a;
  EXPECT_EQ(resolve_max_model_len(a, c), 8192);
  a.max_model_len = 512;
  EXPECT_EQ(resolve_max_model_len(a, c), 512);
  a.max_model_len = 16384;  // asked for explicitly: honoured (RoPE scaling may allow it)
  EXPECT_EQ(resolve_max_model_len(a, c), 16384);
}

TEST(KvCacheSizing, AModelsDeclaredLengthIsCappedLikeTheFlag) {
  ModelConfig c;
  c.max_position_embeddings = (int64_t{1} << 31) - 1;  // a GGUF may declare anything
  EXPECT_EQ(resolve_max_model_len(EngineArgs{}, c), kMaxModelLenLimit);
  EngineArgs a;
  a.max_model_len = kMaxModelLenLimit + 1;
  EXPECT_EQ(a.validate().code(), StatusCode::kInvalidArgument);
  a.max_model_len = kMaxModelLenLimit;
  EXPECT_TRUE(a.validate().ok());
}

TEST(KvCacheSizing, CapacityLeavesOutTheNullBlock) {
  EXPECT_EQ(kv_cache_capacity_tokens(92, 16), 91 * 16);
  EXPECT_EQ(kv_cache_capacity_tokens(2, 16), 16);
  EXPECT_EQ(kv_cache_capacity_tokens(1 << 24, 1024), ((int64_t{1} << 24) - 1) * 1024);  // no int overflow
}

TEST(KvCacheSizing, TheModelsLengthIsCappedToWhatTheCacheHolds) {
  EngineArgs a;  // no --max-model-len: the model's 8192 over a 92-block cache
  EXPECT_EQ(*fit_max_model_len_to_kv_cache(a, 8192, 92), 1456);
  EXPECT_EQ(*fit_max_model_len_to_kv_cache(a, 512, 92), 512);    // fits: unchanged
  EXPECT_EQ(*fit_max_model_len_to_kv_cache(a, 1456, 92), 1456);  // exactly the cache
  EXPECT_EQ(*fit_max_model_len_to_kv_cache(a, kMaxModelLenLimit, 1 << 24), kMaxModelLenLimit);
}

TEST(KvCacheSizing, AnExplicitMaxModelLenPastTheCacheIsRefused) {
  EngineArgs a;
  a.max_model_len = 8192;
  const auto too_long = fit_max_model_len_to_kv_cache(a, 8192, 92);
  ASSERT_FALSE(too_long.ok());
  EXPECT_EQ(too_long.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_long.status().message().find(
                "max_model_len 8192 is larger than the maximum number of tokens that can be stored in KV cache (1456"),
            std::string::npos)
      << too_long.status().message();
  a.max_model_len = 1456;
  EXPECT_EQ(*fit_max_model_len_to_kv_cache(a, 1456, 92), 1456);
}

TEST(KvCacheSizing, CpuBudgetIsKvCacheMemory) {
  ScratchDir dir("kvasir_setup_kv");
  dir.write("config.json", kTinyLlama);
  auto m = load_model(dir.path(), dummy_cpu());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EngineArgs a;
  a.block_size = 16;
  const auto per_block = static_cast<int64_t>((*m)->model->kv_cache_bytes_per_block(16));
  // 2 layers x (K + V) x 16 tokens x 2 kv heads x 16 head dim x 4 bytes (float32 on the CPU).
  EXPECT_EQ(per_block, 2 * 2 * 16 * 2 * 16 * 4);
  a.kv_cache_memory = 37 * per_block + 5;
  EXPECT_EQ(*plan_num_kv_blocks(**m, a), 37);
}

TEST(LoadModel, GenerationConfigIsReadOnceIntoTheModel) {
  ScratchDir dir("kvasir_setup_gen");
  dir.write("config.json", kTinyLlama);
  dir.write("generation_config.json", R"({"eos_token_id": [2, 7], "do_sample": true, "temperature": 0.6,
    "top_p": 0.9, "top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1, "max_new_tokens": 33})");
  auto m = load_model(dir.path(), dummy_cpu());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  // The same parse gives the config its eos ids and the loaded model its sampling defaults.
  EXPECT_EQ((*m)->config.eos_token_ids, (std::vector<int64_t>{2, 7}));
  EXPECT_EQ((*m)->eos_token_ids, (std::vector<int32_t>{2, 7}));
  const GenerationDefaults& d = (*m)->generation_defaults;
  EXPECT_EQ(d.temperature, 0.6);
  EXPECT_EQ(d.top_p, 0.9);
  EXPECT_EQ(d.top_k, 20);
  EXPECT_EQ(d.min_p, 0.05);
  EXPECT_EQ(d.repetition_penalty, 1.1);
  EXPECT_EQ(d.max_new_tokens, 33);

  SamplingParams p;
  p.max_tokens = 5;
  d.apply_to(&p);
  EXPECT_FLOAT_EQ(p.temperature, 0.6f);
  EXPECT_FLOAT_EQ(p.top_p, 0.9f);
  EXPECT_EQ(p.top_k, 20);
  EXPECT_FLOAT_EQ(p.min_p, 0.05f);
  EXPECT_FLOAT_EQ(p.repetition_penalty, 1.1f);
  EXPECT_EQ(p.max_tokens, 5);  // the default length is the caller's rule
}

// --load-format dummy with a quantization_config: integer weight-only schemes are made on a GPU
// (the CPU refuses them by name: it has no packed dummies), any other method is refused, never
// dropped in silence.
TEST(LoadModel, DummyQuantizationConfigsAreRefusedOnTheCpuByName) {
  std::string gptq(kTinyLlama);
  gptq.insert(gptq.rfind('}'), R"(, "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 64})");
  ScratchDir dir("kvasir_setup_dummy_gptq");
  dir.write("config.json", gptq);
  auto m = load_model(dir.path(), dummy_cpu());
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(m.status().message().find("GPU backend"), std::string::npos) << m.status().message();

  std::string fp8(kTinyLlama);
  fp8.insert(fp8.rfind('}'), R"(, "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic"})");
  ScratchDir fdir("kvasir_setup_dummy_fp8");
  fdir.write("config.json", fp8);
  auto f = load_model(fdir.path(), dummy_cpu());
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(f.status().message().find("integer weight-only"), std::string::npos) << f.status().message();
}

// The multiprocess executor's front: what load_model reads, without a backend or a bound model.
TEST(LoadModel, WithoutWeightsReadsWhatLoadModelReadsAndBindsNothing) {
  ScratchDir dir("kvasir_setup_noweights");
  dir.write("config.json", kTinyLlama);
  dir.write("generation_config.json", R"({"eos_token_id": [2, 7], "temperature": 0.6})");
  auto full = load_model(dir.path(), dummy_cpu());
  auto front = load_model_without_weights(dir.path(), dummy_cpu());
  ASSERT_TRUE(full.ok()) << full.status().to_string();
  ASSERT_TRUE(front.ok()) << front.status().to_string();
  EXPECT_EQ((*front)->backend, nullptr);
  EXPECT_EQ((*front)->model, nullptr);
  ASSERT_NE((*front)->tokenizer, nullptr);
  EXPECT_EQ((*front)->tokenizer->vocab_size(), (*full)->tokenizer->vocab_size());
  EXPECT_EQ((*front)->config.vocab_size, (*full)->config.vocab_size);
  EXPECT_EQ((*front)->eos_token_ids, (*full)->eos_token_ids);
  EXPECT_EQ((*front)->generation_defaults.temperature, (*full)->generation_defaults.temperature);
}

TEST(LoadModel, NoGenerationConfigMeansNoDefaults) {
  ScratchDir dir("kvasir_setup_nogen");
  dir.write("config.json", kTinyLlama);
  auto m = load_model(dir.path(), dummy_cpu());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_TRUE((*m)->generation_defaults.empty());
  EXPECT_EQ((*m)->eos_token_ids, (std::vector<int32_t>{2}));
  // A GGUF file carries no generation config: nothing changes for it.
  const std::string gguf = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (fs::exists(gguf)) {
    auto t = load_tokenizer_only(gguf);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    EXPECT_TRUE((*t)->generation_defaults.empty());
  }
}

TEST(GenerationDefaults, OnlyPositiveIntegerMaxNewTokensCounts) {
  for (const char* text : {R"({"max_new_tokens": 0})", R"({"max_new_tokens": -3})", R"({"max_new_tokens": 2.5})",
                           R"({"max_new_tokens": "9"})"}) {
    auto d = generation_defaults_from_json(*parse_json(text), "g.json");
    ASSERT_TRUE(d.ok()) << text;
    EXPECT_TRUE(d->empty()) << text;
  }
  auto big = generation_defaults_from_json(*parse_json(R"({"max_new_tokens": 99999999999})"), "g.json");
  EXPECT_EQ(big->max_new_tokens, 1 << 30);
  auto nulls = generation_defaults_from_json(*parse_json(R"({"temperature": null, "top_k": null})"), "g.json");
  EXPECT_TRUE(nulls->empty());
}

TEST(GenerationDefaults, AWrongTypeNamesTheFileAndKey) {
  auto d = generation_defaults_from_json(*parse_json(R"({"temperature": "hot"})"), "dir/generation_config.json");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(d.status().message(), "dir/generation_config.json: 'temperature' must be a number");
  auto k = generation_defaults_from_json(*parse_json(R"({"top_k": 1.5})"), "g.json");
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().message(), "g.json: 'top_k' must be an integer");
  EXPECT_FALSE(generation_defaults_from_json(*parse_json("[1]"), "g.json").ok());

  ScratchDir dir("kvasir_setup_badgen");
  dir.write("config.json", kTinyLlama);
  dir.write("generation_config.json", R"({"top_p": [0.5]})");
  auto m = load_model(dir.path(), dummy_cpu());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("generation_config.json: 'top_p' must be a number"), std::string::npos)
      << m.status().message();
}

TEST(LoadModel, BadPathsGiveAClearStatus) {
  LoadOptions cpu;
  cpu.device = "cpu";
  auto missing = load_model("/nonexistent-kvasir/model.gguf", cpu);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent-kvasir/model.gguf"), std::string::npos)
      << missing.status().message();

  ScratchDir empty("kvasir_setup_empty");
  auto no_config = load_model(empty.path(), dummy_cpu());
  ASSERT_FALSE(no_config.ok());
  EXPECT_NE(no_config.status().message().find("config.json"), std::string::npos) << no_config.status().message();

  ScratchDir bad("kvasir_setup_badjson");
  bad.write("config.json", "{not json");
  auto bad_json = load_model(bad.path(), dummy_cpu());
  ASSERT_FALSE(bad_json.ok());
  EXPECT_EQ(bad_json.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_json.status().message().find("not valid JSON"), std::string::npos) << bad_json.status().message();

  LoadOptions fmt = dummy_cpu();
  fmt.load_format = "pt";
  auto unknown = load_model(bad.path(), fmt);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("--load-format"), std::string::npos);
}

// --dtype: vLLM's names map to weight element types; anything else is refused (at load too:
// engine_e2e_test's DtypeFlag).
TEST(EngineArgs, DtypeNamesAndRefusals) {
  EXPECT_FALSE(parse_dtype("auto")->has_value());
  EXPECT_EQ(parse_dtype("bfloat16")->value(), DType::kBF16);
  EXPECT_EQ(parse_dtype("half")->value(), DType::kF16);
  EXPECT_EQ(parse_dtype("float")->value(), DType::kF32);
  EngineArgs ea;
  ea.dtype = "fp8";
  EXPECT_NE(ea.validate().message().find("--dtype"), std::string::npos);
}

// vLLM's --distributed-executor-backend: mp at any TP size, uni at TP 1 only, unset; ray and
// external_launcher refused as not supported, anything else as unknown.
TEST(EngineArgs, DistributedExecutorBackendNamesAndRefusals) {
  EngineArgs ea;
  EXPECT_TRUE(ea.validate().ok());
  for (const char* ok : {"mp", "uni"}) {
    ea.distributed_executor_backend = ok;
    EXPECT_TRUE(ea.validate().ok()) << ok;
  }
  ea.tensor_parallel_size = 3;
  ea.distributed_executor_backend = "mp";
  EXPECT_TRUE(ea.validate().ok());
  ea.distributed_executor_backend = "uni";
  EXPECT_EQ(ea.validate().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ea.validate().message().find("--tensor-parallel-size 1"), std::string::npos);
  ea.tensor_parallel_size = 1;
  for (const char* no : {"ray", "external_launcher"}) {
    ea.distributed_executor_backend = no;
    EXPECT_EQ(ea.validate().code(), StatusCode::kUnimplemented) << no;
  }
  ea.distributed_executor_backend = "threads";
  EXPECT_EQ(ea.validate().code(), StatusCode::kInvalidArgument);
}

// vLLM's default: async scheduling on where supported. Here: on for a model on a GPU unless
// speculative decoding needs the synchronous loop; off on the CPU backend; the flag always wins,
// and an explicit --async-scheduling with speculation is refused rather than dropped.
TEST(EngineArgs, AsyncSchedulingDefaultsOnForAGpuAndTheFlagWins) {
  EngineArgs ea;
  EXPECT_TRUE(ea.async_scheduling_on(/*model_on_gpu=*/true));
  EXPECT_FALSE(ea.async_scheduling_on(/*model_on_gpu=*/false));
  ea.async_scheduling = false;
  EXPECT_FALSE(ea.async_scheduling_on(true));
  ea.async_scheduling = true;
  EXPECT_TRUE(ea.async_scheduling_on(false));
  ea.async_scheduling.reset();
  ea.speculative.method = "ngram";
  ea.speculative.num_speculative_tokens = 3;
  ASSERT_TRUE(ea.speculative.enabled());
  EXPECT_FALSE(ea.async_scheduling_on(true));
  EXPECT_TRUE(ea.validate().ok());
  ea.async_scheduling = true;
  EXPECT_NE(ea.validate().message().find("--async-scheduling"), std::string::npos);
}

}  // namespace
}  // namespace kvasir

namespace kvasir {
namespace {

// A verify step's logits rows (1 + k per request) fit one chunk on the CPU too: in chunks of one
// row, batch-1 verify read the whole lm_head once per row.
TEST(LoadOptions, LogitsRowsHoldAVerifyStepOnTheCpu) {
  EngineArgs a;
  a.device = "cpu";
  a.max_num_seqs = 1;
  EXPECT_EQ(LoadOptions::from(a).model.max_num_logits, 1);
  a.speculative.method = "ngram";
  a.speculative.num_speculative_tokens = 4;
  EXPECT_EQ(LoadOptions::from(a).model.max_num_logits, 5);
  a.max_num_seqs = 16;  // 80 rows: capped at 64
  EXPECT_EQ(LoadOptions::from(a).model.max_num_logits, 64);
  a.max_num_seqs = 256;  // never fewer than max_num_seqs
  EXPECT_EQ(LoadOptions::from(a).model.max_num_logits, 256);
}

}  // namespace
}  // namespace kvasir
