// A model file that disagrees with itself is refused at load with an error naming the tensor,
// never by a failed check in the first forward pass (issue 14): every tensor role of a GGUF swept
// over every GGML type id (what no kernel reads is refused; what is accepted runs a forward), and
// a config.json whose shape fields disagree with the checkpoint, for every field and every family.
#include <gtest/gtest.h>

#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/quant/matmul.h"
#include "common/json.h"
#include "common/mapped_file.h"
#include "loader/dummy_weights.h"
#include "loader/gguf_file.h"
#include "loader/test_writers.h"
#include "loader/weight_source.h"
#include "model/decoder_model.h"
#include "model/one_sequence_batch.h"
#include "model/registry.h"
#include "model/tiny_config_test_util.h"
#include "quant/dequantize.h"

namespace kvasir {
namespace {

using testing::Bytes;
using testing::GgufWriter;

// A one-layer llama GGUF with every kind of weight the loader binds: matrices (an untied output
// too), norms (QK-norm included), biases, and llama3's rope_freqs. Rows of 256 hold whole blocks
// of every GGML format, so the sweep meets each type's own check, not a block-size error.
constexpr int64_t kHidden = 256, kFfn = 256, kVocab = 32, kHeadDim = 64, kHeads = 4, kKvHeads = 2;

struct TensorDecl {
  std::string name;
  std::vector<int64_t> ne;  // GGUF order: ne[0] is the row length
};

std::vector<TensorDecl> tiny_llama_tensors() {
  const int64_t q = kHeads * kHeadDim, kv = kKvHeads * kHeadDim;
  return {
      {"token_embd.weight", {kHidden, kVocab}},  {"output_norm.weight", {kHidden}},
      {"output.weight", {kHidden, kVocab}},      {"rope_freqs.weight", {kHeadDim / 2}},
      {"blk.0.attn_norm.weight", {kHidden}},     {"blk.0.attn_q.weight", {kHidden, q}},
      {"blk.0.attn_k.weight", {kHidden, kv}},    {"blk.0.attn_v.weight", {kHidden, kv}},
      {"blk.0.attn_q.bias", {q}},                {"blk.0.attn_k.bias", {kv}},
      {"blk.0.attn_v.bias", {kv}},               {"blk.0.attn_q_norm.weight", {kHeadDim}},
      {"blk.0.attn_k_norm.weight", {kHeadDim}},  {"blk.0.attn_output.weight", {q, kHidden}},
      {"blk.0.ffn_norm.weight", {kHidden}},      {"blk.0.ffn_gate.weight", {kHidden, kFfn}},
      {"blk.0.ffn_up.weight", {kHidden, kFfn}},  {"blk.0.ffn_down.weight", {kFfn, kHidden}},
  };
}

// The tiny model with tensor `swept` of GGML type id `type` and every other tensor f32. Bytes
// are 0x11: small finite values in every float and block format, so a forward stays finite.
Bytes tiny_llama_gguf(const std::string& swept, uint32_t type) {
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_u32("llama.block_count", 1);
  w.add_u32("llama.context_length", 512);
  w.add_u32("llama.embedding_length", kHidden);
  w.add_u32("llama.feed_forward_length", kFfn);
  w.add_u32("llama.attention.head_count", kHeads);
  w.add_u32("llama.attention.head_count_kv", kKvHeads);
  w.add_u32("llama.vocab_size", kVocab);
  w.add_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  for (const TensorDecl& t : tiny_llama_tensors()) {
    const uint32_t id = t.name == swept ? type : 0;
    const DType dtype = static_cast<DType>(id);
    int64_t rows = 1;
    for (size_t d = 1; d < t.ne.size(); ++d) rows *= t.ne[d];
    // An id without a layout (unknown, or a row length that is no whole number of blocks) gets
    // one byte: the parser must refuse it before it reads any.
    const auto row = row_bytes(dtype, t.ne[0]);
    const size_t n = row ? *row * static_cast<size_t>(rows) : 1;
    w.add_tensor(t.name, dtype, t.ne, Bytes(n, 0x11));
  }
  return w.build();
}

// What the loader must decide for `name` of type `id`: accepted iff the kernels that read its
// role read the type (matrices: the CPU matmul; norms and biases: the reference dequantizer;
// rope_freqs: f32 only), and the parser knows the type and its blocks fit the rows.
bool should_load(const TensorDecl& t, uint32_t id) {
  const DType d = static_cast<DType>(id);
  if (!dtype_info(id) || !row_bytes(d, t.ne[0])) return false;
  if (t.name == "rope_freqs.weight") return d == DType::kF32;
  if (t.ne.size() == 2) return cpu::matmul_supported(d, t.ne[0]).ok();
  return quant::dequantize_supported(d);
}

// Parses, reads the config, binds and runs one forward: the whole path of `kvasir serve`'s
// first request.
Status load_and_run(const Bytes& bytes, Backend& backend) {
  KVASIR_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file,
                          GgufFile::parse(std::span<const uint8_t>(bytes.data(), bytes.size())));
  std::unique_ptr<WeightSource> src = gguf_weight_source(std::move(file));
  KVASIR_ASSIGN_OR_RETURN(ModelConfig config, model_config_from_gguf(*src->gguf()));
  ModelOptions mo;
  mo.max_num_tokens = 8;
  mo.max_num_logits = 1;
  KVASIR_ASSIGN_OR_RETURN(std::unique_ptr<DecoderModel> model,
                          DecoderModel::create(config, *src, backend, mo));
  KVASIR_ASSIGN_OR_RETURN(KvCache cache, model->allocate_kv_cache(2, 16));
  OneSequence seq({0, 1, static_cast<int32_t>(config.vocab_size - 1)});
  std::vector<float> logits(static_cast<size_t>(config.vocab_size));
  KVASIR_RETURN_IF_ERROR(model->forward(seq.batch, cache, logits.data()));
  for (float x : logits) {
    if (!std::isfinite(x)) return internal_error("non-finite logit");
  }
  return Status();
}

TEST(ModelFileChecks, EveryTensorRoleOfEveryGgmlTypeIsDecidedAtLoad) {
  CpuBackend backend(CpuBackendOptions{.num_threads = 1});
  ASSERT_TRUE(load_and_run(tiny_llama_gguf("", 0), backend).ok());  // all f32: the baseline
  int accepted = 0, refused = 0;
  for (const TensorDecl& t : tiny_llama_tensors()) {
    for (uint32_t id = 0; id <= 40; ++id) {
      SCOPED_TRACE(t.name + " as type " + std::to_string(id));
      const Status s = load_and_run(tiny_llama_gguf(t.name, id), backend);
      const bool want = should_load(t, id);
      EXPECT_EQ(s.ok(), want) << s.to_string();
      if (s.ok()) {
        ++accepted;
      } else {
        ++refused;
        // A type the parser knows and lays out is refused by the binder, naming the tensor.
        if (dtype_info(id) && row_bytes(static_cast<DType>(id), t.ne[0])) {
          EXPECT_NE(s.message().find(t.name), std::string::npos) << s.message();
        }
      }
    }
  }
  EXPECT_GT(accepted, 100);
  EXPECT_GT(refused, 100);
}

TEST(ModelFileChecks, IntegerNormAndEmbeddingTypesNameTheWeightAndTheType) {
  CpuBackend backend(CpuBackendOptions{.num_threads = 1});
  for (const char* name : {"blk.0.attn_norm.weight", "output_norm.weight", "token_embd.weight",
                           "blk.0.attn_q.bias"}) {
    for (DType t : {DType::kI8, DType::kI16, DType::kI32}) {
      const Status s = load_and_run(tiny_llama_gguf(name, static_cast<uint32_t>(t)), backend);
      ASSERT_FALSE(s.ok()) << name;
      EXPECT_EQ(s.code(), StatusCode::kUnimplemented) << s.to_string();
      EXPECT_NE(s.message().find(std::string("weight ") + name), std::string::npos) << s.message();
      EXPECT_NE(s.message().find(std::string("has type ") + std::string(dtype_name(t))),
                std::string::npos)
          << s.message();
    }
  }
  // Q8_1 and Q8_K are activation formats: the reference reads them, the CPU matmul does not.
  const Status q8k = load_and_run(
      tiny_llama_gguf("blk.0.ffn_up.weight", static_cast<uint32_t>(DType::kQ8_K)), backend);
  EXPECT_NE(q8k.message().find("weight blk.0.ffn_up.weight: matmul: weight type q8_K"),
            std::string::npos)
      << q8k.to_string();
}

// gguf_fuzz's model seeds (fuzz/seeds/make_seeds.py) must reach what they are for: the valid
// ones a forward pass, the faulty ones the check that refuses them.
TEST(ModelFileChecks, FuzzSeedModelsLoadOrAreRefusedWhereTheyShouldBe) {
  CpuBackend backend(CpuBackendOptions{.num_threads = 1});
  const std::string dir = std::string(KVASIR_SOURCE_DIR) + "/fuzz/seeds/gguf_fuzz/";
  const std::vector<std::pair<std::string, std::string>> seeds = {
      {"model_llama.gguf", ""},
      {"model_context_2_31.gguf", ""},  // a length, not a fault: setup caps max_model_len
      {"model_norm_i8.gguf", "weight blk.0.attn_norm.weight (a norm weight) has type i8"},
      {"model_output_norm_i16.gguf", "weight output_norm.weight (a norm weight) has type i16"},
      {"model_embedding_i32.gguf", "weight token_embd.weight (a matrix) has type i32"},
      {"model_bias_i32.gguf", "weight blk.0.attn_q.bias (a bias) has type i32"},
      {"model_arch_control_bytes.gguf", "architecture 'l\\r\\x1B[m'"},
      {"model_fewer_blocks.gguf", "blk.1.attn_norm.weight is in the checkpoint"},
      {"model_sliding_period_0.gguf", "sliding_window_pattern' must be >= 1"}};
  for (const auto& [name, error] : seeds) {
    auto bytes = read_text_file(dir + name, 1u << 20);
    ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
    const Status s = load_and_run(Bytes(bytes->begin(), bytes->end()), backend);
    if (error.empty()) {
      EXPECT_TRUE(s.ok()) << name << ": " << s.to_string();
    } else {
      EXPECT_NE(s.message().find(error), std::string::npos) << name << ": " << s.to_string();
    }
  }
}

using test_util::tiny_config;

TEST(ModelFileChecks, ConfigShapeFieldsThatDisagreeWithTheWeightsNameTheTensor) {
  CpuBackend backend(CpuBackendOptions{.num_threads = 1});
  // field, value; the weights are made for the unchanged config.
  const std::vector<std::pair<std::string, int64_t>> fields = {
      {"hidden_size", 80},        {"intermediate_size", 97}, {"num_attention_heads", 8},
      {"num_key_value_heads", 4}, {"head_dim", 32},          {"vocab_size", 130},
      {"num_hidden_layers", 3},   {"num_hidden_layers", 1}};
  // MLA (DeepSeek) has no K/V heads of head_dim: its own sizes shape its weights instead.
  const std::vector<std::pair<std::string, int64_t>> mla_fields = {
      {"hidden_size", 80},       {"intermediate_size", 97}, {"num_attention_heads", 8},
      {"kv_lora_rank", 40},      {"q_lora_rank", 20},       {"qk_rope_head_dim", 12},
      {"qk_nope_head_dim", 20},  {"v_head_dim", 16},        {"vocab_size", 130},
      {"num_hidden_layers", 3},  {"num_hidden_layers", 1}};
  for (const ModelFamily* f : model_families()) {
    const std::string type = f->hf_model_types().front();
    const bool mla = tiny_config(type).find("kv_lora_rank") != nullptr;
    auto good = model_config_from_hf_json(tiny_config(type), nullptr);
    ASSERT_TRUE(good.ok()) << type << ": " << good.status().to_string();
    auto specs = dummy_weight_specs_for(*good, false);
    ASSERT_TRUE(specs.ok());
    auto src = open_dummy_weights(*specs, 7, "dummy");
    ASSERT_TRUE(src.ok());
    ASSERT_TRUE(DecoderModel::create(*good, **src, backend, ModelOptions{}).ok()) << type;
    for (const auto& [field, value] : mla ? mla_fields : fields) {
      if (field == "q_lora_rank" && tiny_config(type).find("q_lora_rank")->is_null()) continue;
      SCOPED_TRACE(type + ": " + field + " = " + std::to_string(value));
      Json j = tiny_config(type);
      j.set(field, Json(value));
      auto c = model_config_from_hf_json(j, nullptr);
      ASSERT_TRUE(c.ok()) << c.status().to_string();  // consistent in itself ...
      auto m = DecoderModel::create(*c, **src, backend, ModelOptions{});
      ASSERT_FALSE(m.ok());  // ... but not with the checkpoint
      const std::string& msg = m.status().message();
      if (field == "num_hidden_layers") {
        // Too many: the first weight of the missing layer; too few: the first of the extra one.
        EXPECT_NE(msg.find(value > 2 ? "model.layers.2." : "model.layers.1."), std::string::npos)
            << msg;
      } else {
        // "weight <name> has shape [actual], expected [expected]"
        EXPECT_NE(msg.find("weight model."), std::string::npos) << msg;
        EXPECT_NE(msg.find("has shape ["), std::string::npos) << msg;
        EXPECT_NE(msg.find(", expected ["), std::string::npos) << msg;
      }
    }
  }
}

}  // namespace
}  // namespace kvasir
