// The CUDA MoE ops against the CPU backend (the reference): moe_route on exact ties and on
// well-separated scores (softmax / sigmoid, correction bias, grouped top-k by max and by top-2
// sum, renormalize, scale) must pick the same experts with the same weights; moe_experts on many
// shapes (T = 1..300, E = 8..128, top_k 1..8, H and I off the tile sizes, 0 / 1 / many tokens per
// expert, split / fused-halves / interleaved gate_up, per-expert and stacked weights, biases, all
// activations) through both paths (GEMV and grouped GEMM, each forced for every shape) within
// bf16 bounds; and a step of route + experts replayed through a CUDA graph with new routing each
// step, bitwise equal to the same steps run eagerly. Skips without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_test_util.h"

namespace kvasir {
namespace {

using cuda_test::DeviceTensor;
using cuda_test::random_values;
using cuda_test::read_back;
using cuda_test::rel_l2;

Tensor host_tensor(std::vector<float>& v, std::initializer_list<int64_t> dims) {
  return Tensor::make(v.data(), DType::kF32, dims);
}

// An int32 device tensor (DeviceTensor sizes elements for f32/bf16 only).
struct DeviceInts {
  Tensor t;
  DeviceInts(int64_t rows, int64_t cols) {
    t = Tensor::make(nullptr, DType::kI32, {rows, cols}, Device::kCuda);
    if (cudaMalloc(&t.data, static_cast<size_t>(std::max<int64_t>(rows * cols, 4)) * 4) != cudaSuccess) std::abort();
    cudaMemset(t.data, 0xff, static_cast<size_t>(rows * cols) * 4);
    cudaDeviceSynchronize();
  }
  ~DeviceInts() { cudaFree(t.data); }
  void set(const std::vector<int32_t>& v) {
    cudaMemcpy(t.data, v.data(), v.size() * 4, cudaMemcpyHostToDevice);
    cudaDeviceSynchronize();
  }
  std::vector<int32_t> get(Backend& b) {
    std::vector<int32_t> v(static_cast<size_t>(t.numel()));
    b.copy_to_host(t, v.data());
    return v;
  }
};

// A backend with KVASIR_MOE_GEMV_TOKENS set (the knob is read when a backend starts).
std::unique_ptr<Backend> gpu_with_gemv_tokens(const char* tokens, bool graphs = true) {
  ::setenv("KVASIR_MOE_GEMV_TOKENS", tokens, 1);
  CudaBackendOptions o;
  o.enable_graphs = graphs;
  auto b = create_cuda_backend(o);
  ::unsetenv("KVASIR_MOE_GEMV_TOKENS");
  return b.ok() ? std::move(*b) : nullptr;
}

enum class Layout { kSplit, kHalves, kInterleaved };

// One MoE layer's experts on the host (f32, bf16-exact) and on a GPU, as MoeExpertWeights views.
struct Experts {
  int num_experts = 0;
  int64_t h = 0, inter = 0;
  std::vector<std::vector<float>> gu, up, down, gu_b, up_b, down_b;  // per expert (gu: gate or gate_up)
  std::vector<Tensor> h_gu, h_up, h_down, h_gu_b, h_up_b, h_down_b;   // host views
  std::vector<Tensor> g_gu, g_up, g_down, g_gu_b, g_up_b, g_down_b;   // device views
  std::vector<std::unique_ptr<Buffer>> owned;
  MoeExpertWeights host_w, gpu_w;
};

void make_experts(Experts& x, Backend& gpu, std::mt19937& rng, int e_n, int64_t h, int64_t inter, Layout layout,
                  bool biases, bool stacked, GateActivation act) {
  x.num_experts = e_n;
  x.h = h;
  x.inter = inter;
  const bool fused = layout != Layout::kSplit;
  const int64_t gu_rows = fused ? 2 * inter : inter;
  const float sh = 1.0f / std::sqrt(static_cast<float>(h)), si = 1.0f / std::sqrt(static_cast<float>(inter));
  for (int e = 0; e < e_n; ++e) {
    x.gu.push_back(random_values(rng, static_cast<size_t>(gu_rows * h), sh));
    if (!fused) x.up.push_back(random_values(rng, static_cast<size_t>(inter * h), sh));
    x.down.push_back(random_values(rng, static_cast<size_t>(h * inter), si));
    if (biases) {
      x.gu_b.push_back(random_values(rng, static_cast<size_t>(gu_rows), 0.2f));
      if (!fused) x.up_b.push_back(random_values(rng, static_cast<size_t>(inter), 0.2f));
      x.down_b.push_back(random_values(rng, static_cast<size_t>(h), 0.2f));
    }
  }
  auto upload = [&](std::vector<float>& v, std::initializer_list<int64_t> dims) {
    std::unique_ptr<Buffer> owner;
    auto t = gpu.upload_weight(host_tensor(v, dims), &owner);
    EXPECT_TRUE(t.ok());
    x.owned.push_back(std::move(owner));
    return *t;
  };
  // Per-expert tensors (HF checkpoints) or one stacked [E, rows, cols] tensor sliced into views
  // (GGUF's blk.N.ffn_*_exps).
  auto place = [&](std::vector<std::vector<float>>& per, int64_t rows, int64_t cols, std::vector<Tensor>& host,
                   std::vector<Tensor>& dev, bool matrix) {
    for (auto& v : per) {
      host.push_back(matrix ? host_tensor(v, {rows, cols}) : host_tensor(v, {rows}));
    }
    if (per.empty()) return;
    if (stacked && matrix) {
      std::vector<float> all;
      for (auto& v : per) all.insert(all.end(), v.begin(), v.end());
      Tensor whole = upload(all, {static_cast<int64_t>(per.size()), rows, cols});
      for (size_t e = 0; e < per.size(); ++e) {
        Tensor v = whole.reshape({static_cast<int64_t>(per.size()) * rows, cols}).slice_rows(static_cast<int64_t>(e) * rows, rows);
        dev.push_back(v);
      }
    } else {
      for (auto& v : per) dev.push_back(matrix ? upload(v, {rows, cols}) : upload(v, {rows}));
    }
  };
  place(x.gu, gu_rows, h, x.h_gu, x.g_gu, true);
  place(x.up, inter, h, x.h_up, x.g_up, true);
  place(x.down, h, inter, x.h_down, x.g_down, true);
  place(x.gu_b, gu_rows, 1, x.h_gu_b, x.g_gu_b, false);
  place(x.up_b, inter, 1, x.h_up_b, x.g_up_b, false);
  place(x.down_b, h, 1, x.h_down_b, x.g_down_b, false);
  for (auto [w, gu, up, down, gub, upb, downb] :
       {std::tuple{&x.host_w, &x.h_gu, &x.h_up, &x.h_down, &x.h_gu_b, &x.h_up_b, &x.h_down_b},
        std::tuple{&x.gpu_w, &x.g_gu, &x.g_up, &x.g_down, &x.g_gu_b, &x.g_up_b, &x.g_down_b}}) {
    w->num_experts = e_n;
    w->hidden_size = h;
    w->intermediate_size = inter;
    w->activation = act;
    w->swiglu_oai.limit = 0.5f;  // small enough that the clamps act on these inputs
    w->down = down->data();
    w->down_bias = biases ? downb->data() : nullptr;
    if (fused) {
      w->gate_up = gu->data();
      w->gate_up_layout = layout == Layout::kInterleaved ? GateUpLayout::kInterleaved : GateUpLayout::kHalves;
      w->gate_up_bias = biases ? gub->data() : nullptr;
    } else {
      w->gate = gu->data();
      w->up = up->data();
      w->gate_bias = biases ? gub->data() : nullptr;
      w->up_bias = biases ? upb->data() : nullptr;
    }
  }
  ASSERT_TRUE(validate_moe_expert_weights(x.gpu_w).ok());
}

// top_k distinct experts per token. skew: share of picks from experts {0, 1} (many tokens each,
// the rest few or none).
void make_routing(std::mt19937& rng, int64_t t_n, int e_n, int k, double skew, std::vector<int32_t>& ids,
                  std::vector<float>& weights) {
  ids.assign(static_cast<size_t>(t_n * k), 0);
  weights.assign(ids.size(), 0.0f);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int64_t t = 0; t < t_n; ++t) {
    std::vector<int32_t> pool(static_cast<size_t>(e_n));
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng);
    if (u(rng) < skew) {  // move experts 0 and 1 to the front
      std::stable_partition(pool.begin(), pool.end(), [](int32_t e) { return e < 2; });
    }
    for (int j = 0; j < k; ++j) {
      ids[static_cast<size_t>(t * k + j)] = pool[static_cast<size_t>(j)];
      weights[static_cast<size_t>(t * k + j)] = static_cast<float>(0.1 + u(rng));
    }
  }
}

class CudaMoe : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    CpuBackendOptions o;
    o.num_threads = 4;
    o.precision = MatmulPrecision::kExact;
    cpu_ = std::make_unique<CpuBackend>(o);
  }
  std::unique_ptr<Backend> cpu_;
  std::mt19937 rng_{4321};
};

struct RouteCase {
  const char* name;
  int t, e, k;
  MoeScoring scoring;
  bool renormalize, bias;
  int groups, topk_groups;
  MoeGroupScore group_score;
  float scale;
};

MoeRouting routing_of(const RouteCase& c) {
  MoeRouting r;
  r.top_k = c.k;
  r.scoring = c.scoring;
  r.renormalize = c.renormalize;
  r.num_groups = c.groups;
  r.topk_groups = c.topk_groups;
  r.group_score = c.group_score;
  r.routed_scaling_factor = c.scale;
  return r;
}

TEST_F(CudaMoe, RouteMatchesCpu) {
  auto gpu = gpu_with_gemv_tokens("8");
  ASSERT_NE(gpu, nullptr);
  for (const RouteCase& c : {
           RouteCase{"softmax top2 of 8", 37, 8, 2, MoeScoring::kSoftmax, true, false, 1, 1, MoeGroupScore::kMax, 1.0f},
           {"softmax top8 of 128, no renorm", 70, 128, 8, MoeScoring::kSoftmax, false, false, 1, 1, MoeGroupScore::kMax, 1.0f},
           {"softmax top1 of 64", 5, 64, 1, MoeScoring::kSoftmax, false, false, 1, 1, MoeGroupScore::kMax, 1.0f},
           {"softmax top6 of 64, groups 8 keep 3 by max, scale", 40, 64, 6, MoeScoring::kSoftmax, false, false, 8, 3,
            MoeGroupScore::kMax, 16.0f},
           {"sigmoid + bias top8 of 256, groups 8 keep 4 by top2", 33, 256, 8, MoeScoring::kSigmoid, true, true, 8, 4,
            MoeGroupScore::kTop2Sum, 2.5f},
           {"sigmoid top4 of 32", 300, 32, 4, MoeScoring::kSigmoid, true, false, 1, 1, MoeGroupScore::kMax, 1.0f}}) {
    // Scores far apart (logits on a grid of distinct values), except token 0: all logits equal,
    // so every choice is a tie and the lower expert must win. The bias lifts the odd experts
    // by 2, far above any score difference.
    std::vector<float> logits(static_cast<size_t>(c.t) * c.e), bias(static_cast<size_t>(c.e));
    const float step = 4.0f / static_cast<float>(c.e);
    for (int t = 0; t < c.t; ++t) {
      std::vector<int> perm(static_cast<size_t>(c.e));
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng_);
      for (int e = 0; e < c.e; ++e) {
        logits[static_cast<size_t>(t) * c.e + e] = t == 0 ? 0.5f : (static_cast<float>(perm[e]) - c.e / 2) * step;
      }
    }
    for (int e = 0; e < c.e; ++e) bias[static_cast<size_t>(e)] = 2.0f * static_cast<float>(e % 2);
    DeviceTensor lg(DType::kF32, {c.t, c.e}), bg(DType::kF32, {c.e}), wg(DType::kF32, {c.t, c.k});
    lg.set(logits);
    bg.set(bias);
    DeviceInts ig(c.t, c.k);
    MoeRouting r = routing_of(c);
    Tensor hb = host_tensor(bias, {c.e});
    r.correction_bias = c.bias ? &bg.t : nullptr;
    gpu->moe_route(lg.t, r, ig.t, wg.t);
    std::vector<int32_t> ref_ids(static_cast<size_t>(c.t) * c.k);
    std::vector<float> ref_w(ref_ids.size());
    Tensor rit = Tensor::make(ref_ids.data(), DType::kI32, {c.t, c.k}), rwt = host_tensor(ref_w, {c.t, c.k});
    r.correction_bias = c.bias ? &hb : nullptr;
    cpu_->moe_route(host_tensor(logits, {c.t, c.e}), r, rit, rwt);
    EXPECT_EQ(ig.get(*gpu), ref_ids) << c.name;
    const std::vector<float> got_w = read_back(*gpu, wg.t);
    for (size_t i = 0; i < ref_w.size(); ++i) {
      ASSERT_NEAR(got_w[i], ref_w[i], 1e-5 * std::fabs(ref_w[i]) + 1e-7) << c.name << " weight " << i;
    }
  }
}

// With KVASIR_MOE_FUSE_ROUTE=1 the backend folds moe_route into the expert GEMV at decode sizes
// (each gate/up CTA routes its token; cuda_moe_ops.cpp): the ids and weights it still writes must be the CPU's routing, and
// the output must equal, bit for bit, the same ops on a backend that does not fuse.
TEST_F(CudaMoe, RouteFoldedIntoExpertGemvMatchesUnfused) {
  ::setenv("KVASIR_MOE_FUSE_ROUTE", "1", 1);
  auto fused = gpu_with_gemv_tokens("8");
  ::unsetenv("KVASIR_MOE_FUSE_ROUTE");
  ::setenv("KVASIR_CUDA_FUSE", "0", 1);
  auto unfused = gpu_with_gemv_tokens("8");
  ::unsetenv("KVASIR_CUDA_FUSE");
  ASSERT_NE(fused, nullptr);
  ASSERT_NE(unfused, nullptr);
  for (const RouteCase& c : {
           RouteCase{"softmax top8 of 128, renorm", 1, 128, 8, MoeScoring::kSoftmax, true, false, 1, 1, MoeGroupScore::kMax, 1.0f},
           {"softmax top2 of 8", 5, 8, 2, MoeScoring::kSoftmax, true, false, 1, 1, MoeGroupScore::kMax, 1.0f},
           {"softmax top6 of 64, groups 8 keep 3 by max, scale", 8, 64, 6, MoeScoring::kSoftmax, false, false, 8, 3,
            MoeGroupScore::kMax, 16.0f},
           {"sigmoid + bias top8 of 256, groups 8 keep 4 by top2", 3, 256, 8, MoeScoring::kSigmoid, true, true, 8, 4,
            MoeGroupScore::kTop2Sum, 2.5f}}) {
    const int64_t h = 64, inter = 48;
    Experts ex;
    make_experts(ex, *fused, rng_, c.e, h, inter, Layout::kSplit, true, true, GateActivation::kSilu);
    std::vector<float> logits = random_values(rng_, static_cast<size_t>(c.t) * c.e, 3.0f);
    std::vector<float> bias(static_cast<size_t>(c.e)), x = random_values(rng_, static_cast<size_t>(c.t * h));
    for (int e = 0; e < c.e; ++e) bias[static_cast<size_t>(e)] = 0.5f * static_cast<float>(e % 3);
    MoeRouting r = routing_of(c);
    std::vector<std::vector<float>> outs, weights;
    std::vector<std::vector<int32_t>> ids;
    for (Backend* b : {fused.get(), unfused.get()}) {
      DeviceTensor lg(DType::kF32, {c.t, c.e}), bg(DType::kF32, {c.e}), wg(DType::kF32, {c.t, c.k});
      DeviceTensor xg(DType::kBF16, {c.t, h}), og(DType::kBF16, {c.t, h});
      DeviceInts ig(c.t, c.k);
      lg.set(logits);
      bg.set(bias);
      xg.set(x);
      r.correction_bias = c.bias ? &bg.t : nullptr;
      b->moe_route(lg.t, r, ig.t, wg.t);
      b->moe_experts(xg.t, ig.t, wg.t, ex.gpu_w, og.t);
      outs.push_back(read_back(*b, og.t));
      weights.push_back(read_back(*b, wg.t));
      ids.push_back(ig.get(*b));
    }
    std::vector<int32_t> ref_ids(static_cast<size_t>(c.t) * c.k);
    std::vector<float> ref_w(ref_ids.size());
    Tensor rit = Tensor::make(ref_ids.data(), DType::kI32, {c.t, c.k}), rwt = host_tensor(ref_w, {c.t, c.k});
    Tensor hb = host_tensor(bias, {c.e});
    r.correction_bias = c.bias ? &hb : nullptr;
    cpu_->moe_route(host_tensor(logits, {c.t, c.e}), r, rit, rwt);
    EXPECT_EQ(ids[0], ref_ids) << c.name;
    EXPECT_EQ(ids[0], ids[1]) << c.name;
    EXPECT_EQ(weights[0], weights[1]) << c.name;
    EXPECT_EQ(outs[0], outs[1]) << c.name;
    for (size_t i = 0; i < ref_w.size(); ++i) {
      ASSERT_NEAR(weights[0][i], ref_w[i], 1e-5 * std::fabs(ref_w[i]) + 1e-7) << c.name << " weight " << i;
    }
  }
}

struct ExpertsCase {
  int t, e, k;
  int64_t h, inter;
  Layout layout;
  bool biases, stacked;
  double skew;
};

TEST_F(CudaMoe, ExpertsMatchCpuOnBothPaths) {
  // "8": the default split (GEMV up to 8 tokens); "0": the grouped GEMM for every batch (where
  // the shape allows it); "256": the GEMV path for every batch.
  std::vector<std::pair<const char*, std::unique_ptr<Backend>>> gpus;
  for (const char* tokens : {"8", "0", "256"}) {
    gpus.emplace_back(tokens, gpu_with_gemv_tokens(tokens));
    ASSERT_NE(gpus.back().second, nullptr);
  }
  const ExpertsCase cases[] = {
      {1, 8, 2, 256, 128, Layout::kSplit, false, false, 0.0},
      {2, 64, 6, 512, 96, Layout::kHalves, true, true, 0.0},
      {7, 128, 8, 264, 72, Layout::kSplit, false, true, 0.3},         // H, I off the 64-wide tiles
      {64, 128, 8, 512, 192, Layout::kSplit, false, true, 0.0},       // batch-64 decode: m-blocks of 16
      {300, 8, 2, 256, 136, Layout::kInterleaved, true, false, 0.5},  // many tokens per expert: m-blocks of 64
      {300, 64, 1, 200, 100, Layout::kSplit, true, false, 0.2},       // I % 8 != 0: scalar GEMV path only
      {33, 8, 8, 128, 64, Layout::kInterleaved, true, true, 0.0},     // every expert, every token
      {5, 128, 1, 136, 40, Layout::kHalves, false, false, 0.0},       // most experts without a token
      {17, 64, 2, 256, 64, Layout::kSplit, false, false, 1.0},        // experts 0 and 1 take every token
      {2, 16, 4, 100, 52, Layout::kHalves, true, false, 0.0},         // H % 8 != 0
  };
  int n = 0;
  for (const ExpertsCase& c : cases) {
    for (GateActivation act : {GateActivation::kSilu, GateActivation::kGeluTanh, GateActivation::kSwigluOai}) {
      const std::string name = "case " + std::to_string(n) + " T=" + std::to_string(c.t) + " E=" + std::to_string(c.e) +
                               " k=" + std::to_string(c.k) + " act=" + std::to_string(static_cast<int>(act));
      Experts ex;
      make_experts(ex, *gpus[0].second, rng_, c.e, c.h, c.inter, c.layout, c.biases, c.stacked, act);
      std::vector<int32_t> ids;
      std::vector<float> weights;
      make_routing(rng_, c.t, c.e, c.k, c.skew, ids, weights);
      std::vector<float> x = random_values(rng_, static_cast<size_t>(c.t * c.h), 2.0f);
      std::vector<float> ref(x.size());
      Tensor rt = host_tensor(ref, {c.t, c.h});
      cpu_->moe_experts(host_tensor(x, {c.t, c.h}), Tensor::make(ids.data(), DType::kI32, {c.t, c.k}),
                        host_tensor(weights, {c.t, c.k}), ex.host_w, rt);
      // The weights live on the first backend; every backend of the process can read them.
      for (auto& [tokens, gpu] : gpus) {
        DeviceTensor xg(DType::kBF16, {c.t, c.h}), wg(DType::kF32, {c.t, c.k}), out(DType::kBF16, {c.t, c.h});
        DeviceInts ig(c.t, c.k);
        xg.set(x);
        wg.set(weights);
        ig.set(ids);
        gpu->moe_experts(xg.t, ig.t, wg.t, ex.gpu_w, out.t);
        EXPECT_LT(rel_l2(read_back(*gpu, out.t), ref), 1e-2) << name << " KVASIR_MOE_GEMV_TOKENS=" << tokens;
      }
    }
    ++n;
  }
}

// Expert parallelism: a rank holds experts [first, first + n) of the routing's E and adds only
// their slots (ids are the routing's, so every kernel subtracts first): equal to the CPU's share on
// both paths, with shares at the start, the middle and the end, and a batch whose slots mostly go
// to other ranks' experts.
TEST_F(CudaMoe, AShareOfTheExpertsMatchesCpu) {
  std::vector<std::pair<const char*, std::unique_ptr<Backend>>> gpus;
  for (const char* tokens : {"8", "0", "256"}) {
    gpus.emplace_back(tokens, gpu_with_gemv_tokens(tokens));
    ASSERT_NE(gpus.back().second, nullptr);
  }
  struct ShareCase {
    int t, e, k, first, n;
    int64_t h, inter;
  };
  for (const ShareCase& c : {ShareCase{1, 16, 4, 0, 8, 256, 128}, ShareCase{7, 16, 4, 5, 6, 264, 72},
                             ShareCase{64, 128, 8, 96, 32, 512, 192}, ShareCase{300, 8, 2, 6, 2, 256, 136}}) {
    const std::string name = "T=" + std::to_string(c.t) + " E=" + std::to_string(c.e) + " share [" +
                             std::to_string(c.first) + ", " + std::to_string(c.first + c.n) + ")";
    Experts ex;
    make_experts(ex, *gpus[0].second, rng_, c.n, c.h, c.inter, Layout::kSplit, true, true, GateActivation::kSilu);
    ex.host_w.first_expert = c.first;
    ex.gpu_w.first_expert = c.first;
    std::vector<int32_t> ids;
    std::vector<float> weights;
    make_routing(rng_, c.t, c.e, c.k, 0.0, ids, weights);
    std::vector<float> x = random_values(rng_, static_cast<size_t>(c.t * c.h), 2.0f);
    std::vector<float> ref(x.size());
    Tensor rt = host_tensor(ref, {c.t, c.h});
    cpu_->moe_experts(host_tensor(x, {c.t, c.h}), Tensor::make(ids.data(), DType::kI32, {c.t, c.k}),
                      host_tensor(weights, {c.t, c.k}), ex.host_w, rt);
    for (auto& [tokens, gpu] : gpus) {
      DeviceTensor xg(DType::kBF16, {c.t, c.h}), wg(DType::kF32, {c.t, c.k}), out(DType::kBF16, {c.t, c.h});
      DeviceInts ig(c.t, c.k);
      xg.set(x);
      wg.set(weights);
      ig.set(ids);
      gpu->moe_experts(xg.t, ig.t, wg.t, ex.gpu_w, out.t);
      const std::vector<float> got = read_back(*gpu, out.t);
      double ref_norm = 0.0;
      for (float v : ref) ref_norm += static_cast<double>(v) * v;
      if (ref_norm == 0.0) {
        for (float v : got) ASSERT_EQ(v, 0.0f) << name << " (no slot is this share's)";
      } else {
        EXPECT_LT(rel_l2(got, ref), 1e-2) << name << " KVASIR_MOE_GEMV_TOKENS=" << tokens;
      }
    }
  }
}

// Two tokens that pick the same experts get the same output rows whatever the rest of the batch,
// on each path (a row's result depends only on its own inputs).
TEST_F(CudaMoe, ExpertsRowsDoNotDependOnTheBatch) {
  for (const char* tokens : {"256", "0"}) {
    auto gpu = gpu_with_gemv_tokens(tokens);
    ASSERT_NE(gpu, nullptr);
    const int e_n = 16, k = 4, t_n = 40;
    const int64_t h = 256, inter = 128;
    Experts ex;
    make_experts(ex, *gpu, rng_, e_n, h, inter, Layout::kSplit, true, true, GateActivation::kSilu);
    std::vector<int32_t> ids;
    std::vector<float> weights;
    make_routing(rng_, t_n, e_n, k, 0.3, ids, weights);
    std::vector<float> x = random_values(rng_, static_cast<size_t>(t_n * h));
    // Token t_n - 1 repeats token 0 exactly.
    std::copy(x.begin(), x.begin() + h, x.end() - h);
    std::copy(ids.begin(), ids.begin() + k, ids.end() - k);
    std::copy(weights.begin(), weights.begin() + k, weights.end() - k);
    DeviceTensor xg(DType::kBF16, {t_n, h}), wg(DType::kF32, {t_n, k}), out(DType::kBF16, {t_n, h});
    DeviceInts ig(t_n, k);
    xg.set(x);
    wg.set(weights);
    ig.set(ids);
    gpu->moe_experts(xg.t, ig.t, wg.t, ex.gpu_w, out.t);
    const std::vector<float> o = read_back(*gpu, out.t);
    EXPECT_TRUE(std::equal(o.begin(), o.begin() + h, o.end() - h)) << "KVASIR_MOE_GEMV_TOKENS=" << tokens;
  }
}

// route + experts as one decode step, four times with new router logits (so new experts): the
// graph backend captures the step on its second sighting and replays it; every step must equal
// the same step on an eager backend bit for bit, and the CPU within bf16 bounds.
TEST_F(CudaMoe, StepWithMoeReplaysAsGraphWithNewRouting) {
  for (int t_n : {3, 64}) {
    auto graphed = gpu_with_gemv_tokens("8", true);
    auto eager = gpu_with_gemv_tokens("8", false);
    ASSERT_NE(graphed, nullptr);
    ASSERT_NE(eager, nullptr);
    const int e_n = 32, k = 4;
    const int64_t h = 256, inter = 128;
    Experts ex;
    make_experts(ex, *graphed, rng_, e_n, h, inter, Layout::kHalves, false, true, GateActivation::kSilu);
    MoeRouting r;
    r.top_k = k;
    r.renormalize = true;
    std::vector<float> x = random_values(rng_, static_cast<size_t>(t_n * h));
    struct Bufs {
      DeviceTensor x, logits, w, out;
      DeviceInts ids;
      Bufs(int t, int64_t h, int e, int k)
          : x(DType::kBF16, {t, h}), logits(DType::kF32, {t, e}), w(DType::kF32, {t, k}), out(DType::kBF16, {t, h}),
            ids(t, k) {}
    };
    Bufs g(t_n, h, e_n, k), e(t_n, h, e_n, k);
    g.x.set(x);
    e.x.set(x);
    for (int step = 0; step < 4; ++step) {
      std::vector<float> logits = random_values(rng_, static_cast<size_t>(t_n * e_n), 3.0f);
      std::vector<float> cpu_out;
      for (auto [b, bufs] : {std::pair{graphed.get(), &g}, std::pair{eager.get(), &e}}) {
        bufs->logits.set(logits);
        b->moe_route(bufs->logits.t, r, bufs->ids.t, bufs->w.t);
        b->moe_experts(bufs->x.t, bufs->ids.t, bufs->w.t, ex.gpu_w, bufs->out.t);
        b->synchronize();
      }
      const std::vector<float> got = read_back(*graphed, g.out.t), want = read_back(*eager, e.out.t);
      EXPECT_EQ(got, want) << "T=" << t_n << " step " << step;
      EXPECT_EQ(g.ids.get(*graphed), e.ids.get(*eager)) << "T=" << t_n << " step " << step;
      std::vector<int32_t> ids(static_cast<size_t>(t_n * k));
      std::vector<float> w(ids.size()), ref(x.size());
      Tensor it = Tensor::make(ids.data(), DType::kI32, {t_n, k}), wt = host_tensor(w, {t_n, k});
      Tensor rt = host_tensor(ref, {t_n, h});
      cpu_->moe_route(host_tensor(logits, {t_n, e_n}), r, it, wt);
      cpu_->moe_experts(host_tensor(x, {t_n, h}), it, wt, ex.host_w, rt);
      EXPECT_LT(rel_l2(got, ref), 1e-2) << "T=" << t_n << " step " << step;
    }
    const std::string stats = graphed->stats();
    EXPECT_EQ(stats.find("captures 0)"), std::string::npos) << stats;
    EXPECT_EQ(stats.find("graph replays 0,"), std::string::npos) << stats;
  }
}

}  // namespace
}  // namespace kvasir
