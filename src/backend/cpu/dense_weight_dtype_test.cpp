#include "backend/cpu/dense_weight_dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "quant/block_formats.h"

namespace kvasir {
namespace {

uint16_t u16_at(const Tensor& t, int i) {
  uint16_t h;
  std::memcpy(&h, static_cast<const uint8_t*>(t.data) + 2 * i, 2);
  return h;
}

TEST(DenseWeightDtype, Float32ToBfloat16RoundsToNearestEven) {
  std::vector<float> w = {1.0f, quant::f32_from_bits(0x3f808000u), quant::f32_from_bits(0x3f818000u),
                          quant::f32_from_bits(0x3f808001u), -2.5f, std::numeric_limits<float>::quiet_NaN()};
  const Tensor t = Tensor::make(w.data(), DType::kF32, {2, 3});
  std::unique_ptr<Buffer> owner;
  auto c = convert_dense_weight(t, DType::kBF16, &owner);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->dtype, DType::kBF16);
  EXPECT_EQ(c->dim(0), 2);
  EXPECT_EQ(c->dim(1), 3);
  EXPECT_EQ(u16_at(*c, 0), 0x3f80);  // exact
  EXPECT_EQ(u16_at(*c, 1), 0x3f80);  // tie, even stays
  EXPECT_EQ(u16_at(*c, 2), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(u16_at(*c, 3), 0x3f81);  // above the tie
  EXPECT_EQ(u16_at(*c, 4), 0xc020);
  EXPECT_TRUE(std::isnan(quant::bf16_to_f32(u16_at(*c, 5))));
}

TEST(DenseWeightDtype, RefusesWhatItDoesNotConvert) {
  std::vector<float> v(8, 1.0f);
  std::unique_ptr<Buffer> owner;
  EXPECT_FALSE(dense_weight_converts(Tensor::make(v.data(), DType::kF32, {8}), DType::kBF16));  // a norm
  EXPECT_FALSE(dense_weight_converts(Tensor::make(v.data(), DType::kF32, {2, 4}), DType::kF32));
  EXPECT_FALSE(dense_weight_converts(Tensor::make(v.data(), DType::kQ8_0, {1, 32}), DType::kBF16));
  EXPECT_FALSE(convert_dense_weight(Tensor::make(v.data(), DType::kF32, {8}), DType::kBF16, &owner).ok());
}

// A CPU backend asked for bf16 weights computes what it computes on a bf16 checkpoint, and keeps
// 1-D weights (norms) in float32.
TEST(DenseWeightDtype, CpuBackendUploadsFloat32MatricesAsBfloat16) {
  const int64_t m = 5, k = 24, n = 3;
  std::vector<float> w(static_cast<size_t>(m * k)), x(static_cast<size_t>(n * k)), norm(k, 0.5f);
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(0.37f * static_cast<float>(i)) * 1.2345f;
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.11f * static_cast<float>(i));
  CpuBackendOptions o;
  o.num_threads = 1;
  o.dense_weight_dtype = DType::kBF16;
  CpuBackend cpu(o), plain(CpuBackendOptions{1});
  std::unique_ptr<Buffer> owner, owner2, owner3;
  auto up = cpu.upload_weight(Tensor::make(w.data(), DType::kF32, {m, k}), &owner);
  ASSERT_TRUE(up.ok());
  EXPECT_EQ(up->dtype, DType::kBF16);
  auto up_norm = cpu.upload_weight(Tensor::make(norm.data(), DType::kF32, {k}), &owner2);
  ASSERT_TRUE(up_norm.ok());
  EXPECT_EQ(up_norm->dtype, DType::kF32);
  EXPECT_EQ(up_norm->data, norm.data());
  std::vector<uint16_t> wb(w.size());
  for (size_t i = 0; i < w.size(); ++i) wb[i] = u16_at(*up, static_cast<int>(i));
  auto ref_w = plain.upload_weight(Tensor::make(wb.data(), DType::kBF16, {m, k}), &owner3);
  ASSERT_TRUE(ref_w.ok());
  std::vector<float> y(static_cast<size_t>(n * m)), y_ref(y.size()), y_f32(y.size());
  const Tensor xt = Tensor::make(x.data(), DType::kF32, {n, k});
  Tensor yt = Tensor::make(y.data(), DType::kF32, {n, m}), yr = Tensor::make(y_ref.data(), DType::kF32, {n, m});
  cpu.linear(xt, *up, nullptr, yt);
  plain.linear(xt, *ref_w, nullptr, yr);
  for (size_t i = 0; i < y.size(); ++i) EXPECT_EQ(quant::bits_from_f32(y[i]), quant::bits_from_f32(y_ref[i])) << i;
  // And it did change the weights: float32 ones give other results.
  Tensor yf = Tensor::make(y_f32.data(), DType::kF32, {n, m});
  plain.linear(xt, Tensor::make(w.data(), DType::kF32, {m, k}), nullptr, yf);
  int differ = 0;
  for (size_t i = 0; i < y.size(); ++i) differ += y[i] != y_f32[i];
  EXPECT_GT(differ, 0);
}

}  // namespace
}  // namespace kvasir
