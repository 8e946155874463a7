// Tiny random-weight models of each directory under tests/data/tiny/ (written by
// scripts/gen_tiny_models.py with HF transformers): loaded through the normal loader and the
// model registry (no tokenizer: the prompts are token ids), run on the CPU backend in exact mode,
// and compared with transformers' float32 logits at every position: both the HF directory and,
// where the directory holds one, the model.gguf llama.cpp's convert_hf_to_gguf.py wrote from it.
//
// The bar is a relative L2 error of 1e-4 per prompt. Both sides compute in float32 from the same
// float32 weights; they differ only by summation order and libm rounding (measured ~1e-6), while
// a wrong binding or a wrong RoPE gives errors of order 1e-1 (checked below: the test must fail
// on a model loaded wrong).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "backend/cpu/cpu_backend.h"
#include "common/json.h"
#include "common/mapped_file.h"
#include "loader/weight_source.h"
#include "model/decoder_model.h"
#include "model/registry.h"

namespace kvasir {
namespace {

constexpr double kBar = 1e-4;
const std::string kTinyDir = std::string(KVASIR_SOURCE_DIR) + "/tests/data/tiny";

struct Prompt {
  std::vector<int32_t> ids;
  std::vector<float> logits;  // [ids.size(), vocab]
};

struct TinyModel {
  std::string dir;
  int64_t vocab = 0;
  std::vector<Prompt> prompts;
};

std::vector<TinyModel> load_tiny_models() {
  std::vector<TinyModel> out;
  if (!std::filesystem::is_directory(kTinyDir)) return out;
  std::vector<std::string> dirs;
  for (const auto& e : std::filesystem::directory_iterator(kTinyDir)) {
    if (e.is_directory()) dirs.push_back(e.path().string());
  }
  std::sort(dirs.begin(), dirs.end());
  for (const std::string& dir : dirs) {
    TinyModel m;
    m.dir = dir;
    auto text = read_text_file(dir + "/golden.json", 1u << 20);
    EXPECT_TRUE(text.ok()) << dir << ": " << text.status().to_string();
    if (!text.ok()) continue;
    auto j = parse_json(*text);
    EXPECT_TRUE(j.ok());
    if (!j.ok()) continue;
    m.vocab = j->find("vocab_size")->as_int();
    for (const Json& p : j->find("prompts")->as_array()) {
      Prompt pr;
      for (const Json& id : p.find("ids")->as_array()) pr.ids.push_back(static_cast<int32_t>(id.as_int()));
      pr.logits.resize(pr.ids.size() * static_cast<size_t>(m.vocab));
      std::ifstream f(dir + "/" + p.find("logits")->as_string(), std::ios::binary);
      f.read(reinterpret_cast<char*>(pr.logits.data()), static_cast<std::streamsize>(pr.logits.size() * sizeof(float)));
      EXPECT_TRUE(f.good()) << dir << ": short logits file";
      m.prompts.push_back(std::move(pr));
    }
    out.push_back(std::move(m));
  }
  return out;
}

// One forward over several whole sequences (blocks of 16, laid out one sequence after another),
// logits at every position.
struct Batch {
  explicit Batch(const std::vector<const Prompt*>& seqs) {
    int block = 0, max_blocks = 0;
    for (const Prompt* p : seqs) max_blocks = std::max(max_blocks, static_cast<int>((p->ids.size() + 15) / 16));
    qsl.push_back(0);
    for (const Prompt* p : seqs) {
      const int n = static_cast<int>(p->ids.size());
      for (int i = 0; i < n; ++i) {
        ids.push_back(p->ids[static_cast<size_t>(i)]);
        positions.push_back(i);
        slots.push_back(int64_t{block} * 16 + i);
        rows.push_back(static_cast<int32_t>(rows.size()));
      }
      for (int b = 0; b < max_blocks; ++b) tables.push_back(block + b);
      block += max_blocks;
      qsl.push_back(qsl.back() + n);
      seq_lens.push_back(n);
    }
    num_blocks = block;
    fb.num_tokens = static_cast<int>(ids.size());
    fb.input_ids = ids.data();
    fb.positions = positions.data();
    fb.attn.num_seqs = static_cast<int>(seqs.size());
    fb.attn.num_tokens = fb.num_tokens;
    fb.attn.query_start_loc = qsl.data();
    fb.attn.seq_lens = seq_lens.data();
    fb.attn.block_tables = tables.data();
    fb.attn.max_blocks_per_seq = max_blocks;
    fb.attn.slot_mapping = slots.data();
    fb.attn.block_size = 16;
    fb.num_logits = fb.num_tokens;
    fb.logits_indices = rows.data();
  }
  std::vector<int32_t> ids, positions, qsl, seq_lens, tables, rows;
  std::vector<int64_t> slots;
  int num_blocks = 0;
  ForwardBatch fb;
};

// Positions whose argmax differs between `got` and `want` ([rows, vocab] each).
int top1_disagreements(const float* got, const float* want, size_t rows, size_t vocab) {
  int bad = 0;
  for (size_t r = 0; r < rows; ++r) {
    const float* g = got + r * vocab;
    const float* w = want + r * vocab;
    bad += std::max_element(g, g + vocab) - g != std::max_element(w, w + vocab) - w;
  }
  return bad;
}

double rel_l2(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += (double{a[i]} - b[i]) * (double{a[i]} - b[i]);
    den += double{b[i]} * b[i];
  }
  return std::sqrt(num / den);
}

// Kvasir's logits of `seqs`, all in one batch, on the CPU backend: [total tokens, vocab].
StatusOr<std::vector<float>> run_logits(const TinyModel& t, const ModelConfig& config, const WeightSource& weights,
                                        const std::vector<const Prompt*>& seqs,
                                        MatmulPrecision precision = MatmulPrecision::kExact) {
  Batch batch(seqs);
  CpuBackendOptions bo;
  bo.precision = precision;
  CpuBackend backend(bo);
  ModelOptions mo;
  mo.max_num_tokens = batch.fb.num_tokens;
  mo.max_num_logits = batch.fb.num_tokens;
  KVASIR_ASSIGN_OR_RETURN(auto model, DecoderModel::create(config, weights, backend, mo));
  KVASIR_ASSIGN_OR_RETURN(KvCache cache, model->allocate_kv_cache(batch.num_blocks, 16));
  std::vector<float> logits(static_cast<size_t>(batch.fb.num_tokens * t.vocab));
  KVASIR_RETURN_IF_ERROR(model->forward(batch.fb, cache, logits.data()));
  return logits;
}

// Worst relative L2 error over the prompts, run as one batch of all prompts (batched == single
// is the decoder's promise; longrope picks its table per sequence inside the batch).
// `top1_bad`, when given, counts the positions whose top-1 token differs from transformers'.
StatusOr<double> worst_error(const TinyModel& t, const ModelConfig& config, const WeightSource& weights,
                             int* top1_bad = nullptr) {
  std::vector<const Prompt*> seqs;
  for (const Prompt& p : t.prompts) seqs.push_back(&p);
  KVASIR_ASSIGN_OR_RETURN(std::vector<float> logits, run_logits(t, config, weights, seqs));
  double worst = 0;
  size_t row = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const float* got = logits.data() + row * static_cast<size_t>(t.vocab);
    row += seqs[s]->ids.size();
    worst = std::max(worst, rel_l2(got, seqs[s]->logits.data(), seqs[s]->logits.size()));
    if (top1_bad != nullptr) {
      *top1_bad += top1_disagreements(got, seqs[s]->logits.data(), seqs[s]->ids.size(), static_cast<size_t>(t.vocab));
    }
  }
  return worst;
}

// Every check on one form (HF directory or GGUF file) of a tiny model.
void check_form(const TinyModel& t, const std::string& path) {
  auto weights = open_weights(path);
  ASSERT_TRUE(weights.ok()) << path << ": " << weights.status().to_string();
  auto config = load_model_config(**weights);
  ASSERT_TRUE(config.ok()) << path << ": " << config.status().to_string();
  ASSERT_EQ(config->vocab_size, t.vocab);
  int top1_bad = 0;
  auto err = worst_error(t, *config, **weights, &top1_bad);
  ASSERT_TRUE(err.ok()) << path << ": " << err.status().to_string();
  std::printf("[ metrics ] %s (%s): worst relative L2 vs transformers %.3g, top-1 disagreements %d\n", path.c_str(),
              config->to_string().c_str(), *err, top1_bad);
  EXPECT_LT(*err, kBar) << path;
  EXPECT_EQ(top1_bad, 0) << path;

  // The comparison must catch a model loaded wrong: a RoPE base off by 2x ...
  auto must_differ = [&](const char* what, const ModelConfig& wrong) {
    auto bad = worst_error(t, wrong, **weights);
    ASSERT_TRUE(bad.ok()) << path << " " << what << ": " << bad.status().to_string();
    std::printf("[ metrics ] %s %s: %.3g\n", path.c_str(), what, *bad);
    EXPECT_GT(*bad, 100 * kBar) << path << " " << what;
  };
  ModelConfig wrong = *config;
  wrong.rope_theta *= 2;
  wrong.rope_theta_local *= 2;
  must_differ("with rope_theta x2", wrong);
  // ... and the RoPE pairing (DeepSeek rotates interleaved pairs, the others halves) ...
  ModelConfig paired = *config;
  paired.rope_style = config->rope_style == RopeStyle::kNeox ? RopeStyle::kInterleaved : RopeStyle::kNeox;
  must_differ("with the other RoPE pairing", paired);
  if (auto it = config->family_params.find("mla.softmax_mscale");
      it != config->family_params.end() && it->second != 1.0) {
    // ... and MLA's YaRN correction of the softmax scale.
    ModelConfig plain = *config;
    plain.family_params["mla.softmax_mscale"] = 1.0;
    must_differ("without the softmax mscale", plain);
  }
  if (config->rope_scaling.type == RopeScalingType::kLongrope) {
    // ... and longrope's short/long choice: always the short factors.
    ModelConfig short_only = *config;
    short_only.rope_scaling.long_factor = short_only.rope_scaling.short_factor;
    must_differ("with short factors only", short_only);
    // ... and its magnitude scaling of cos/sin.
    ModelConfig unscaled = *config;
    unscaled.rope_scaling.attention_factor = 1.0;
    must_differ("without the magnitude scaling", unscaled);
  } else if (config->rope_scaling.type != RopeScalingType::kNone) {
    // ... and llama3 / yarn scaling.
    ModelConfig plain = *config;
    plain.rope_scaling = RopeScaling{};
    must_differ("without its rope scaling", plain);
  }
  if (config->sliding_window > 0) {
    ModelConfig full = *config;
    full.sliding_window = 0;
    full.layer_is_sliding.assign(full.layer_is_sliding.size(), false);
    must_differ("without its sliding window", full);
  }
  if (config->attn_logit_softcapping) {
    ModelConfig uncapped = *config;
    uncapped.attn_logit_softcapping.reset();
    must_differ("without attention soft-capping", uncapped);
  }
  if (config->final_logit_softcapping) {
    ModelConfig uncapped = *config;
    uncapped.final_logit_softcapping.reset();
    must_differ("without final soft-capping", uncapped);
  }
  if (config->family_params.count("num_experts_per_tok") != 0) {
    // ... and a MoE family's routing: how many experts, whether their weights renormalize.
    ModelConfig one = *config;
    one.family_params["num_experts_per_tok"] = 1;
    must_differ("with one expert per token", one);
    if (auto it = config->family_params.find("norm_topk_prob"); it != config->family_params.end()) {
      ModelConfig flipped = *config;  // (GPT-OSS always renormalizes: no such key)
      flipped.family_params["norm_topk_prob"] = it->second != 0 ? 0 : 1;
      must_differ("with norm_topk_prob flipped", flipped);
    }
  }
  // ... and DeepSeek's routing: the scale, V3's correction bias, the group choice and its score.
  auto param = [&](const char* key) {
    auto it = config->family_params.find(key);
    return it == config->family_params.end() ? 0.0 : it->second;
  };
  auto without = [&](const char* what, const char* key, double value) {
    ModelConfig changed = *config;
    changed.family_params[key] = value;
    must_differ(what, changed);
  };
  if (param("routed_scaling_factor") != 0 && param("routed_scaling_factor") != 1) {
    without("without routed_scaling_factor", "routed_scaling_factor", 1);
  }
  if (param("deepseek.correction_bias") != 0) without("without the correction bias", "deepseek.correction_bias", 0);
  if (param("n_group") > 1) {
    without("without the group choice", "n_group", 1);
    without("with the other group score", "deepseek.group_top2_sum", param("deepseek.group_top2_sum") != 0 ? 0 : 1);
  }
}

// llama.cpp's Q8_0 conversion of a model (model-q8_0.gguf: quantized experts read in place).
// Against transformers' float32 logits the weights' rounding sets the bar (amplified by these
// models' sharp attention, ~6e-2): it catches a wrong binding only coarsely, so the top-1 token
// must agree too. The fast path (16-bit activations, the default) must then equal the exact path
// on the same quantized weights to 1e-3, which checks the quantized MoE matmuls tightly.
void check_quantized_form(const TinyModel& t, const std::string& path) {
  auto weights = open_weights(path);
  ASSERT_TRUE(weights.ok()) << path << ": " << weights.status().to_string();
  auto config = load_model_config(**weights);
  ASSERT_TRUE(config.ok()) << path << ": " << config.status().to_string();
  std::vector<const Prompt*> seqs;
  size_t positions = 0;
  for (const Prompt& p : t.prompts) {
    seqs.push_back(&p);
    positions += p.ids.size();
  }
  auto exact = run_logits(t, *config, **weights, seqs, MatmulPrecision::kExact);
  ASSERT_TRUE(exact.ok()) << path << ": " << exact.status().to_string();
  auto fast = run_logits(t, *config, **weights, seqs, MatmulPrecision::kFast);
  ASSERT_TRUE(fast.ok()) << path << ": " << fast.status().to_string();
  double worst = 0;
  int top1_bad = 0;
  size_t row = 0;
  for (const Prompt* p : seqs) {
    const float* got = exact->data() + row * static_cast<size_t>(t.vocab);
    row += p->ids.size();
    worst = std::max(worst, rel_l2(got, p->logits.data(), p->logits.size()));
    top1_bad += top1_disagreements(got, p->logits.data(), p->ids.size(), static_cast<size_t>(t.vocab));
  }
  const double fast_vs_exact = rel_l2(fast->data(), exact->data(), exact->size());
  std::printf("[ metrics ] %s: worst relative L2 vs transformers %.3g, top-1 disagreements %d of %zu; "
              "fast vs exact path %.3g\n", path.c_str(), worst, top1_bad, positions, fast_vs_exact);
  EXPECT_LT(worst, 0.1) << path;
  EXPECT_LE(top1_bad, static_cast<int>(positions / 20)) << path;
  EXPECT_LT(fast_vs_exact, 1e-3) << path;
}

TEST(TinyModelGolden, EveryTinyModelMatchesTransformers) {
  const std::vector<TinyModel> models = load_tiny_models();
  ASSERT_FALSE(models.empty()) << "no models under " << kTinyDir << " (scripts/gen_tiny_models.py)";
  int gguf_forms = 0;
  for (const TinyModel& t : models) {
    check_form(t, t.dir);
    if (std::filesystem::exists(t.dir + "/model.gguf")) {
      check_form(t, t.dir + "/model.gguf");
      ++gguf_forms;
    }
    if (std::filesystem::exists(t.dir + "/model-q8_0.gguf")) check_quantized_form(t, t.dir + "/model-q8_0.gguf");
  }
  std::printf("[ metrics ] %zu models, %d of them also as GGUF\n", models.size(), gguf_forms);
}

// A prompt's logits are bit-identical alone and batched with the others, through the MoE block
// (each expert sees a different set of tokens in the two runs): Qwen2-MoE (shared expert) from HF
// in the exact path, Mixtral's Q8_0 experts in the fast path.
TEST(TinyModelGolden, MoeLogitsAreBatchInvariant) {
  const std::vector<TinyModel> models = load_tiny_models();
  int checked = 0;
  for (const TinyModel& t : models) {
    const std::string name = std::filesystem::path(t.dir).filename().string();
    std::string path;
    MatmulPrecision precision = MatmulPrecision::kExact;
    if (name == "qwen2_moe") {
      path = t.dir;
    } else if (name == "mixtral") {
      path = t.dir + "/model-q8_0.gguf";
      precision = MatmulPrecision::kFast;
    } else {
      continue;
    }
    auto weights = open_weights(path);
    ASSERT_TRUE(weights.ok()) << path << ": " << weights.status().to_string();
    auto config = load_model_config(**weights);
    ASSERT_TRUE(config.ok()) << path << ": " << config.status().to_string();
    std::vector<const Prompt*> all;
    for (const Prompt& p : t.prompts) all.push_back(&p);
    auto batched = run_logits(t, *config, **weights, all, precision);
    ASSERT_TRUE(batched.ok()) << path << ": " << batched.status().to_string();
    size_t row = 0;
    for (const Prompt* p : all) {
      auto alone = run_logits(t, *config, **weights, {p}, precision);
      ASSERT_TRUE(alone.ok()) << path << ": " << alone.status().to_string();
      ASSERT_EQ(0, std::memcmp(alone->data(), batched->data() + row * static_cast<size_t>(t.vocab),
                               alone->size() * sizeof(float)))
          << path << ": a prompt's logits differ alone and batched";
      row += p->ids.size();
    }
    ++checked;
  }
  EXPECT_EQ(checked, 2) << "tests/data/tiny/qwen2_moe and mixtral are missing (scripts/gen_tiny_models.py)";
}

}  // namespace
}  // namespace kvasir
