// ContiguousBatch's two layouts of a multi-token step on the tiny random-weight Llama of
// tests/data/tiny (CPU, exact matmuls): each sequence's tokens as one multi-token query, and as
// one-query sequences whose context ends at each token (the layout of a verify step on a GPU).
// The logits of every token and the KV the step leaves behind must agree, so a verify step can
// run as a pure decode step without changing what the target computes.
#include "runner/contiguous_batch.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "loader/weight_source.h"
#include "model/decoder_model.h"
#include "model/registry.h"

namespace kvasir {
namespace {

const std::string kTiny = std::string(KVASIR_SOURCE_DIR) + "/tests/data/tiny/llama3/model.gguf";

TEST(ContiguousBatch, OneQueryRowsLayoutMatchesMultiTokenQueries) {
  auto w = open_weights(kTiny);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  auto config = load_model_config(**w);
  ASSERT_TRUE(config.ok());
  CpuBackendOptions bo;
  bo.precision = MatmulPrecision::kExact;
  CpuBackend backend(bo);
  ModelOptions mo;
  mo.max_num_tokens = 64;
  mo.max_num_logits = 16;
  auto m = DecoderModel::create(*config, **w, backend, mo);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  DecoderModel& model = **m;
  const int B = 3, bs = 4, max_len = 40, vocab = static_cast<int>(config->vocab_size);
  // Prompts of different lengths (block boundaries fall inside the verify tokens for some).
  const std::vector<std::vector<int32_t>> prompts{{5, 9, 14, 3, 8, 21, 30}, {7, 2, 11}, {40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50}};
  // The step under test: 1 + k tokens per sequence (k = 4, 0, 2), as a verify step schedules.
  const std::vector<std::vector<int32_t>> step{{12, 13, 14, 15, 16}, {17}, {18, 19, 20}};
  std::vector<std::vector<float>> logits(2);
  std::vector<std::unique_ptr<KvCache>> caches;
  for (int layout = 0; layout < 2; ++layout) {
    ContiguousBatch cb(B, max_len, bs);
    auto c = model.allocate_kv_cache(cb.num_blocks_needed(), bs);
    ASSERT_TRUE(c.ok());
    caches.push_back(std::make_unique<KvCache>(std::move(*c)));
    std::vector<float> prompt_logits(static_cast<size_t>(B) * vocab);
    ASSERT_TRUE(model.forward(cb.build(prompts), *caches.back(), prompt_logits.data()).ok());
    cb.commit();
    const ForwardBatch& fb = cb.build(step, /*all_logits=*/true, /*one_query_rows=*/layout == 1);
    ASSERT_EQ(fb.num_logits, 9);
    ASSERT_EQ(fb.attn.num_seqs, layout == 1 ? 9 : 3);
    if (layout == 1) {
      ASSERT_EQ(fb.attn.num_tokens, fb.attn.num_seqs) << "a pure decode step";
    }
    logits[static_cast<size_t>(layout)].resize(static_cast<size_t>(fb.num_logits) * vocab);
    ASSERT_TRUE(model.forward(fb, *caches.back(), logits[static_cast<size_t>(layout)].data()).ok());
    cb.commit();
    EXPECT_EQ(cb.seq_len(0), 12);
    EXPECT_EQ(cb.logits_row_of_seq()[2], 8);
  }
  double max_diff = 0, max_abs = 0;
  for (size_t i = 0; i < logits[0].size(); ++i) {
    max_diff = std::max(max_diff, static_cast<double>(std::fabs(logits[0][i] - logits[1][i])));
    max_abs = std::max(max_abs, static_cast<double>(std::fabs(logits[0][i])));
  }
  EXPECT_LE(max_diff, 1e-4 * std::max(1.0, max_abs)) << "logits differ by " << max_diff;
  for (int r = 0; r < 9; ++r) {
    const float* a = logits[0].data() + static_cast<size_t>(r) * vocab;
    const float* b = logits[1].data() + static_cast<size_t>(r) * vocab;
    EXPECT_EQ(std::max_element(a, a + vocab) - a, std::max_element(b, b + vocab) - b) << "row " << r;
  }
}

}  // namespace
}  // namespace kvasir
