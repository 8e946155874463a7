#include "loader/gguf_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>
#include <set>

#include "loader/test_writers.h"
#include "loader/weight_source.h"

namespace kvasir {
namespace {

using testing::Bytes;
using testing::GgufWriter;
using testing::patch;

const std::string kModels = std::string(KVASIR_SOURCE_DIR) + "/models/";
const std::string kSmol = kModels + "SmolLM2-135M-Instruct.Q4_1.gguf";
const std::string kGemma = kModels + "gemma-3-270m-q4_k_m.gguf";

bool exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

// A small file with every value type, a nested array and three tensors of different dtypes.
GgufWriter rich_writer() {
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_u32("general.alignment", 32);
  w.add_scalar<uint8_t>("t.u8", GgufType::kUint8, 200);
  w.add_scalar<int8_t>("t.i8", GgufType::kInt8, -5);
  w.add_scalar<uint16_t>("t.u16", GgufType::kUint16, 60000);
  w.add_scalar<int16_t>("t.i16", GgufType::kInt16, -30000);
  w.add_u32("t.u32", 4000000000u);
  w.add_scalar<int32_t>("t.i32", GgufType::kInt32, -7);
  w.add_f32("t.f32", 1.5f);
  w.add_bool("t.bool", true);
  w.add_scalar<uint64_t>("t.u64", GgufType::kUint64, 1ull << 40);
  w.add_scalar<int64_t>("t.i64", GgufType::kInt64, -(1ll << 40));
  w.add_scalar<double>("t.f64", GgufType::kFloat64, 0.25);
  w.add_array("t.strings", GgufWriter::string_array({"a", "", "hello", "\xE2\x96\x81x"}));
  w.add_array("t.i32s", GgufWriter::scalar_array<int32_t>(GgufType::kInt32, {1, -2, 3}));
  w.add_array("t.f32s", GgufWriter::scalar_array<float>(GgufType::kFloat32, {0.5f, -1.0f}));
  w.add_array("t.nested", GgufWriter::array_of_arrays(
                              {GgufWriter::scalar_array<int32_t>(GgufType::kInt32, {1, 2}),
                               GgufWriter::string_array({"x", "yz"})}));
  w.add_string("t.str", "value");
  w.add_tensor("a.weight", DType::kF32, {4, 2}, testing::iota_bytes(32));
  w.add_tensor("b.weight", DType::kQ4_0, {64, 2}, testing::iota_bytes(4 * 18));
  w.add_tensor("c.weight", DType::kF16, {3}, testing::iota_bytes(6));
  return w;
}

TEST(GgufFile, ParsesEveryValueTypeAndTensor) {
  GgufWriter w = rich_writer();
  Bytes b = w.build();
  auto f = GgufFile::parse(b);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  const GgufFile& g = **f;
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.architecture(), "llama");
  EXPECT_EQ(g.alignment(), 32u);
  EXPECT_EQ(g.data_offset() % 32, 0u);
  EXPECT_EQ(*g.get_u32("t.u8"), 200u);
  EXPECT_EQ(*g.get_i64("t.i8"), -5);
  EXPECT_EQ(*g.get_u32("t.u16"), 60000u);
  EXPECT_EQ(*g.get_i64("t.i16"), -30000);
  EXPECT_EQ(*g.get_u32("t.u32"), 4000000000u);
  EXPECT_EQ(*g.get_i64("t.i32"), -7);
  EXPECT_FALSE(g.get_u32("t.i32").ok());  // negative does not fit
  EXPECT_EQ(*g.get_f32("t.f32"), 1.5f);
  EXPECT_TRUE(*g.get_bool("t.bool"));
  EXPECT_EQ(*g.get_u64("t.u64"), 1ull << 40);
  EXPECT_FALSE(g.get_u32("t.u64").ok());
  EXPECT_EQ(*g.get_i64("t.i64"), -(1ll << 40));
  EXPECT_EQ(*g.get_f64("t.f64"), 0.25);
  EXPECT_EQ(*g.get_string("t.str"), "value");
  EXPECT_EQ(*g.get_string_array("t.strings"),
            (std::vector<std::string_view>{"a", "", "hello", "\xE2\x96\x81x"}));
  EXPECT_EQ(*g.get_i32_array("t.i32s"), (std::vector<int32_t>{1, -2, 3}));
  EXPECT_EQ(*g.get_f32_array("t.f32s"), (std::vector<float>{0.5f, -1.0f}));
  EXPECT_EQ(*g.get_array_size("t.nested"), 2u);
  auto items = g.array_items(*g.find("t.nested"));
  ASSERT_TRUE(items.ok());
  ASSERT_EQ(items->size(), 2u);
  EXPECT_EQ((*items)[0].elem_type, GgufType::kInt32);
  EXPECT_EQ((*items)[1].elem_type, GgufType::kString);
  auto inner = g.array_items((*items)[1]);
  ASSERT_TRUE(inner.ok());
  EXPECT_EQ(*g.value_string((*inner)[1]), "yz");
  EXPECT_EQ(g.describe(*g.find("t.strings")), "[4 x string]");
  EXPECT_EQ(g.describe(*g.find("t.str")), "\"value\"");

  // Type mismatches and absent keys are errors that name the key.
  auto s = g.get_string("t.u32");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("t.u32"), std::string::npos);
  EXPECT_EQ(g.get_u32("missing").status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(g.get_string_array("t.i32s").ok());

  ASSERT_EQ(g.tensor_infos().size(), 3u);
  auto a = g.tensor("a.weight");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->dtype, DType::kF32);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 4}));  // GGUF ne reversed
  EXPECT_EQ(a->nbytes, 32u);
  EXPECT_EQ(a->data[0], 1);
  EXPECT_EQ(a->data, b.data() + w.field("data"));
  auto q = g.tensor("b.weight");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->shape, (std::vector<int64_t>{2, 64}));
  EXPECT_EQ(q->nbytes, 4u * 18);
  EXPECT_EQ(g.tensor("c.weight")->shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(g.tensor("nope").status().code(), StatusCode::kNotFound);
}

TEST(GgufFile, VersionTwoAndNoTensorsAreFine) {
  GgufWriter w(2);
  w.add_string("general.architecture", "gpt2");
  Bytes b = w.build();
  auto f = GgufFile::parse(b);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ((*f)->version(), 2u);
  EXPECT_TRUE((*f)->tensor_infos().empty());
}

TEST(GgufFile, CustomAlignmentIsHonoured) {
  GgufWriter w;
  w.set_alignment(64);
  w.add_u32("general.alignment", 64);
  w.add_tensor("x", DType::kF32, {3}, testing::iota_bytes(12));
  w.add_tensor("y", DType::kF32, {3}, testing::iota_bytes(12));
  Bytes b = w.build();
  auto f = GgufFile::parse(b);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ((*f)->alignment(), 64u);
  EXPECT_EQ((*f)->data_offset() % 64, 0u);
  EXPECT_EQ((*f)->find_tensor("y")->offset, 64u);
}

TEST(GgufFile, VocabOnlyFilesFromLlamaCppParse) {
  // shared/ sits beside the checkout, or where $KVASIR_SHARED_TESTDATA says.
  const char* env = std::getenv("KVASIR_SHARED_TESTDATA");
  const std::string dir =
      (env != nullptr && *env ? std::string(env) : std::string(KVASIR_SOURCE_DIR) + "/../shared/testdata") + "/tokenizer/";
  int parsed = 0;
  for (const char* name : {"ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf",
                           "ggml-vocab-bert-bge.gguf", "ggml-vocab-phi-3.gguf"}) {
    if (!exists(dir + name)) continue;
    auto f = GgufFile::open(dir + name);
    ASSERT_TRUE(f.ok()) << name << ": " << f.status().to_string();
    auto tokens = (*f)->get_string_array("tokenizer.ggml.tokens");
    ASSERT_TRUE(tokens.ok()) << name;
    EXPECT_GT(tokens->size(), 1000u);
    ++parsed;
  }
  if (parsed == 0) GTEST_SKIP() << "no vocab test data";
}

TEST(GgufFile, RealSmolLM2) {
  if (!exists(kSmol)) GTEST_SKIP() << kSmol << " missing";
  auto f = GgufFile::open(kSmol);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  const GgufFile& g = **f;
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.architecture(), "llama");
  EXPECT_EQ(g.metadata().size(), 33u);
  EXPECT_EQ(*g.get_u32("llama.block_count"), 30u);
  EXPECT_EQ(*g.get_u32("llama.embedding_length"), 576u);
  auto tokens = g.get_string_array("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.ok());
  EXPECT_EQ(tokens->size(), 49152u);
  EXPECT_EQ((*tokens)[1], "<|im_start|>");
  EXPECT_EQ(g.get_string_array("tokenizer.ggml.merges")->size(), 48900u);
  EXPECT_EQ(g.get_i32_array("tokenizer.ggml.token_type")->size(), 49152u);
  EXPECT_EQ(g.tensor_infos().size(), 272u);
  std::set<DType> types;
  for (const auto& t : g.tensor_infos()) types.insert(t.dtype);
  EXPECT_EQ(types, (std::set<DType>{DType::kF32, DType::kQ4_1, DType::kQ8_0}));
  auto emb = g.tensor("token_embd.weight");
  ASSERT_TRUE(emb.ok());
  EXPECT_EQ(emb->dtype, DType::kQ8_0);
  EXPECT_EQ(emb->shape, (std::vector<int64_t>{49152, 576}));
  EXPECT_EQ(emb->nbytes, 49152u * 576 / 32 * 34);
  auto k = g.tensor("blk.0.attn_k.weight");
  EXPECT_EQ(k->dtype, DType::kQ4_1);
  EXPECT_EQ(k->shape, (std::vector<int64_t>{192, 576}));
  EXPECT_EQ(g.tensor("blk.29.ffn_down.weight")->shape, (std::vector<int64_t>{576, 1536}));
  EXPECT_FALSE(g.find_tensor("output.weight"));  // tied embeddings
  // The last tensor ends inside the file (the parser checked it; double-check the arithmetic).
  const auto& last = g.tensor_infos().back();
  EXPECT_LE(g.data_offset() + last.offset + last.nbytes, g.bytes().size());
}

TEST(GgufFile, RealGemma3) {
  if (!exists(kGemma)) GTEST_SKIP() << kGemma << " missing";
  auto src = open_weights(kGemma);
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  const GgufFile& g = *(*src)->gguf();
  EXPECT_EQ(g.architecture(), "gemma3");
  EXPECT_EQ(*g.get_u32("gemma3.attention.sliding_window"), 512u);
  EXPECT_EQ(*g.get_u32("gemma3.attention.key_length"), 256u);
  EXPECT_FLOAT_EQ(*g.get_f32("gemma3.rope.freq_base"), 1e6f);
  auto tokens = g.get_string_array("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.ok());
  EXPECT_EQ(tokens->size(), 262144u);
  EXPECT_EQ((*tokens)[2], "<bos>");
  EXPECT_EQ(g.get_f32_array("tokenizer.ggml.scores")->size(), 262144u);
  EXPECT_EQ(g.tensor_infos().size(), 236u);
  std::set<DType> types;
  for (const auto& t : g.tensor_infos()) types.insert(t.dtype);
  EXPECT_EQ(types,
            (std::set<DType>{DType::kF32, DType::kQ5_0, DType::kQ4_K, DType::kQ8_0, DType::kQ6_K}));
  auto emb = (*src)->tensor("token_embd.weight");
  ASSERT_TRUE(emb.ok());
  EXPECT_EQ(emb->shape, (std::vector<int64_t>{262144, 640}));
  EXPECT_EQ((*src)->tensor("blk.0.attn_q.weight")->shape, (std::vector<int64_t>{1024, 640}));
  EXPECT_EQ((*src)->tensor("blk.0.attn_k_norm.weight")->shape, (std::vector<int64_t>{256}));
  EXPECT_EQ((*src)->tensor("blk.0.ffn_down.weight")->dtype, DType::kQ6_K);
  EXPECT_TRUE((*src)->has_tensor("blk.17.post_ffw_norm.weight"));
  EXPECT_EQ((*src)->tensor_names().size(), 236u);
  // Norm weights already carry Gemma's +1 (llama.cpp's converter adds it): they sit near 1+w.
  auto norm = (*src)->tensor("output_norm.weight");
  ASSERT_TRUE(norm.ok());
  float first = 0;
  std::memcpy(&first, norm->data, 4);
  EXPECT_TRUE(std::isfinite(first));
}

}  // namespace
}  // namespace kvasir
