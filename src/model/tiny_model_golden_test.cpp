// Tiny random-weight models of each directory under tests/data/tiny/ (written by
// scripts/gen_tiny_models.py with HF transformers): loaded through the normal loader and the
// model registry (no tokenizer: the prompts are token ids), run on the CPU backend in exact mode,
// and compared with transformers' float32 logits at every position; where the directory also
// holds llama.cpp's conversion (golden.json "gguf"), that file too.
//
// The bar is a relative L2 error of 1e-4 per prompt, and the same top-1 token at every position. Both sides compute in float32 from the same
// float32 weights; they differ only by summation order and libm rounding (measured ~1e-6), while
// a wrong binding or a wrong RoPE gives errors of order 1e-1 (checked below: the test must fail
// on a model loaded wrong).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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
  std::string gguf;  // llama.cpp's conversion of the same weights, or empty
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
    if (const Json* g = j->find("gguf")) m.gguf = dir + "/" + g->as_string();
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

double rel_l2(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += (double{a[i]} - b[i]) * (double{a[i]} - b[i]);
    den += double{b[i]} * b[i];
  }
  return std::sqrt(num / den);
}

size_t argmax(const float* x, int64_t n) {
  return static_cast<size_t>(std::max_element(x, x + n) - x);
}

struct Comparison {
  double worst = 0;           // relative L2 error, the worst prompt's
  int top1_mismatches = 0;    // positions whose most likely token differs
};

// Against transformers' logits, run as one batch of all prompts (batched == single is the
// decoder's promise; longrope picks its table per sequence inside the batch).
StatusOr<Comparison> compare(const TinyModel& t, const ModelConfig& config, const WeightSource& weights) {
  std::vector<const Prompt*> seqs;
  for (const Prompt& p : t.prompts) seqs.push_back(&p);
  Batch batch(seqs);
  CpuBackendOptions bo;
  bo.precision = MatmulPrecision::kExact;
  CpuBackend backend(bo);
  ModelOptions mo;
  mo.max_num_tokens = batch.fb.num_tokens;
  mo.max_num_logits = batch.fb.num_tokens;
  KVASIR_ASSIGN_OR_RETURN(auto model, DecoderModel::create(config, weights, backend, mo));
  KVASIR_ASSIGN_OR_RETURN(KvCache cache, model->allocate_kv_cache(batch.num_blocks, 16));
  std::vector<float> logits(static_cast<size_t>(batch.fb.num_tokens * t.vocab));
  KVASIR_RETURN_IF_ERROR(model->forward(batch.fb, cache, logits.data()));
  Comparison c;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const float* got = logits.data() + static_cast<size_t>(batch.qsl[s]) * static_cast<size_t>(t.vocab);
    const float* want = seqs[s]->logits.data();
    c.worst = std::max(c.worst, rel_l2(got, want, seqs[s]->logits.size()));
    for (size_t i = 0; i < seqs[s]->ids.size(); ++i) {
      const size_t row = i * static_cast<size_t>(t.vocab);
      c.top1_mismatches += argmax(got + row, t.vocab) != argmax(want + row, t.vocab);
    }
  }
  return c;
}

StatusOr<double> worst_error(const TinyModel& t, const ModelConfig& config, const WeightSource& weights) {
  KVASIR_ASSIGN_OR_RETURN(Comparison c, compare(t, config, weights));
  return c.worst;
}

TEST(TinyModelGolden, EveryTinyModelMatchesTransformers) {
  const std::vector<TinyModel> models = load_tiny_models();
  ASSERT_FALSE(models.empty()) << "no models under " << kTinyDir << " (scripts/gen_tiny_models.py)";
  for (const TinyModel& t : models) {
    if (!t.gguf.empty()) {
      auto gguf = open_weights(t.gguf);
      ASSERT_TRUE(gguf.ok()) << t.gguf << ": " << gguf.status().to_string();
      auto config = load_model_config(**gguf);
      ASSERT_TRUE(config.ok()) << t.gguf << ": " << config.status().to_string();
      auto c = compare(t, *config, **gguf);
      ASSERT_TRUE(c.ok()) << t.gguf << ": " << c.status().to_string();
      std::printf("[ metrics ] %s (%s): worst relative L2 vs transformers %.3g, top-1 mismatches %d\n",
                  t.gguf.c_str(), config->to_string().c_str(), c->worst, c->top1_mismatches);
      EXPECT_LT(c->worst, kBar) << t.gguf;
      EXPECT_EQ(c->top1_mismatches, 0) << t.gguf;
    }
    auto weights = open_weights(t.dir);
    ASSERT_TRUE(weights.ok()) << t.dir << ": " << weights.status().to_string();
    auto config = load_model_config(**weights);
    ASSERT_TRUE(config.ok()) << t.dir << ": " << config.status().to_string();
    ASSERT_EQ(config->vocab_size, t.vocab);
    auto cmp = compare(t, *config, **weights);
    ASSERT_TRUE(cmp.ok()) << t.dir << ": " << cmp.status().to_string();
    std::printf("[ metrics ] %s (%s): worst relative L2 vs transformers %.3g, top-1 mismatches %d\n",
                t.dir.c_str(), config->to_string().c_str(), cmp->worst, cmp->top1_mismatches);
    EXPECT_LT(cmp->worst, kBar) << t.dir;
    EXPECT_EQ(cmp->top1_mismatches, 0) << t.dir;

    // The comparison must catch a model loaded wrong: a RoPE base off by 2x.
    ModelConfig wrong = *config;
    wrong.rope_theta *= 2;
    wrong.rope_theta_local *= 2;
    auto bad = worst_error(t, wrong, **weights);
    ASSERT_TRUE(bad.ok());
    std::printf("[ metrics ] %s with rope_theta x2: %.3g\n", t.dir.c_str(), *bad);
    EXPECT_GT(*bad, 100 * kBar) << t.dir;
    if (config->rope_scaling.type == RopeScalingType::kYarn) {
      // ... and YaRN's magnitude scaling of cos/sin.
      ModelConfig unscaled = *config;
      unscaled.rope_scaling.attention_factor = 1.0;
      auto u = worst_error(t, unscaled, **weights);
      ASSERT_TRUE(u.ok());
      std::printf("[ metrics ] %s without the yarn magnitude scaling: %.3g\n", t.dir.c_str(), *u);
      EXPECT_GT(*u, 100 * kBar) << t.dir;
    }
    if (config->rope_scaling.type == RopeScalingType::kLongrope) {
      // ... and longrope's short/long choice: always the short factors.
      ModelConfig short_only = *config;
      short_only.rope_scaling.long_factor = short_only.rope_scaling.short_factor;
      auto s = worst_error(t, short_only, **weights);
      ASSERT_TRUE(s.ok());
      std::printf("[ metrics ] %s with short factors only: %.3g\n", t.dir.c_str(), *s);
      EXPECT_GT(*s, 100 * kBar) << t.dir;
      // ... and its magnitude scaling of cos/sin.
      ModelConfig unscaled = *config;
      unscaled.rope_scaling.attention_factor = 1.0;
      auto u = worst_error(t, unscaled, **weights);
      ASSERT_TRUE(u.ok());
      std::printf("[ metrics ] %s without the magnitude scaling: %.3g\n", t.dir.c_str(), *u);
      EXPECT_GT(*u, 100 * kBar) << t.dir;
    }
    if (config->sliding_window > 0) {
      ModelConfig full = *config;
      full.sliding_window = 0;
      full.layer_is_sliding.assign(full.layer_is_sliding.size(), false);
      auto f = worst_error(t, full, **weights);
      ASSERT_TRUE(f.ok());
      std::printf("[ metrics ] %s without its sliding window: %.3g\n", t.dir.c_str(), *f);
      EXPECT_GT(*f, 100 * kBar) << t.dir;
    }
  }
}

}  // namespace
}  // namespace kvasir
