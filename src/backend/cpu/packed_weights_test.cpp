#include "backend/cpu/packed_weights.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/quant/quant_test_util.h"
#include "backend/tensor.h"

namespace kvasir {
namespace {

std::unique_ptr<cpu::PackedQ32> panel_of(const std::vector<uint8_t>& w, int64_t m, int64_t k) {
  return cpu::PackedQ32::pack(w.data(), DType::kQ8_0, m, k);
}

TEST(PackedWeights, APanelLivesAsLongAsItsOwner) {
  std::mt19937 rng(7);
  const auto w = cpu::testing::random_weights(DType::kQ8_0, 16, 64, rng);
  auto registry = std::make_shared<cpu::PackedWeights>();
  auto owner = cpu::PackedWeights::add(registry, w.data(), panel_of(w, 16, 64));
  ASSERT_NE(registry->find(w.data()), nullptr);
  EXPECT_EQ(registry->find(w.data())->m(), 16);
  owner.reset();
  EXPECT_EQ(registry->find(w.data()), nullptr);
  EXPECT_TRUE(registry->empty());
}

// A weight freed after another took its address must not remove the newer one's panel.
TEST(PackedWeights, AnOlderOwnerDoesNotRemoveANewerPanelAtTheSameAddress) {
  std::mt19937 rng(8);
  const auto w = cpu::testing::random_weights(DType::kQ8_0, 32, 64, rng);
  auto registry = std::make_shared<cpu::PackedWeights>();
  auto older = cpu::PackedWeights::add(registry, w.data(), panel_of(w, 16, 64));
  auto newer = cpu::PackedWeights::add(registry, w.data(), panel_of(w, 32, 64));
  older.reset();
  ASSERT_NE(registry->find(w.data()), nullptr);
  EXPECT_EQ(registry->find(w.data())->m(), 32);
}

// The owner may outlive the backend (a model freed after its backend).
TEST(PackedWeights, OwnerOutlivesTheBackend) {
  std::mt19937 rng(9);
  const auto w = cpu::testing::random_weights(DType::kQ8_0, 16, 64, rng);
  std::unique_ptr<Buffer> owner;
  {
    CpuBackend cpu(CpuBackendOptions{1});
    auto t = cpu.upload_weight(Tensor::make(const_cast<uint8_t*>(w.data()), DType::kQ8_0, {16, 64}), &owner);
    ASSERT_TRUE(t.ok());
  }
  owner.reset();  // must not touch the destroyed backend
}

// The bug this guards: weights freed and new ones of the same type and shape loaded at the same
// address; a batched matmul must read the new weights, not the panel of the old ones.
TEST(PackedWeights, BatchedMatmulReadsTheWeightNowAtAReusedAddress) {
  const int64_t m = 48, k = 128, n = 4;
  std::mt19937 rng(10);
  const auto first = cpu::testing::random_weights(DType::kQ8_0, m, k, rng);
  const auto second = cpu::testing::random_weights(DType::kQ8_0, m, k, rng);
  const auto xs = cpu::testing::random_floats(static_cast<size_t>(n * k), rng);
  std::vector<uint8_t> storage(first.size());
  std::vector<float> x(xs), got(static_cast<size_t>(n * m)), want(got.size());
  const Tensor xt = Tensor::make(x.data(), DType::kF32, {n, k});

  CpuBackend cpu(CpuBackendOptions{1});
  std::memcpy(storage.data(), first.data(), first.size());
  std::unique_ptr<Buffer> owner;
  ASSERT_TRUE(cpu.upload_weight(Tensor::make(storage.data(), DType::kQ8_0, {m, k}), &owner).ok());
  owner.reset();  // the model holding the first weights is gone
  std::memcpy(storage.data(), second.data(), second.size());
  auto w = cpu.upload_weight(Tensor::make(storage.data(), DType::kQ8_0, {m, k}), &owner);
  ASSERT_TRUE(w.ok());
  Tensor out = Tensor::make(got.data(), DType::kF32, {n, m});
  cpu.linear(xt, *w, nullptr, out);

  CpuBackend fresh(CpuBackendOptions{1});
  std::vector<uint8_t> copy(second);
  std::unique_ptr<Buffer> fresh_owner;
  auto fw = fresh.upload_weight(Tensor::make(copy.data(), DType::kQ8_0, {m, k}), &fresh_owner);
  ASSERT_TRUE(fw.ok());
  Tensor ref = Tensor::make(want.data(), DType::kF32, {n, m});
  fresh.linear(xt, *fw, nullptr, ref);
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace kvasir
