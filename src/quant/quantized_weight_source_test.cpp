// QuantizedWeightSource over small in-memory checkpoints: each FP8 scheme's weights come out as
// codes times the right scales, scale tensors leave the name list, online FP8 rounds each row to
// e4m3 on its own scale, and every tensor that disagrees with the config is refused naming it.
#include "quant/quantized_weight_source.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>

#include "loader/dummy_weights.h"
#include "quant/fp8.h"

namespace kvasir::quant {
namespace {

// A WeightSource over tensors held in memory.
class MemorySource final : public WeightSource {
 public:
  void add(const std::string& name, DType t, std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
    data_[name] = std::move(bytes);
    WeightTensor w;
    w.name = name;
    w.dtype = t;
    w.shape = std::move(shape);
    w.data = data_[name].data();
    w.nbytes = data_[name].size();
    tensors_[name] = w;
  }
  void add_f32(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
    std::vector<uint8_t> b(v.size() * 4);
    std::memcpy(b.data(), v.data(), b.size());
    add(name, DType::kF32, std::move(shape), std::move(b));
  }
  WeightFormat format() const override { return WeightFormat::kSafetensors; }
  const std::string& path() const override { return path_; }
  std::vector<std::string> tensor_names() const override {
    std::vector<std::string> out;
    for (const auto& [n, t] : tensors_) out.push_back(n);
    return out;
  }
  bool has_tensor(std::string_view name) const override { return tensors_.count(std::string(name)) > 0; }
  StatusOr<WeightTensor> tensor(std::string_view name) const override {
    auto it = tensors_.find(std::string(name));
    if (it == tensors_.end()) return not_found(std::string(name));
    return it->second;
  }

 private:
  std::string path_ = "memory";
  std::map<std::string, std::vector<uint8_t>> data_;
  std::map<std::string, WeightTensor> tensors_;
};

QuantizationConfig parse(const std::string& text) {
  auto j = parse_json(text);
  EXPECT_TRUE(j.ok());
  auto c = parse_quantization_config(*j, "quantization_config");
  EXPECT_TRUE(c.ok()) << c.status().message();
  return c.ok() ? *c : QuantizationConfig{};
}

std::string ct_config(const std::string& weight_strategy, const std::string& activations,
                      const std::string& extra = "") {
  return R"({"quant_method": "compressed-tensors", "format": "float-quantized", "ignore": ["lm_head"],
             "config_groups": {"group_0": {"targets": ["Linear"],
               "weights": {"num_bits": 8, "type": "float", "strategy": ")" +
         weight_strategy + R"(", "symmetric": true, "dynamic": false}, "input_activations": )" + activations +
         "}}" + extra + "}";
}

const char* kStaticTensorActs = R"({"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": false})";
const char* kDynamicTokenActs = R"({"num_bits": 8, "type": "float", "strategy": "token", "dynamic": true})";

// An [out, in] e4m3 weight whose codes are i*in + j mod 0x7e (finite values only).
std::vector<uint8_t> codes(int64_t out, int64_t in) {
  std::vector<uint8_t> c(static_cast<size_t>(out * in));
  for (size_t i = 0; i < c.size(); ++i) c[i] = static_cast<uint8_t>((i * 37) % 0x7e) | (i % 3 == 0 ? 0x80 : 0);
  return c;
}

// A model of one layer: q_proj quantized, a norm, an embedding, lm_head left float.
std::unique_ptr<MemorySource> one_layer(int64_t out, int64_t in, const std::vector<int64_t>& scale_shape,
                                        const std::vector<float>& scales) {
  auto s = std::make_unique<MemorySource>();
  s->add("model.layers.0.self_attn.q_proj.weight", DType::kF8E4M3, {out, in}, codes(out, in));
  s->add_f32("model.layers.0.self_attn.q_proj.weight_scale", scale_shape, scales);
  s->add_f32("model.layers.0.input_layernorm.weight", {in}, std::vector<float>(static_cast<size_t>(in), 1.0f));
  s->add_f32("model.embed_tokens.weight", {4, in}, std::vector<float>(static_cast<size_t>(4 * in), 0.5f));
  s->add_f32("lm_head.weight", {4, in}, std::vector<float>(static_cast<size_t>(4 * in), 0.25f));
  return s;
}

std::vector<float> read_f32(const WeightSource& src, const std::string& name) {
  auto t = src.tensor(name);
  EXPECT_TRUE(t.ok()) << t.status().message();
  if (!t.ok()) return {};
  EXPECT_EQ(t->dtype, DType::kF32);
  std::vector<float> v(static_cast<size_t>(t->num_elements()));
  std::memcpy(v.data(), t->data, v.size() * 4);
  return v;
}

void expect_refused(std::unique_ptr<WeightSource> src, const QuantizationConfig& c, const std::string& needle) {
  auto q = open_quantized_weights(std::move(src), c);
  ASSERT_FALSE(q.ok()) << "expected an error naming " << needle;
  EXPECT_NE(q.status().message().find(needle), std::string::npos) << q.status().message();
}

const char* kQ = "model.layers.0.self_attn.q_proj";

TEST(QuantizedWeightSource, PerChannelScalesMultiplyTheirRows) {
  auto src = one_layer(3, 4, {3, 1}, {0.5f, 2.0f, 0.125f});
  auto q = open_quantized_weights(std::move(src), parse(ct_config("channel", kDynamicTokenActs)));
  ASSERT_TRUE(q.ok()) << q.status().message();
  const std::vector<float> w = read_f32(**q, std::string(kQ) + ".weight");
  const std::vector<uint8_t> c = codes(3, 4);
  const float scales[3] = {0.5f, 2.0f, 0.125f};
  for (int r = 0; r < 3; ++r) {
    for (int j = 0; j < 4; ++j) EXPECT_EQ(w[r * 4 + j], fp8_e4m3_to_f32(c[r * 4 + j]) * scales[r]);
  }
  EXPECT_EQ((*q)->tensor(std::string(kQ) + ".weight")->input_quant.kind, InputQuant::Kind::kDynamicToken);
  EXPECT_EQ((*q)->tensor("lm_head.weight")->input_quant.kind, InputQuant::Kind::kNone);
  EXPECT_FALSE((*q)->has_tensor(std::string(kQ) + ".weight_scale"));
  for (const std::string& n : (*q)->tensor_names()) EXPECT_EQ(n.find("scale"), std::string::npos) << n;
  EXPECT_EQ(read_f32(**q, "lm_head.weight")[0], 0.25f);  // ignored: as stored
  ASSERT_NE(quantized_linears(**q), nullptr);
  EXPECT_EQ(quantized_linears(**q)->size(), 1u);
}

TEST(QuantizedWeightSource, PerTensorStaticKeepsInputScale) {
  auto src = one_layer(2, 4, {1}, {0.75f});
  src->add_f32(std::string(kQ) + ".input_scale", {1}, {0.03f});
  auto q = open_quantized_weights(std::move(src), parse(ct_config("tensor", kStaticTensorActs)));
  ASSERT_TRUE(q.ok()) << q.status().message();
  const std::vector<float> w = read_f32(**q, std::string(kQ) + ".weight");
  EXPECT_EQ(w[5], fp8_e4m3_to_f32(codes(2, 4)[5]) * 0.75f);
  EXPECT_EQ(quantized_linears(**q)->at(kQ).input_scale, 0.03f);
  const InputQuant iq = (*q)->tensor(std::string(kQ) + ".weight")->input_quant;
  EXPECT_EQ(iq.kind, InputQuant::Kind::kStaticTensor);
  EXPECT_EQ(iq.scale, 0.03f);
}

TEST(QuantizedWeightSource, BlockScalesCoverPartialEdgeBlocks) {
  // [5, 8] in 2x4 blocks: 3 x 2 scales, the last row block partial.
  auto src = std::make_unique<MemorySource>();
  src->add("model.layers.0.mlp.down_proj.weight", DType::kF8E4M3, {5, 8}, codes(5, 8));
  std::vector<float> scales = {1, 2, 3, 4, 5, 6};
  src->add_f32("model.layers.0.mlp.down_proj.weight_scale_inv", {3, 2}, scales);
  auto q = open_quantized_weights(std::move(src), parse(R"({"quant_method": "fp8", "weight_block_size": [2, 4]})"));
  ASSERT_TRUE(q.ok()) << q.status().message();
  const std::vector<float> w = read_f32(**q, "model.layers.0.mlp.down_proj.weight");
  const InputQuant iq = (*q)->tensor("model.layers.0.mlp.down_proj.weight")->input_quant;
  EXPECT_EQ(iq.kind, InputQuant::Kind::kDynamicGroup);  // vLLM's per-token groups of the block's columns
  EXPECT_EQ(iq.group_size, 4);
  const std::vector<uint8_t> c = codes(5, 8);
  for (int r = 0; r < 5; ++r) {
    for (int j = 0; j < 8; ++j) EXPECT_EQ(w[r * 8 + j], fp8_e4m3_to_f32(c[r * 8 + j]) * scales[(r / 2) * 2 + j / 4]);
  }
}

TEST(QuantizedWeightSource, OnlineFp8RoundsEachRowOnItsOwnScale) {
  auto src = std::make_unique<MemorySource>();
  const std::vector<float> w = {1.0f, -0.3f, 0.01f, 0.7f, 100.0f, 3.3f, -57.0f, 0.0f, 0, 0, 0, 0};
  src->add_f32("model.layers.0.mlp.up_proj.weight", {3, 4}, w);
  src->add_f32("lm_head.weight", {3, 4}, w);
  auto online = online_quantization("fp8");
  auto q = open_quantized_weights(std::move(src), **online);
  ASSERT_TRUE(q.ok()) << q.status().message();
  const std::vector<float> got = read_f32(**q, "model.layers.0.mlp.up_proj.weight");
  for (int r = 0; r < 3; ++r) {
    float amax = 0;
    for (int j = 0; j < 4; ++j) amax = std::fmax(amax, std::fabs(w[r * 4 + j]));
    const float s = amax / 448.0f;
    for (int j = 0; j < 4; ++j) {
      const float want = s == 0 ? 0.0f : fp8_e4m3_to_f32(f32_to_fp8_e4m3(w[r * 4 + j] / s)) * s;
      EXPECT_EQ(got[r * 4 + j], want) << r << "," << j;
    }
  }
  EXPECT_EQ(got[0], 1.0f);      // the row's largest value is exact
  EXPECT_NE(got[6], -57.0f);    // e4m3 has 3 mantissa bits: 57 / (100/448) = 255.4 rounds to 256
  EXPECT_EQ(read_f32(**q, "lm_head.weight"), w);  // vLLM leaves lm_head alone
}

// Backends that keep FP8 codes (CUDA) read them back from the float32 matrix with these row scales.
void expect_codes_recovered(const WeightSource& src, const std::string& name) {
  const WeightTensor t = *src.tensor(name);
  ASSERT_NE(t.fp8_row_scales, nullptr) << name;
  const std::vector<float> w = read_f32(src, name);
  const int64_t rows = t.shape[0], cols = t.shape[1];
  for (int64_t r = 0; r < rows; ++r) {
    const float s = t.fp8_row_scales[r];
    for (int64_t c = 0; c < cols; ++c) {
      const float v = w[static_cast<size_t>(r * cols + c)];
      const float back = s == 0.0f ? 0.0f : fp8_e4m3_to_f32(f32_to_fp8_e4m3(v / s)) * s;
      EXPECT_EQ(back, v) << name << " [" << r << ", " << c << "]";
    }
  }
}

TEST(QuantizedWeightSource, RowScalesGiveTheCodesBackForPerChannelPerTensorAndOnline) {
  auto channel = open_quantized_weights(one_layer(3, 4, {3, 1}, {0.5f, 2.0f, 0.125f}),
                                        parse(ct_config("channel", kDynamicTokenActs)));
  ASSERT_TRUE(channel.ok()) << channel.status().message();
  expect_codes_recovered(**channel, std::string(kQ) + ".weight");
  EXPECT_EQ((*channel)->tensor(std::string(kQ) + ".weight")->fp8_row_scales[1], 2.0f);
  auto tensor_src = one_layer(2, 4, {1}, {0.75f});
  tensor_src->add_f32(std::string(kQ) + ".input_scale", {1}, {0.03f});
  auto tensor = open_quantized_weights(std::move(tensor_src), parse(ct_config("tensor", kStaticTensorActs)));
  ASSERT_TRUE(tensor.ok()) << tensor.status().message();
  expect_codes_recovered(**tensor, std::string(kQ) + ".weight");
  EXPECT_EQ((*tensor)->tensor(std::string(kQ) + ".weight")->fp8_row_scales[1], 0.75f);
  auto online_src = std::make_unique<MemorySource>();
  online_src->add_f32("model.layers.0.mlp.up_proj.weight", {3, 4},
                      {1.0f, -0.3f, 0.01f, 0.7f, 100.0f, 3.3f, -57.0f, 0.0f, 0, 0, 0, 0});
  auto online = open_quantized_weights(std::move(online_src), **online_quantization("fp8"));
  ASSERT_TRUE(online.ok()) << online.status().message();
  expect_codes_recovered(**online, "model.layers.0.mlp.up_proj.weight");
  EXPECT_EQ((*online)->tensor("model.layers.0.mlp.up_proj.weight")->fp8_row_scales[2], 0.0f);  // all-zero row
  EXPECT_EQ((*channel)->tensor("lm_head.weight")->fp8_row_scales, nullptr);  // not quantized
}

TEST(QuantizedWeightSource, BlockScaledWeightsHaveNoRowScales) {
  auto src = std::make_unique<MemorySource>();
  src->add("model.layers.0.mlp.down_proj.weight", DType::kF8E4M3, {5, 8}, codes(5, 8));
  src->add_f32("model.layers.0.mlp.down_proj.weight_scale_inv", {3, 2}, {1, 2, 3, 4, 5, 6});
  auto q = open_quantized_weights(std::move(src), parse(R"({"quant_method": "fp8", "weight_block_size": [2, 4]})"));
  ASSERT_TRUE(q.ok()) << q.status().message();
  EXPECT_EQ((*q)->tensor("model.layers.0.mlp.down_proj.weight")->fp8_row_scales, nullptr);
}

// --load-format dummy on a GPU: the weights have no host values; online quantization passes them
// through marked as FP8 linears for the device to fill.
TEST(QuantizedWeightSource, OnlineFp8PassesDeviceDummyWeightsThrough) {
  std::vector<DummyTensorSpec> specs(1);
  specs[0].name = "model.layers.0.mlp.up_proj.weight";
  specs[0].dtype = DType::kBF16;
  specs[0].shape = {64, 32};
  specs[0].on_device = true;
  auto dummy = open_dummy_weights(specs, 1, "dummy");
  ASSERT_TRUE(dummy.ok());
  auto q = open_quantized_weights(std::move(*dummy), **online_quantization("fp8"));
  ASSERT_TRUE(q.ok()) << q.status().message();
  auto t = (*q)->tensor("model.layers.0.mlp.up_proj.weight");
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->data, nullptr);
  EXPECT_EQ(t->fp8_row_scales, nullptr);
  EXPECT_EQ(t->input_quant.kind, InputQuant::Kind::kDynamicToken);
  EXPECT_EQ(t->shape, (std::vector<int64_t>{64, 32}));
}

TEST(QuantizedWeightSource, KvCacheScalesAreReadAndChecked) {
  const std::string cfg = ct_config("channel", kDynamicTokenActs,
                                    R"(, "kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": false})");
  auto make = [&](bool with_v) {
    auto s = one_layer(3, 4, {3, 1}, {1, 1, 1});
    s->add("model.layers.0.self_attn.k_proj.weight", DType::kF8E4M3, {3, 4}, codes(3, 4));
    s->add_f32("model.layers.0.self_attn.k_proj.weight_scale", {3, 1}, {1, 1, 1});
    s->add_f32("model.layers.0.self_attn.k_scale", {}, {0.5f});
    if (with_v) s->add_f32("model.layers.0.self_attn.v_scale", {}, {0.25f});
    return s;
  };
  auto q = open_quantized_weights(make(true), parse(cfg));
  ASSERT_TRUE(q.ok()) << q.status().message();
  const auto& kv = kv_cache_scales(**q)->at("model.layers.0.self_attn");
  EXPECT_EQ(kv.k_scale, 0.5f);
  EXPECT_EQ(kv.v_scale, 0.25f);
  EXPECT_FALSE((*q)->has_tensor("model.layers.0.self_attn.k_scale"));
  expect_refused(make(false), parse(cfg), "model.layers.0.self_attn.v_scale");
  expect_refused(make(true), parse(ct_config("channel", kDynamicTokenActs)), "no kv_cache_scheme");
}

// vLLM's other names: ModelOpt's k_proj.k_scale / v_proj.v_scale, the deprecated kv_scale (both
// scales); a scale named twice is refused.
TEST(QuantizedWeightSource, KvCacheScalesUnderModelOptAndDeprecatedNames) {
  const std::string cfg = ct_config("channel", kDynamicTokenActs,
                                    R"(, "kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": false})");
  auto make = [&](std::vector<std::pair<std::string, float>> scales) {
    auto s = one_layer(3, 4, {3, 1}, {1, 1, 1});
    s->add("model.layers.0.self_attn.k_proj.weight", DType::kF8E4M3, {3, 4}, codes(3, 4));
    s->add_f32("model.layers.0.self_attn.k_proj.weight_scale", {3, 1}, {1, 1, 1});
    for (const auto& [name, v] : scales) s->add_f32("model.layers.0.self_attn." + name, {}, {v});
    return s;
  };
  auto q = open_quantized_weights(make({{"k_proj.k_scale", 0.5f}, {"v_proj.v_scale", 2.0f}}), parse(cfg));
  ASSERT_TRUE(q.ok()) << q.status().message();
  auto kv = kv_cache_scales(**q)->at("model.layers.0.self_attn");
  EXPECT_EQ(kv.k_scale, 0.5f);
  EXPECT_EQ(kv.v_scale, 2.0f);
  EXPECT_FALSE((*q)->has_tensor("model.layers.0.self_attn.k_proj.k_scale"));
  q = open_quantized_weights(make({{"kv_scale", 0.125f}}), parse(cfg));
  ASSERT_TRUE(q.ok()) << q.status().message();
  kv = kv_cache_scales(**q)->at("model.layers.0.self_attn");
  EXPECT_EQ(kv.k_scale, 0.125f);
  EXPECT_EQ(kv.v_scale, 0.125f);
  expect_refused(make({{"kv_scale", 0.125f}, {"k_scale", 0.5f}}), parse(cfg), "under two names");
  expect_refused(make({{"k_proj.k_scale", 0.5f}}), parse(cfg), "model.layers.0.self_attn.v_scale");
}

TEST(QuantizedWeightSource, TensorsThatDisagreeWithTheConfigAreRefused) {
  const QuantizationConfig channel = parse(ct_config("channel", kDynamicTokenActs));
  // Scale shape for the strategy.
  expect_refused(one_layer(3, 4, {1}, {1}), channel, "must be [3, 1] or [3]");
  expect_refused(one_layer(3, 4, {3, 1}, {1, 1, 1}), parse(ct_config("tensor", kDynamicTokenActs)), "[] or [1]");
  // Scale values.
  expect_refused(one_layer(3, 4, {3, 1}, {1, NAN, 1}), channel, "finite");
  expect_refused(one_layer(3, 4, {3, 1}, {1, -2, 1}), channel, "not negative");
  // Missing scale, orphan scale, scale dtype.
  {
    auto s = std::make_unique<MemorySource>();
    s->add("model.layers.0.self_attn.q_proj.weight", DType::kF8E4M3, {3, 4}, codes(3, 4));
    expect_refused(std::move(s), channel, "has no scale tensor");
  }
  {
    auto s = one_layer(3, 4, {3, 1}, {1, 1, 1});
    s->add_f32("model.layers.0.mlp.gate_proj.weight_scale", {1}, {1});
    expect_refused(std::move(s), channel, "gate_proj.weight_scale is in the checkpoint");
  }
  {
    auto s = one_layer(3, 4, {3, 1}, {1, 1, 1});
    s->add("model.layers.0.self_attn.q_proj.weight_scale", DType::kI32, {3, 1}, std::vector<uint8_t>(12));
    expect_refused(std::move(s), channel, "is i32");
  }
  // Static activations need their input scale, dynamic ones must not have one.
  expect_refused(one_layer(3, 4, {3, 1}, {1, 1, 1}), parse(ct_config("channel", kStaticTensorActs)), "needs " + std::string(kQ) + ".input_scale");
  {
    auto s = one_layer(3, 4, {3, 1}, {1, 1, 1});
    s->add_f32(std::string(kQ) + ".input_scale", {1}, {0.1f});
    expect_refused(std::move(s), channel, "activations are dynamic");
  }
  {
    auto s = one_layer(3, 4, {3, 1}, {1, 1, 1});
    s->add_f32(std::string(kQ) + ".input_scale", {1}, {0.0f});
    expect_refused(std::move(s), parse(ct_config("channel", kStaticTensorActs)), "finite and positive");
  }
  // An FP8 weight the config ignores; a float linear the config quantizes.
  {
    auto s = one_layer(3, 4, {3, 1}, {1, 1, 1});
    s->add("lm_head.weight", DType::kF8E4M3, {4, 4}, codes(4, 4));
    expect_refused(std::move(s), channel, "ignores or does not target lm_head");
  }
  {
    auto s = one_layer(3, 4, {3, 1}, {1, 1, 1});
    s->add_f32("model.layers.0.mlp.up_proj.weight", {3, 4}, std::vector<float>(12, 1.0f));
    expect_refused(std::move(s), channel, "quantizes model.layers.0.mlp.up_proj");
  }
  // Block scales: count per block, and the fp8 format's names only.
  {
    auto s = std::make_unique<MemorySource>();
    s->add("model.layers.0.mlp.down_proj.weight", DType::kF8E4M3, {5, 8}, codes(5, 8));
    s->add_f32("model.layers.0.mlp.down_proj.weight_scale_inv", {2, 2}, {1, 1, 1, 1});
    expect_refused(std::move(s), parse(R"({"quant_method": "fp8", "weight_block_size": [2, 4]})"), "must be [3, 2]");
  }
  {
    // Activations are quantized in groups of the block's columns, which must tile the input.
    auto s = std::make_unique<MemorySource>();
    s->add("model.layers.0.mlp.down_proj.weight", DType::kF8E4M3, {5, 6}, codes(5, 6));
    s->add_f32("model.layers.0.mlp.down_proj.weight_scale_inv", {3, 2}, {1, 1, 1, 1, 1, 1});
    expect_refused(std::move(s), parse(R"({"quant_method": "fp8", "weight_block_size": [2, 4]})"), "activation group size 4");
  }
  {
    auto s = one_layer(3, 4, {3, 1}, {1, 1, 1});
    s->add_f32(std::string(kQ) + ".weight_scale_inv", {3, 1}, {1, 1, 1});
    expect_refused(std::move(s), channel, "weight_scale_inv");
  }
  // A GGUF file is quantized by its own types.
  auto online = online_quantization("fp8");
  class GgufLike final : public WeightSource {
   public:
    WeightFormat format() const override { return WeightFormat::kGguf; }
    const std::string& path() const override { return p_; }
    std::vector<std::string> tensor_names() const override { return {}; }
    bool has_tensor(std::string_view) const override { return false; }
    StatusOr<WeightTensor> tensor(std::string_view n) const override { return not_found(std::string(n)); }
    std::string p_ = "m.gguf";
  };
  expect_refused(std::make_unique<GgufLike>(), **online, "GGUF");
}

}  // namespace
}  // namespace kvasir::quant
