// FP8 W8A8 linears on the CUDA backend against the CPU backend's FP8 linear (a float32 matrix of
// codes x scales, its input rounded to e4m3 by quant/fp8_activations.h) on many shapes: batch
// 1..8 through the FP8 GEMV (bf16 activations), larger through activation quantization + cuBLASLt's
// FP8 GEMM + the scaling epilogue; per-tensor and per-channel weight scales, static and dynamic
// activation scales, biases, merged projections of one input, dummy FP8 weights. Skips without a GPU.
//
// Bounds, from FP8 and bf16 rounding (u = 2^-8, bf16's unit roundoff: 8 bits of precision):
// - GEMM path: the device quantizes activations with the same float32 division and rounding as the
//   CPU, and e4m3 x e4m3 products are exact in float32, so the two differ only by the summation
//   order and two bf16 roundings (the unscaled GEMM output, then the scaled result):
//   |gpu - cpu| <= 2u (|cpu - bias| + |cpu|) + 2^-12 sum|w x|. The last term is the tensor cores':
//   Hopper's FP8 MMA keeps about 14 bits while it accumulates (DeepSeek-V3 report, 3.3.2) before
//   cuBLASLt promotes partial sums to float32. A wrong code, scale or row still fails by far: an
//   output's own size is about sum|w x| / sqrt(k), 2^-7 sum|w x| or more here.
// - GEMV path: the same weights times unrounded bf16 activations, so against the CPU with its input
//   quantization off: |gpu - cpu| <= u |cpu| + 1e-5 sum|w x|; against the W8A8 reference the
//   activation rounding adds at most sum_k |w_k| (2^-4 |x_k| + 2^-10 s_x) (e4m3: 3 mantissa bits;
//   subnormal step 2^-9 of the scale), checked too so the paths agree with each other.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_ops_test_fixture.h"
#include "backend/cuda/fp8_gemm.h"
#include "backend/cuda/fp8_kernels.h"
#include "quant/fp8.h"

namespace kvasir {
namespace {

using cuda_test::CudaOps;
using cuda_test::DeviceTensor;
using cuda_test::host_tensor;
using cuda_test::random_values;
using cuda_test::read_back;

constexpr double kU = 1.0 / 256;  // bf16 unit roundoff

// A random FP8 linear: codes over the whole e4m3 range (no NaN), its row scales, and the float32
// matrix codes x scales the CPU multiplies with.
struct Fp8Weight {
  std::vector<float> dense;   // [m, k]
  std::vector<float> scales;  // [m]
};

Fp8Weight random_fp8_weight(std::mt19937& rng, int64_t m, int64_t k, bool per_channel) {
  Fp8Weight w;
  w.dense.resize(static_cast<size_t>(m * k));
  w.scales.resize(static_cast<size_t>(m));
  std::uniform_real_distribution<float> sd(0.5f, 2.0f);
  const float base = 1.0f / (448.0f * std::sqrt(static_cast<float>(k)));
  const float tensor_scale = base * sd(rng);
  for (int64_t r = 0; r < m; ++r) w.scales[static_cast<size_t>(r)] = per_channel ? base * sd(rng) : tensor_scale;
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      uint8_t code = static_cast<uint8_t>(rng() & 0xff);
      if ((code & 0x7f) == 0x7f) code ^= 1;  // 0x7f / 0xff are NaN in e4m3fn
      w.dense[static_cast<size_t>(r * k + c)] = quant::fp8_e4m3_to_f32(code) * w.scales[static_cast<size_t>(r)];
    }
  }
  return w;
}

Tensor fp8_host(Fp8Weight& w, int64_t m, int64_t k, InputQuant q) {
  Tensor t = host_tensor(w.dense, {m, k});
  t.input_quant = q;
  t.weight_scales = w.scales.data();
  return t;
}

InputQuant dynamic_token() {
  InputQuant q;
  q.kind = InputQuant::Kind::kDynamicToken;
  return q;
}

InputQuant static_tensor(float scale) {
  InputQuant q;
  q.kind = InputQuant::Kind::kStaticTensor;
  q.scale = scale;
  return q;
}

class CudaFp8 : public CudaOps {
 protected:
  Tensor upload_fp8(Fp8Weight& w, int64_t m, int64_t k, InputQuant q) {
    std::unique_ptr<Buffer> owner;
    auto t = gpu_->upload_weight(fp8_host(w, m, k, q), &owner);
    EXPECT_TRUE(t.ok()) << t.status().message();
    owned_.push_back(std::move(owner));
    t->input_quant = q;  // as the weight binder does after every upload
    return *t;
  }
  // out = x · w^T (+ bias) on the CPU backend, with the weight's input quantization.
  std::vector<float> cpu_linear(std::vector<float>& x, int n, int k, std::vector<float>& w, int m, InputQuant q,
                                std::vector<float>* bias) {
    std::vector<float> out(static_cast<size_t>(n) * m);
    Tensor wt = host_tensor(w, {m, k});
    wt.input_quant = q;
    Tensor ot = host_tensor(out, {n, m});
    Tensor bt = bias != nullptr ? host_tensor(*bias, {m}) : Tensor{};
    cpu_->linear(host_tensor(x, {n, k}), wt, bias != nullptr ? &bt : nullptr, ot);
    return out;
  }
  // sum_k |w_rk| |x_tk| and sum_k |w_rk| for the bounds.
  std::vector<float> abs_dot(std::vector<float>& x, int n, int k, std::vector<float>& w, int m) {
    std::vector<float> ax(x.size()), aw(w.size());
    for (size_t i = 0; i < x.size(); ++i) ax[i] = std::fabs(x[i]);
    for (size_t i = 0; i < w.size(); ++i) aw[i] = std::fabs(w[i]);
    return cpu_linear(ax, n, k, aw, m, InputQuant{}, nullptr);
  }
};

struct Case {
  int n, k, m;
  bool per_channel, bias;
  float static_scale;  // 0: dynamic per token
};

std::string name_of(const Case& c) {
  return std::to_string(c.n) + "x" + std::to_string(c.k) + " -> " + std::to_string(c.m) +
         (c.per_channel ? " per-channel" : " per-tensor") + (c.bias ? " bias" : "") +
         (c.static_scale > 0 ? " static input" : " dynamic input");
}

TEST_F(CudaFp8, LinearMatchesCpuFp8Linear) {
  const std::vector<Case> cases = {
      {1, 64, 96, true, false, 0}, {1, 4096, 1024, true, true, 0}, {1, 4096, 14336, true, false, 0},
      {1, 14336, 4096, false, false, 0}, {2, 160, 64, false, true, 0.01f}, {3, 1024, 4096, true, false, 0},
      {5, 512, 6144, true, false, 0}, {8, 4096, 1024, false, true, 0}, {8, 14336, 512, true, false, 0.02f},
      {9, 512, 384, true, false, 0}, {16, 64, 14336, true, true, 0}, {17, 14336, 256, false, false, 0},
      {64, 4096, 1024, true, false, 0}, {64, 1024, 4096, true, true, 0.02f}, {130, 256, 1000 + 24, false, true, 0},
      {300, 1024, 640, true, false, 0}, {300, 64, 64, false, false, 0.05f}, {257, 4096, 128, true, true, 0}};
  for (const Case& c : cases) {
    SCOPED_TRACE(name_of(c));
    const InputQuant q = c.static_scale > 0 ? static_tensor(c.static_scale) : dynamic_token();
    auto x = random_values(rng_, static_cast<size_t>(c.n) * c.k);
    Fp8Weight w = random_fp8_weight(rng_, c.m, c.k, c.per_channel);
    auto b = random_values(rng_, static_cast<size_t>(c.m));
    DeviceTensor xg(DType::kBF16, {c.n, c.k});
    xg.set(x);
    Tensor wg = upload_fp8(w, c.m, c.k, q);
    ASSERT_EQ(wg.dtype, DType::kF8E4M3) << "an FP8 linear must stay FP8 on the device";
    Tensor bg = upload(b, {c.m});
    DeviceTensor out(DType::kBF16, {c.n, c.m});
    gpu_->linear(xg.t, wg, c.bias ? &bg : nullptr, out.t);
    const std::vector<float> got = read_back(*gpu_, out.t);
    const std::vector<float> w8a8 = cpu_linear(x, c.n, c.k, w.dense, c.m, q, c.bias ? &b : nullptr);
    const std::vector<float> a16 = cpu_linear(x, c.n, c.k, w.dense, c.m, InputQuant{}, c.bias ? &b : nullptr);
    const std::vector<float> sum_wx = abs_dot(x, c.n, c.k, w.dense, c.m);
    std::vector<float> ones(x.size(), 1.0f);
    const std::vector<float> sum_w = abs_dot(ones, c.n, c.k, w.dense, c.m);
    const bool gemv = c.n <= 8;
    int bad = 0;
    for (int t = 0; t < c.n && bad < 5; ++t) {
      float amax = 0.0f;
      for (int i = 0; i < c.k; ++i) amax = std::max(amax, std::fabs(x[static_cast<size_t>(t) * c.k + i]));
      const double s_x = c.static_scale > 0 ? c.static_scale : amax / 448.0;
      for (int r = 0; r < c.m && bad < 5; ++r) {
        const size_t i = static_cast<size_t>(t) * c.m + r;
        const double bias = c.bias ? b[static_cast<size_t>(r)] : 0.0;
        const double acc = (gemv ? 1e-5 : 1.0 / 4096) * sum_wx[i];
        const double act = sum_wx[i] / 16.0 + sum_w[i] * s_x / 1024.0;
        const double tight = gemv ? kU * std::fabs(a16[i]) + acc
                                  : 2 * kU * (std::fabs(w8a8[i] - bias) + std::fabs(w8a8[i])) + acc;
        const double ref = gemv ? a16[i] : w8a8[i];
        if (!(std::fabs(got[i] - ref) <= tight)) {
          ADD_FAILURE() << "token " << t << " row " << r << ": " << got[i] << " vs " << ref << " (bound " << tight << ")";
          ++bad;
        }
        if (!(std::fabs(got[i] - w8a8[i]) <= tight + act + kU * std::fabs(w8a8[i]))) {
          ADD_FAILURE() << "token " << t << " row " << r << ": " << got[i] << " vs W8A8 " << w8a8[i];
          ++bad;
        }
      }
    }
  }
}

// The GEMM's two ways of applying the scales: cuBLASLt's outer-vector scaling (what linear() uses
// where available) and the unscaled product + scaling epilogue (the fallback), each against the
// CPU's W8A8 linear, so the path a GPU does not take in linear() is tested too.
TEST_F(CudaFp8, GemmScalesInsideAndInTheEpilogueMatchCpu) {
  const int n = 40, k = 2048, m = 512;
  auto x = random_values(rng_, static_cast<size_t>(n) * k);
  Fp8Weight w = random_fp8_weight(rng_, m, k, true);
  Tensor wg = upload_fp8(w, m, k, dynamic_token());
  DeviceTensor xg(DType::kBF16, {n, k}), xs(DType::kF32, {n}), out(DType::kBF16, {n, m});
  xg.set(x);
  void* xq = nullptr;
  ASSERT_EQ(cudaMalloc(&xq, static_cast<size_t>(n) * k), cudaSuccess);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  cuda::launch_quantize_fp8_rows(xg.t.data, n, k, 0.0f, xq, static_cast<float*>(xs.t.data), s);
  const std::vector<float> ref = cpu_linear(x, n, k, w.dense, m, dynamic_token(), nullptr);
  cuda::Fp8GemmRunner runner;
  for (bool inside : {true, false}) {
    SCOPED_TRACE(inside ? "outer-vector scaling" : "epilogue");
    if (inside && !runner.run_scaled(xq, wg.data, static_cast<float*>(xs.t.data), wg.weight_scales, out.t.data, n, m,
                                     k, s)) {
      std::printf("cuBLASLt outer-vector scaling unavailable here: only the epilogue is checked\n");
      continue;
    }
    if (!inside) {
      runner.run(xq, wg.data, out.t.data, n, m, k, s);
      cuda::launch_fp8_scale_rows_cols(out.t.data, static_cast<float*>(xs.t.data), wg.weight_scales, nullptr, n, m, s);
    }
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    std::vector<uint16_t> h(static_cast<size_t>(n) * m);
    ASSERT_EQ(cudaMemcpy(h.data(), out.t.data, h.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    std::vector<float> got(h.size());
    for (size_t i = 0; i < h.size(); ++i) got[i] = cuda_test::bf16_bits_to_f32(h[i]);
    EXPECT_LT(cuda_test::rel_l2(got, ref), 4 * kU);
  }
  cudaStreamDestroy(s);
  cudaFree(xq);
}

// q/k/v and gate/up: projections of one input merge into one record; each output is its own.
TEST_F(CudaFp8, MergedProjectionsOfOneInputEachMatchCpu) {
  for (int n : {1, 4, 40}) {
    SCOPED_TRACE("rows " + std::to_string(n));
    const int k = 512;
    const std::vector<int> ms = {512, 128, 128};
    auto x = random_values(rng_, static_cast<size_t>(n) * k);
    DeviceTensor xg(DType::kBF16, {n, k});
    xg.set(x);
    std::vector<Fp8Weight> ws;
    std::vector<std::unique_ptr<DeviceTensor>> outs;
    for (int m : ms) {
      ws.push_back(random_fp8_weight(rng_, m, k, true));
      outs.push_back(std::make_unique<DeviceTensor>(DType::kBF16, std::initializer_list<int64_t>{n, m}));
    }
    for (size_t p = 0; p < ms.size(); ++p) {
      Tensor wg = upload_fp8(ws[p], ms[p], k, dynamic_token());
      gpu_->linear(xg.t, wg, nullptr, outs[p]->t);
    }
    for (size_t p = 0; p < ms.size(); ++p) {
      const std::vector<float> got = read_back(*gpu_, outs[p]->t);
      const InputQuant q = n <= 8 ? InputQuant{} : dynamic_token();
      const std::vector<float> ref = cpu_linear(x, n, k, ws[p].dense, ms[p], q, nullptr);
      EXPECT_LT(cuda_test::rel_l2(got, ref), 4 * kU) << "projection " << p;
    }
  }
}

// gate/up then the gated activation in place: folded into the FP8 GEMV's epilogue up to 8 rows,
// separate ops above; either way out and up match the CPU's linear + gated_activation.
TEST_F(CudaFp8, GateUpWithActivationMatchesCpu) {
  const int k = 1024, m = 2048;
  for (GateActivation act : {GateActivation::kSilu, GateActivation::kGeluTanh}) {
    for (int n : {1, 3, 8, 20}) {
      SCOPED_TRACE("rows " + std::to_string(n) + (act == GateActivation::kSilu ? " silu" : " gelu_tanh"));
      auto x = random_values(rng_, static_cast<size_t>(n) * k);
      Fp8Weight wg = random_fp8_weight(rng_, m, k, true), wu = random_fp8_weight(rng_, m, k, true);
      DeviceTensor xg(DType::kBF16, {n, k}), gate(DType::kBF16, {n, m}), up(DType::kBF16, {n, m});
      xg.set(x);
      Tensor tg = upload_fp8(wg, m, k, dynamic_token()), tu = upload_fp8(wu, m, k, dynamic_token());
      gpu_->linear(xg.t, tg, nullptr, gate.t);
      gpu_->linear(xg.t, tu, nullptr, up.t);
      gpu_->gated_activation(gate.t, up.t, act, gate.t);
      const std::vector<float> got_out = read_back(*gpu_, gate.t), got_up = read_back(*gpu_, up.t);
      const InputQuant q = n <= 8 ? InputQuant{} : dynamic_token();
      std::vector<float> rg = cpu_linear(x, n, k, wg.dense, m, q, nullptr);
      std::vector<float> ru = cpu_linear(x, n, k, wu.dense, m, q, nullptr);
      std::vector<float> ro(rg.size());
      Tensor og = host_tensor(rg, {n, m}), ou = host_tensor(ru, {n, m}), oo = host_tensor(ro, {n, m});
      cpu_->gated_activation(og, ou, act, oo);
      EXPECT_LT(cuda_test::rel_l2(got_up, ru), 4 * kU);
      EXPECT_LT(cuda_test::rel_l2(got_out, ro), 4 * kU);
    }
  }
}

// An all-zero weight row has scale 0 (online quantization of a zero row): its outputs are 0 (+ bias),
// never NaN from 0 / 0.
TEST_F(CudaFp8, ZeroScaleRowsGiveZeros) {
  const int n = 2, k = 256, m = 32;
  Fp8Weight w = random_fp8_weight(rng_, m, k, true);
  for (int c = 0; c < k; ++c) w.dense[static_cast<size_t>(5 * k + c)] = 0.0f;
  w.scales[5] = 0.0f;
  auto x = random_values(rng_, static_cast<size_t>(n) * k);
  for (int rows : {n, 20}) {
    std::vector<float> xs(x);
    xs.resize(static_cast<size_t>(rows) * k, 0.5f);
    DeviceTensor xg(DType::kBF16, {rows, k});
    xg.set(xs);
    Tensor wg = upload_fp8(w, m, k, dynamic_token());
    DeviceTensor out(DType::kBF16, {rows, m});
    gpu_->linear(xg.t, wg, nullptr, out.t);
    const std::vector<float> got = read_back(*gpu_, out.t);
    for (int t = 0; t < rows; ++t) EXPECT_EQ(got[static_cast<size_t>(t) * m + 5], 0.0f) << "rows " << rows;
  }
}

// --load-format dummy with --quantization fp8: no values, FP8 on the device, finite outputs of
// the size a [-1/sqrt(k), 1/sqrt(k)] weight gives.
TEST_F(CudaFp8, DummyFp8WeightsStayFp8AndGiveFiniteOutputs) {
  const int n = 3, k = 4096, m = 1024;
  Tensor host = Tensor::make(nullptr, DType::kF32, {m, k});
  host.input_quant = dynamic_token();
  std::unique_ptr<Buffer> owner;
  auto wg = gpu_->upload_weight(host, &owner);
  ASSERT_TRUE(wg.ok()) << wg.status().message();
  ASSERT_EQ(wg->dtype, DType::kF8E4M3);
  auto x = random_values(rng_, static_cast<size_t>(n) * k);
  DeviceTensor xg(DType::kBF16, {n, k});
  xg.set(x);
  DeviceTensor out(DType::kBF16, {n, m});
  gpu_->linear(xg.t, *wg, nullptr, out.t);
  const std::vector<float> got = read_back(*gpu_, out.t);
  double ss = 0;
  for (float v : got) {
    ASSERT_TRUE(std::isfinite(v));
    ss += static_cast<double>(v) * v;
  }
  // x ~ U(-1, 1), w ~ U(-1/sqrt(k), 1/sqrt(k)) (e4m3-rounded): E[y^2] = k * (1/3) * (1/(3k)) = 1/9.
  const double rms = std::sqrt(ss / static_cast<double>(got.size()));
  EXPECT_GT(rms, 0.2);
  EXPECT_LT(rms, 0.5);
}

// Weights the FP8 kernels cannot take stay bf16: no row scales (block-scaled), per-token-group
// inputs, in- or out-features not multiples of 16.
TEST_F(CudaFp8, UnsupportedSchemesStayBf16) {
  Fp8Weight w = random_fp8_weight(rng_, 64, 96, true);
  Tensor no_scales = fp8_host(w, 64, 96, dynamic_token());
  no_scales.weight_scales = nullptr;
  InputQuant group;
  group.kind = InputQuant::Kind::kDynamicGroup;
  group.group_size = 32;
  Tensor grouped = fp8_host(w, 64, 96, group);
  Fp8Weight odd = random_fp8_weight(rng_, 16, 72, true);
  Tensor odd_cols = fp8_host(odd, 16, 72, dynamic_token());
  Fp8Weight odd_rows_w = random_fp8_weight(rng_, 40, 64, true);
  Tensor odd_rows = fp8_host(odd_rows_w, 40, 64, dynamic_token());
  for (const Tensor& h : {no_scales, grouped, odd_cols, odd_rows}) {
    std::unique_ptr<Buffer> owner;
    auto t = gpu_->upload_weight(h, &owner);
    ASSERT_TRUE(t.ok()) << t.status().message();
    EXPECT_EQ(t->dtype, DType::kBF16);
  }
}

}  // namespace
}  // namespace kvasir
