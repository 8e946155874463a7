// Tensor parallelism of the generic decoder on the CPU backend: a model split over 2-4 ranks
// (forked processes over the shm communicator, once over TCP on loopback) gives the unsplit
// model's logits within float32 reduction-order bounds (relative L2 < 1e-5) and the same greedy
// tokens, on the tiny HF Llama 3 (TP=2 and TP=4, where its 2 KV heads are replicated) and on
// SmolLM2's Q4_1 GGUF (TP=3: it has 9 heads, so TP=2 is refused with vLLM's message). Also the
// shard arithmetic on its own.
#include "model/tensor_parallel.h"

#include <unistd.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "model/tensor_parallel_test_util.h"

namespace kvasir {
namespace {

using tp_testing::SplitRun;

void expect_split_equals_whole(const std::string& path, int tp, const std::vector<int32_t>& prompt,
                               bool tcp = false) {
  tp_testing::expect_split_equals_whole(SplitRun{path, tp, {prompt}, 8, tcp});
}

const std::string kTinyLlama = std::string(KVASIR_SOURCE_DIR) + "/tests/data/tiny/llama3";
const std::string kSmolLm2 = std::string(KVASIR_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";

TEST(TensorParallelTest, TinyLlamaSplitTwoWaysEqualsTheWholeModel) {
  expect_split_equals_whole(kTinyLlama, 2, {1, 17, 42, 99, 3, 250, 7});
}

TEST(TensorParallelTest, TinyLlamaSplitTwoWaysOverTcpEqualsTheWholeModel) {
  expect_split_equals_whole(kTinyLlama, 2, {1, 17, 42, 99, 3, 250, 7}, /*tcp=*/true);
}

TEST(TensorParallelTest, TinyLlamaSplitFourWaysReplicatesItsTwoKvHeads) {
  expect_split_equals_whole(kTinyLlama, 4, {5, 6, 7, 8, 200, 201});
}

TEST(TensorParallelTest, SmolLm2GgufSplitThreeWaysEqualsTheWholeModel) {
  if (access(kSmolLm2.c_str(), R_OK) != 0) GTEST_SKIP() << kSmolLm2 << " is not here (scripts/fetch_models.sh)";
  // Arbitrary ids within its vocabulary.
  expect_split_equals_whole(kSmolLm2, 3, {1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47});
}

TEST(TensorParallelTest, ShardsThatCannotBeMadeAreRefusedWithVllmsMessage) {
  ModelConfig c;
  c.architecture = "llama";
  c.num_heads = 9;
  c.num_kv_heads = 3;
  c.intermediate_size = 1536;
  c.vocab_size = 49152;
  auto s = shard_config(c, 0, 2).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("Total number of attention heads (9) must be divisible by tensor parallel size (2)"),
            std::string::npos)
      << s.message();
  c.num_heads = 8;
  c.num_kv_heads = 3;
  EXPECT_FALSE(shard_config(c, 0, 2).ok()) << "3 KV heads cannot be split 2 ways";
  c.num_kv_heads = 2;
  auto four = shard_config(c, 3, 4);
  ASSERT_TRUE(four.ok()) << four.status().to_string();
  EXPECT_EQ(four->num_heads, 2);
  EXPECT_EQ(four->num_kv_heads, 1) << "fewer KV heads than ranks: each rank keeps one";
  EXPECT_EQ(four->intermediate_size, 384);
  EXPECT_EQ(four->vocab_size, 49152) << "the vocabulary stays whole in the config";
}

TEST(TensorParallelTest, VocabShardsCoverTheVocabularyOnceWithEqualPaddedWidths) {
  for (int64_t vocab : {256, 257, 49152, 7}) {
    for (int size : {1, 2, 3, 4}) {
      int64_t next = 0;
      for (int r = 0; r < size; ++r) {
        const VocabShard v = vocab_shard(vocab, r, size);
        EXPECT_EQ(v.begin, next);
        EXPECT_LE(v.rows, v.padded_rows);
        EXPECT_EQ(v.padded_rows, (vocab + size - 1) / size);
        next = v.begin + v.rows;
      }
      EXPECT_EQ(next, vocab) << vocab << " over " << size;
    }
  }
}

ModelConfig tiny_qwen2_config() {
  ModelConfig c;
  c.architecture = "qwen2";
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.vocab_size = 256;
  c.num_layers = 1;
  c.layer_is_sliding = {false};
  c.attention_bias = true;
  return c;
}

TEST(TensorParallelTest, ARowParallelBiasIsHeldByRankZeroOnlyAndUnknownRolesAreRefused) {
  const ModelConfig c = tiny_qwen2_config();
  // A row-parallel projection's bias (GPT-OSS's o_proj) would be added once per rank if every
  // rank held it: rank 0 holds it whole, the others not at all.
  for (int rank = 0; rank < 2; ++rank) {
    WeightManifest m = dense_decoder_manifest(c);
    WeightSpec o_bias = *m.find(m.layers[0], "attn_q.bias");
    o_bias.role = "attn_output.bias";
    o_bias.shape = {c.hidden_size};
    m.layers[0].push_back(o_bias);
    ASSERT_TRUE(shard_manifest(m, c, rank, 2, [](const WeightSpec&) { return true; }).ok());
    const WeightSpec* held = m.find(m.layers[0], "attn_output.bias");
    EXPECT_EQ(held != nullptr, rank == 0) << "rank " << rank;
    if (held != nullptr) {
      EXPECT_EQ(held->shape, std::vector<int64_t>{c.hidden_size}) << "whole";
    }
  }
  WeightManifest m = dense_decoder_manifest(c);
  WeightSpec unknown = *m.find(m.layers[0], "attn_q.bias");
  unknown.role = "attn_gate.bias";
  m.layers[0].push_back(unknown);
  auto s = shard_manifest(m, c, 0, 2, [](const WeightSpec&) { return true; });
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("not supported for the qwen2 family yet (it does not split weight attn_gate.bias)"),
            std::string::npos)
      << s.message();
}

TEST(TensorParallelTest, QkvBiasesAreSplitWithTheirRows) {
  const ModelConfig c = tiny_qwen2_config();
  WeightManifest m = dense_decoder_manifest(c);
  ASSERT_TRUE(shard_manifest(m, c, 1, 2, [](const WeightSpec&) { return true; }).ok());
  const WeightSpec* q = m.find(m.layers[0], "attn_q.bias");
  const WeightSpec* k = m.find(m.layers[0], "attn_k.bias");
  ASSERT_TRUE(q != nullptr && k != nullptr);
  EXPECT_EQ(q->shape, std::vector<int64_t>{32});
  EXPECT_EQ(q->hf.row_begin, 32) << "rank 1's two heads of 16";
  EXPECT_EQ(q->hf.fused_rows, 64);
  EXPECT_EQ(k->shape, std::vector<int64_t>{16});
  EXPECT_EQ(k->gguf.row_begin, 16) << "rank 1's KV head";
}

}  // namespace
}  // namespace kvasir
