// CpuBackend::linears (one grouped region, activations quantized once for all targets) gives every
// target exactly what linear gives it: batch sizes on the GGUF in-place path (1) and on panels
// (3, 64), biases on some targets, targets of different weight types (run one linear each), and
// the exact mode.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/quant/quant_test_util.h"
#include "backend/tensor.h"

namespace kvasir {
namespace {

struct Weight {
  std::vector<uint8_t> bytes;
  std::unique_ptr<Buffer> owner;
  Tensor t;
};

Weight upload(CpuBackend& cpu, DType type, int64_t m, int64_t k, std::mt19937& rng) {
  Weight w;
  w.bytes = cpu::testing::random_weights(type, m, k, rng);
  auto t = cpu.upload_weight(Tensor::make(w.bytes.data(), type, {m, k}), &w.owner);
  EXPECT_TRUE(t.ok());
  w.t = *t;
  return w;
}

void check(MatmulPrecision precision, DType second_type) {
  const int64_t k = 256;
  const int64_t ms[] = {96, 32, 32};
  std::mt19937 rng(21);
  CpuBackend cpu(CpuBackendOptions{2, precision});
  Weight ws[3] = {upload(cpu, DType::kQ4_1, ms[0], k, rng), upload(cpu, second_type, ms[1], k, rng),
                  upload(cpu, DType::kQ4_1, ms[2], k, rng)};
  std::vector<float> bias = cpu::testing::random_floats(static_cast<size_t>(ms[1]), rng);
  const Tensor bt = Tensor::make(bias.data(), DType::kF32, {ms[1]});
  for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{64}}) {
    std::vector<float> x = cpu::testing::random_floats(static_cast<size_t>(n * k), rng);
    const Tensor xt = Tensor::make(x.data(), DType::kF32, {n, k});
    std::vector<std::vector<float>> got(3), want(3);
    Tensor outs[3];
    Backend::LinearTarget targets[3];
    for (int i = 0; i < 3; ++i) {
      got[static_cast<size_t>(i)].assign(static_cast<size_t>(n * ms[i]), -1.0f);
      want[static_cast<size_t>(i)].assign(static_cast<size_t>(n * ms[i]), -2.0f);
      outs[i] = Tensor::make(got[static_cast<size_t>(i)].data(), DType::kF32, {n, ms[i]});
      targets[i] = {&ws[i].t, i == 1 ? &bt : nullptr, &outs[i]};
      Tensor ref = Tensor::make(want[static_cast<size_t>(i)].data(), DType::kF32, {n, ms[i]});
      cpu.linear(xt, ws[i].t, i == 1 ? &bt : nullptr, ref);
    }
    cpu.linears(xt, targets, 3);
    for (int i = 0; i < 3; ++i) {
      const auto& g = got[static_cast<size_t>(i)];
      const auto& w = want[static_cast<size_t>(i)];
      ASSERT_EQ(std::memcmp(g.data(), w.data(), g.size() * sizeof(float)), 0) << "n=" << n << " target " << i;
    }
  }
}

TEST(CpuLinears, SharedInputEqualsOneLinearPerTarget) { check(MatmulPrecision::kFast, DType::kQ4_1); }
TEST(CpuLinears, MixedWeightTypesEqualOneLinearPerTarget) { check(MatmulPrecision::kFast, DType::kQ8_0); }
TEST(CpuLinears, ExactModeEqualsOneLinearPerTarget) { check(MatmulPrecision::kExact, DType::kQ4_1); }

}  // namespace
}  // namespace kvasir
