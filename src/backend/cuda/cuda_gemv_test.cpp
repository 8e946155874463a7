// The small-batch GEMVs (2-8 tokens) against the CPU, on both paths (tensor cores and CUDA cores,
// KVASIR_GEMV_TC_MIN_ROWS picks), over shapes that exercise each column split of the tensor-core
// kernel (row groups from 16 to thousands, columns not a multiple of its 128-column round), and
// the tensor-core path's promise: a token's result does not depend on how many tokens ran with it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cuda/cuda_ops_test_fixture.h"
#include "backend/cuda/cuda_tuning.h"

namespace kvasir {
namespace {

using cuda_test::CudaOps;
using cuda_test::DeviceTensor;
using cuda_test::host_tensor;
using cuda_test::random_values;
using cuda_test::read_back;
using cuda_test::rel_l2;

struct GemvCase {
  int n;
  int64_t k, m;
  bool bias, f32_out;
};

TEST_F(CudaOps, SmallBatchGemvMatchesCpuOnEitherPath) {
  std::printf("tensor-core GEMV from %d tokens\n", cuda::kernel_tuning().gemv_tc_min_rows);
  for (const GemvCase c : {GemvCase{2, 4096, 1024, false, false}, {5, 4104, 4096, true, false},
                           {8, 14336, 256, false, true}, {5, 576, 1536, true, false}, {3, 256, 40000, false, true},
                           {7, 64, 16, true, true}, {4, 1000, 96, false, false}, {6, 2048, 100, true, false}}) {
    EXPECT_LT(linear_error(c.n, c.k, c.m, c.bias, c.f32_out), c.f32_out ? 1e-4 : 1e-2)
        << c.n << "x" << c.k << " -> " << c.m << (c.bias ? " bias" : "");
  }
}

// Two tokens alone, then the same two among eight: their outputs are bit-equal on the tensor-core
// path (plain projection and gate/up with the activation).
TEST_F(CudaOps, TensorCoreGemvTokensDoNotDependOnTheirBatch) {
  if (cuda::kernel_tuning().gemv_tc_min_rows > 2) GTEST_SKIP() << "KVASIR_GEMV_TC_MIN_ROWS > 2";
  const int64_t k = 4096, m = 2048;
  auto x8 = random_values(rng_, static_cast<size_t>(8) * k);
  std::vector<float> x2(x8.begin(), x8.begin() + 2 * k);
  auto w = random_values(rng_, static_cast<size_t>(m) * k, 1.0f / 64.0f);
  auto wu = random_values(rng_, static_cast<size_t>(m) * k, 1.0f / 64.0f);
  Tensor wg = upload(w, {m, k}), wug = upload(wu, {m, k});
  std::vector<float> out[2], gated[2];
  int i = 0;
  for (auto* x : {&x2, &x8}) {
    const int n = x == &x2 ? 2 : 8;
    DeviceTensor xg(DType::kBF16, {n, k});
    xg.set(*x);
    DeviceTensor y(DType::kF32, {n, m});
    gpu_->linear(xg.t, wg, nullptr, y.t);
    out[i] = read_back(*gpu_, y.t);
    DeviceTensor gate(DType::kBF16, {n, m}), up(DType::kBF16, {n, m});
    gpu_->linear(xg.t, wg, nullptr, gate.t);
    gpu_->linear(xg.t, wug, nullptr, up.t);
    gpu_->gated_activation(gate.t, up.t, GateActivation::kSilu, gate.t);
    gated[i] = read_back(*gpu_, gate.t);
    ++i;
  }
  EXPECT_EQ(std::memcmp(out[0].data(), out[1].data(), 2 * m * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(gated[0].data(), gated[1].data(), 2 * m * sizeof(float)), 0);
}

}  // namespace
}  // namespace kvasir
