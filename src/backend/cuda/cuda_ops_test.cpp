// Every CUDA op against its CPU twin on random bf16-exact inputs of many shapes (relative L2
// error, outputs poisoned with NaN first), including paged attention for decode, prefill, chunked
// prefill mixed with decode, GQA, sliding windows and soft-capping, and a decode step replayed
// through a captured CUDA graph while the sequences grow. Skips without a GPU.
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

class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    auto b = create_cuda_backend(CudaBackendOptions{});
    ASSERT_TRUE(b.ok()) << b.status().message();
    gpu_ = std::move(*b);
    CpuBackendOptions o;
    o.num_threads = 4;
    o.precision = MatmulPrecision::kExact;
    cpu_ = std::make_unique<CpuBackend>(o);
  }
  // A weight on the GPU (2-D -> bf16, 1-D -> f32) from host float32 values.
  Tensor upload(std::vector<float>& v, std::initializer_list<int64_t> dims) {
    std::unique_ptr<Buffer> owner;
    auto t = gpu_->upload_weight(host_tensor(v, dims), &owner);
    EXPECT_TRUE(t.ok());
    owned_.push_back(std::move(owner));
    return *t;
  }
  std::unique_ptr<Backend> gpu_, cpu_;
  std::vector<std::unique_ptr<Buffer>> owned_;
  std::mt19937 rng_{1234};
};

TEST_F(CudaOps, EmbeddingMatchesCpu) {
  for (auto [vocab, d, n, scale] : {std::tuple{1000, 576, 37, 1.0f}, {300, 100, 5, 2.5f}, {128, 4096, 1, 0.5f}}) {
    auto table = random_values(rng_, static_cast<size_t>(vocab) * d);
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (auto& i : ids) i = static_cast<int32_t>(rng_() % static_cast<uint32_t>(vocab));
    Tensor tg = upload(table, {vocab, d});
    DeviceTensor out(DType::kBF16, {n, d});
    gpu_->embedding(tg, ids.data(), n, scale, out.t);
    std::vector<float> ref(static_cast<size_t>(n) * d);
    Tensor rt = host_tensor(ref, {n, d});
    cpu_->embedding(host_tensor(table, {vocab, d}), ids.data(), n, scale, rt);
    EXPECT_LT(rel_l2(read_back(*gpu_, out.t), ref), 1e-2) << vocab << "x" << d;
  }
}

TEST_F(CudaOps, LinearMatchesCpu) {
  struct Case { int n, k, m; bool bias, f32_out; };
  for (const Case c : {Case{1, 64, 96, false, false}, {1, 4096, 1024, true, false}, {3, 256, 100, false, true},
                       {8, 1024, 512, true, true}, {9, 512, 384, false, false}, {17, 576, 1536, true, false},
                       {64, 1024, 512, false, true}, {130, 256, 1000, true, false}, {1, 4096, 5000, false, true}}) {
    auto x = random_values(rng_, static_cast<size_t>(c.n) * c.k);
    auto w = random_values(rng_, static_cast<size_t>(c.m) * c.k, 1.0f / std::sqrt(static_cast<float>(c.k)));
    auto b = random_values(rng_, static_cast<size_t>(c.m));
    DeviceTensor xg(DType::kBF16, {c.n, c.k});
    xg.set(x);
    Tensor wg = upload(w, {c.m, c.k});
    Tensor bg = upload(b, {c.m});
    DeviceTensor out(c.f32_out ? DType::kF32 : DType::kBF16, {c.n, c.m});
    gpu_->linear(xg.t, wg, c.bias ? &bg : nullptr, out.t);
    std::vector<float> ref(static_cast<size_t>(c.n) * c.m);
    Tensor rt = host_tensor(ref, {c.n, c.m});
    Tensor bt = host_tensor(b, {c.m});
    cpu_->linear(host_tensor(x, {c.n, c.k}), host_tensor(w, {c.m, c.k}), c.bias ? &bt : nullptr, rt);
    EXPECT_LT(rel_l2(read_back(*gpu_, out.t), ref), c.f32_out ? 1e-4 : 1e-2)
        << c.n << "x" << c.k << " -> " << c.m << (c.bias ? " bias" : "");
  }
}

// The op sequences the backend fuses for decode: q/k/v projections of one x, gate/up with the
// activation, and a residual add followed by the next block's norm.
TEST_F(CudaOps, FusedDecodeSequencesMatchCpu) {
  for (int n : {1, 3, 8}) {
    const int k = 512, mq = 512, mk = 128, mi = 768;
    auto x = random_values(rng_, static_cast<size_t>(n) * k);
    DeviceTensor xg(DType::kBF16, {n, k});
    xg.set(x);
    const float sc = 1.0f / std::sqrt(static_cast<float>(k));
    auto wq = random_values(rng_, static_cast<size_t>(mq) * k, sc), wk = random_values(rng_, static_cast<size_t>(mk) * k, sc);
    auto wv = random_values(rng_, static_cast<size_t>(mk) * k, sc), bq = random_values(rng_, mq), bv = random_values(rng_, mk);
    Tensor gq = upload(wq, {mq, k}), gk = upload(wk, {mk, k}), gv = upload(wv, {mk, k});
    Tensor gbq = upload(bq, {mq}), gbv = upload(bv, {mk});
    DeviceTensor q(DType::kBF16, {n, mq}), kk(DType::kBF16, {n, mk}), v(DType::kBF16, {n, mk});
    gpu_->linear(xg.t, gq, &gbq, q.t);
    gpu_->linear(xg.t, gk, nullptr, kk.t);
    gpu_->linear(xg.t, gv, &gbv, v.t);
    std::vector<float> rq(static_cast<size_t>(n) * mq), rk(static_cast<size_t>(n) * mk), rv(rk.size());
    Tensor rqt = host_tensor(rq, {n, mq}), rkt = host_tensor(rk, {n, mk}), rvt = host_tensor(rv, {n, mk});
    Tensor hbq = host_tensor(bq, {mq}), hbv = host_tensor(bv, {mk});
    cpu_->linear(host_tensor(x, {n, k}), host_tensor(wq, {mq, k}), &hbq, rqt);
    cpu_->linear(host_tensor(x, {n, k}), host_tensor(wk, {mk, k}), nullptr, rkt);
    cpu_->linear(host_tensor(x, {n, k}), host_tensor(wv, {mk, k}), &hbv, rvt);
    EXPECT_LT(rel_l2(read_back(*gpu_, q.t), rq), 1e-2) << "q n=" << n;
    EXPECT_LT(rel_l2(read_back(*gpu_, kk.t), rk), 1e-2) << "k n=" << n;
    EXPECT_LT(rel_l2(read_back(*gpu_, v.t), rv), 1e-2) << "v n=" << n;

    for (auto act : {GateActivation::kSilu, GateActivation::kGeluTanh}) {
      auto wg = random_values(rng_, static_cast<size_t>(mi) * k, sc), wu = random_values(rng_, static_cast<size_t>(mi) * k, sc);
      Tensor gg = upload(wg, {mi, k}), gu = upload(wu, {mi, k});
      DeviceTensor gate(DType::kBF16, {n, mi}), up(DType::kBF16, {n, mi});
      gpu_->linear(xg.t, gg, nullptr, gate.t);
      gpu_->linear(xg.t, gu, nullptr, up.t);
      gpu_->gated_activation(gate.t, up.t, act, gate.t);
      std::vector<float> rg(static_cast<size_t>(n) * mi), ru(rg.size());
      Tensor rgt = host_tensor(rg, {n, mi}), rut = host_tensor(ru, {n, mi});
      cpu_->linear(host_tensor(x, {n, k}), host_tensor(wg, {mi, k}), nullptr, rgt);
      cpu_->linear(host_tensor(x, {n, k}), host_tensor(wu, {mi, k}), nullptr, rut);
      cpu_->gated_activation(rgt, rut, act, rgt);
      EXPECT_LT(rel_l2(read_back(*gpu_, gate.t), rg), 1e-2) << "gate/up n=" << n;
    }

    auto o = random_values(rng_, static_cast<size_t>(n) * k);
    std::vector<float> w(static_cast<size_t>(k), 1.25f);
    Tensor wn = upload(w, {k});
    DeviceTensor og(DType::kBF16, {n, k}), h(DType::kBF16, {n, k});
    og.set(o);
    xg.set(x);
    gpu_->add(xg.t, og.t);
    gpu_->rms_norm(xg.t, wn, 1e-5f, h.t);
    std::vector<float> rx = x, rh(x.size());
    Tensor rxt = host_tensor(rx, {n, k}), rht = host_tensor(rh, {n, k});
    cpu_->add(rxt, host_tensor(o, {n, k}));
    cpu_->rms_norm(rxt, host_tensor(w, {k}), 1e-5f, rht);
    EXPECT_LT(rel_l2(read_back(*gpu_, h.t), rh), 1e-2) << "add + rms_norm n=" << n;
    EXPECT_LT(rel_l2(read_back(*gpu_, xg.t), rx), 1e-2) << "add + rms_norm residual n=" << n;
  }
}

// One decoder layer's op sequence exactly as DecoderModel issues it, which the backend fuses into
// a few kernels at decode sizes; every intermediate the unfused ops write must still be right.
TEST_F(CudaOps, FusedDecodeLayerChainMatchesCpu) {
  for (int fold : {0, 1}) {
    // fold = 1: a backend that also folds norms and residual adds into the GEMVs.
    if (fold == 1) {
      ::setenv("KVASIR_CUDA_FUSE_NORM", "1", 1);
      auto b = create_cuda_backend(CudaBackendOptions{});
      ::unsetenv("KVASIR_CUDA_FUSE_NORM");
      ASSERT_TRUE(b.ok());
      owned_.clear();
      gpu_ = std::move(*b);
    }
    for (int n : {1, 4, 16}) {
      const int d = 512, heads = 8, kvh = 2, hd = 64, inter = 1024, qd = heads * hd, kvd = kvh * hd, bs = 16;
      const float sd = 1.0f / std::sqrt(static_cast<float>(d)), si = 1.0f / std::sqrt(static_cast<float>(inter));
      auto x = random_values(rng_, static_cast<size_t>(n) * d, 2.0f);
      auto wq = random_values(rng_, static_cast<size_t>(qd) * d, sd), wk = random_values(rng_, static_cast<size_t>(kvd) * d, sd);
      auto wv = random_values(rng_, static_cast<size_t>(kvd) * d, sd), wo = random_values(rng_, static_cast<size_t>(d) * qd, sd);
      auto wg = random_values(rng_, static_cast<size_t>(inter) * d, sd), wu = random_values(rng_, static_cast<size_t>(inter) * d, sd);
      auto wd = random_values(rng_, static_cast<size_t>(d) * inter, si), bq = random_values(rng_, qd, 0.1f);
      std::vector<float> g1(static_cast<size_t>(d)), g2(static_cast<size_t>(d));
      for (auto* g : {&g1, &g2}) {
        for (auto& v : *g) v = 1.0f + std::uniform_real_distribution<float>(-0.3f, 0.3f)(rng_);
      }
      std::vector<float> inv(hd / 2);
      for (int i = 0; i < hd / 2; ++i) inv[static_cast<size_t>(i)] = static_cast<float>(std::pow(10000.0, -2.0 * i / hd));
      std::vector<int32_t> pos(static_cast<size_t>(n));
      std::vector<int64_t> slots(static_cast<size_t>(n));
      for (int t = 0; t < n; ++t) {
        pos[static_cast<size_t>(t)] = 7 * t + 3;
        slots[static_cast<size_t>(t)] = 5 * t + 1;
      }
      AttentionMetadata m;
      m.num_tokens = n;
      m.slot_mapping = slots.data();
      m.block_size = bs;
      RopeParams rp{hd, true, inv.data(), 1.0f};
      const int nb = (5 * n + 2) / bs + 1;

      // GPU
      Tensor Wq = upload(wq, {qd, d}), Wk = upload(wk, {kvd, d}), Wv = upload(wv, {kvd, d}), Wo = upload(wo, {d, qd});
      Tensor Wg = upload(wg, {inter, d}), Wu = upload(wu, {inter, d}), Wd = upload(wd, {d, inter});
      Tensor G1 = upload(g1, {d}), G2 = upload(g2, {d}), Bq = upload(bq, {qd});
      DeviceTensor X(DType::kBF16, {n, d}), H(DType::kBF16, {n, d}), Q(DType::kBF16, {n, qd}), K(DType::kBF16, {n, kvd}),
          V(DType::kBF16, {n, kvd}), O(DType::kBF16, {n, d}), Gt(DType::kBF16, {n, inter}), Up(DType::kBF16, {n, inter}),
          Q2(DType::kBF16, {n, qd}), KC(DType::kBF16, {nb, bs, kvh, hd}), VC(DType::kBF16, {nb, bs, kvh, hd});
      X.set(x);
      Tensor Q3 = Q.t.reshape({n, heads, hd}), K3 = K.t.reshape({n, kvh, hd}), V3 = V.t.reshape({n, kvh, hd});
      gpu_->rms_norm(X.t, G1, 1e-5f, H.t);
      gpu_->linear(H.t, Wq, &Bq, Q.t);
      gpu_->linear(H.t, Wk, nullptr, K.t);
      gpu_->linear(H.t, Wv, nullptr, V.t);
      gpu_->rope(Q3, K3, pos.data(), rp);
      gpu_->write_kv(K3, V3, KC.t, VC.t, m);
      gpu_->linear(Q.t, Wo, nullptr, O.t);
      gpu_->add_rms_norm(X.t, O.t, G2, 1e-5f, H.t);
      gpu_->linear(H.t, Wg, nullptr, Gt.t);
      gpu_->linear(H.t, Wu, nullptr, Up.t);
      gpu_->gated_activation(Gt.t, Up.t, GateActivation::kSilu, Gt.t);
      gpu_->linear(Gt.t, Wd, nullptr, O.t);
      gpu_->add(X.t, O.t);
      gpu_->rms_norm(X.t, G1, 1e-5f, H.t);
      gpu_->linear(H.t, Wq, nullptr, Q2.t);

      // CPU
      std::vector<float> cx = x, ch(x.size()), cq(static_cast<size_t>(n) * qd), ck(static_cast<size_t>(n) * kvd), cv(ck.size()),
          co(x.size()), cg(static_cast<size_t>(n) * inter), cu(cg.size()), cq2(cq.size());
      std::vector<float> ckc(static_cast<size_t>(nb) * bs * kvd, 0.0f), cvc(ckc.size(), 0.0f);
      Tensor tx = host_tensor(cx, {n, d}), th = host_tensor(ch, {n, d}), tq = host_tensor(cq, {n, qd}), tk = host_tensor(ck, {n, kvd});
      Tensor tv = host_tensor(cv, {n, kvd}), to = host_tensor(co, {n, d}), tg = host_tensor(cg, {n, inter}), tu = host_tensor(cu, {n, inter});
      Tensor tq2 = host_tensor(cq2, {n, qd}), tkc = host_tensor(ckc, {nb, bs, kvh, hd}), tvc = host_tensor(cvc, {nb, bs, kvh, hd});
      Tensor tbq = host_tensor(bq, {qd}), tg1 = host_tensor(g1, {d}), tg2 = host_tensor(g2, {d});
      Tensor tq3 = tq.reshape({n, heads, hd}), tk3 = tk.reshape({n, kvh, hd}), tv3 = tv.reshape({n, kvh, hd});
      cpu_->rms_norm(tx, tg1, 1e-5f, th);
      cpu_->linear(th, host_tensor(wq, {qd, d}), &tbq, tq);
      cpu_->linear(th, host_tensor(wk, {kvd, d}), nullptr, tk);
      cpu_->linear(th, host_tensor(wv, {kvd, d}), nullptr, tv);
      cpu_->rope(tq3, tk3, pos.data(), rp);
      cpu_->write_kv(tk3, tv3, tkc, tvc, m);
      cpu_->linear(tq, host_tensor(wo, {d, qd}), nullptr, to);
      cpu_->add_rms_norm(tx, to, tg2, 1e-5f, th);
      cpu_->linear(th, host_tensor(wg, {inter, d}), nullptr, tg);
      cpu_->linear(th, host_tensor(wu, {inter, d}), nullptr, tu);
      cpu_->gated_activation(tg, tu, GateActivation::kSilu, tg);
      cpu_->linear(tg, host_tensor(wd, {d, inter}), nullptr, to);
      cpu_->add(tx, to);
      cpu_->rms_norm(tx, tg1, 1e-5f, th);
      cpu_->linear(th, host_tensor(wq, {qd, d}), nullptr, tq2);

      EXPECT_LT(rel_l2(read_back(*gpu_, Q2.t), cq2), 3e-2) << "q of the next layer, n=" << n;
      EXPECT_LT(rel_l2(read_back(*gpu_, X.t), cx), 2e-2) << "residual, n=" << n;
      EXPECT_LT(rel_l2(read_back(*gpu_, H.t), ch), 2e-2) << "normed input, n=" << n;
      EXPECT_LT(rel_l2(read_back(*gpu_, O.t), co), 3e-2) << "down output, n=" << n;
      EXPECT_LT(rel_l2(read_back(*gpu_, Gt.t), cg), 3e-2) << "gated, n=" << n;
      EXPECT_LT(rel_l2(read_back(*gpu_, Up.t), cu), 2e-2) << "up, n=" << n;
      EXPECT_LT(rel_l2(read_back(*gpu_, Q.t), cq), 2e-2) << "q (roped), n=" << n;
      const auto gk = read_back(*gpu_, KC.t);
      std::vector<float> a, b;
      for (int64_t slot : slots) {
        a.insert(a.end(), gk.begin() + slot * kvd, gk.begin() + (slot + 1) * kvd);
        b.insert(b.end(), ckc.begin() + slot * kvd, ckc.begin() + (slot + 1) * kvd);
      }
      EXPECT_LT(rel_l2(a, b), 2e-2) << "k cache, n=" << n;
    }
  }
}

// Qwen3's attention prologue: rms_norm of every q head and every k head in place (one weight per
// head dim), RoPE, then the KV write. The backend folds both norms into the RoPE kernel (the
// per-head kernel at decode sizes, the per-token one above 64 tokens, and plain RoPE when no
// write follows); q, k and the cache rows must match the CPU's unfused ops.
TEST_F(CudaOps, QkNormFoldedIntoRopeMatchesCpu) {
  for (int n : {1, 5, 70}) {
    for (bool write : {true, false}) {
      const int heads = 8, kvh = 2, hd = 64, qd = heads * hd, kvd = kvh * hd, bs = 16;
      auto q = random_values(rng_, static_cast<size_t>(n) * qd, 3.0f), k = random_values(rng_, static_cast<size_t>(n) * kvd, 3.0f);
      auto v = random_values(rng_, static_cast<size_t>(n) * kvd, 1.0f);
      std::vector<float> qw(hd), kw(hd), inv(hd / 2);
      for (auto* w : {&qw, &kw}) {
        for (auto& x : *w) x = 1.0f + std::uniform_real_distribution<float>(-0.5f, 0.5f)(rng_);
      }
      for (int i = 0; i < hd / 2; ++i) inv[static_cast<size_t>(i)] = static_cast<float>(std::pow(10000.0, -2.0 * i / hd));
      std::vector<int32_t> pos(static_cast<size_t>(n));
      std::vector<int64_t> slots(static_cast<size_t>(n));
      for (int t = 0; t < n; ++t) {
        pos[static_cast<size_t>(t)] = 11 * t + 2;
        slots[static_cast<size_t>(t)] = 3 * t + 1;
      }
      AttentionMetadata m;
      m.num_tokens = n;
      m.slot_mapping = slots.data();
      m.block_size = bs;
      const int nb = (3 * n + 1) / bs + 1;
      RopeParams rp{hd, true, inv.data(), 1.0f};

      Tensor QW = upload(qw, {hd}), KW = upload(kw, {hd});
      DeviceTensor Q(DType::kBF16, {n, qd}), K(DType::kBF16, {n, kvd}), V(DType::kBF16, {n, kvd});
      DeviceTensor KC(DType::kBF16, {nb, bs, kvh, hd}), VC(DType::kBF16, {nb, bs, kvh, hd});
      Q.set(q);
      K.set(k);
      V.set(v);
      Tensor qh = Q.t.reshape({n * heads, hd}), kh = K.t.reshape({n * kvh, hd});
      Tensor Q3 = Q.t.reshape({n, heads, hd}), K3 = K.t.reshape({n, kvh, hd}), V3 = V.t.reshape({n, kvh, hd});
      gpu_->rms_norm(qh, QW, 1e-6f, qh);
      gpu_->rms_norm(kh, KW, 1e-6f, kh);
      gpu_->rope(Q3, K3, pos.data(), rp);
      if (write) gpu_->write_kv(K3, V3, KC.t, VC.t, m);

      std::vector<float> ckc(static_cast<size_t>(nb) * bs * kvd, 0.0f), cvc(ckc.size(), 0.0f);
      Tensor tq = host_tensor(q, {n * heads, hd}), tk = host_tensor(k, {n * kvh, hd});
      cpu_->rms_norm(tq, host_tensor(qw, {hd}), 1e-6f, tq);
      cpu_->rms_norm(tk, host_tensor(kw, {hd}), 1e-6f, tk);
      Tensor tq3 = tq.reshape({n, heads, hd}), tk3 = tk.reshape({n, kvh, hd});
      Tensor tv3 = host_tensor(v, {n, kvh, hd}), tkc = host_tensor(ckc, {nb, bs, kvh, hd}), tvc = host_tensor(cvc, {nb, bs, kvh, hd});
      cpu_->rope(tq3, tk3, pos.data(), rp);
      if (write) cpu_->write_kv(tk3, tv3, tkc, tvc, m);

      const std::string what = " n=" + std::to_string(n) + (write ? " with the KV write" : " RoPE alone");
      EXPECT_LT(rel_l2(read_back(*gpu_, Q.t), q), 1e-2) << "q" << what;
      EXPECT_LT(rel_l2(read_back(*gpu_, K.t), k), 1e-2) << "k" << what;
      if (write) {  // the written rows only: the rest of the device cache was never set
        const auto gk = read_back(*gpu_, KC.t);
        std::vector<float> a, b;
        for (int64_t slot : slots) {
          a.insert(a.end(), gk.begin() + slot * kvd, gk.begin() + (slot + 1) * kvd);
          b.insert(b.end(), ckc.begin() + slot * kvd, ckc.begin() + (slot + 1) * kvd);
        }
        EXPECT_LT(rel_l2(a, b), 1e-2) << "k cache" << what;
      }
    }
  }
}

TEST_F(CudaOps, RmsNormAndAddRmsNormMatchCpu) {
  for (auto [rows, d] : {std::pair{1, 64}, {7, 4096}, {33, 576}, {5, 100}, {300, 128}}) {
    auto x = random_values(rng_, static_cast<size_t>(rows) * d, 3.0f);
    auto r = random_values(rng_, static_cast<size_t>(rows) * d, 3.0f);
    std::vector<float> w(static_cast<size_t>(d));
    for (auto& v : w) v = 1.0f + std::uniform_real_distribution<float>(-0.5f, 0.5f)(rng_);
    Tensor wg = upload(w, {d});
    DeviceTensor xg(DType::kBF16, {rows, d}), rg(DType::kBF16, {rows, d}), out(DType::kBF16, {rows, d});
    xg.set(x);
    rg.set(r);
    gpu_->rms_norm(xg.t, wg, 1e-5f, out.t);
    std::vector<float> ref(x.size());
    Tensor rt = host_tensor(ref, {rows, d});
    cpu_->rms_norm(host_tensor(x, {rows, d}), host_tensor(w, {d}), 1e-5f, rt);
    EXPECT_LT(rel_l2(read_back(*gpu_, out.t), ref), 1e-2) << "rms_norm " << rows << "x" << d;
    // In place, as the model runs QK-norm.
    gpu_->rms_norm(xg.t, wg, 1e-5f, xg.t);
    EXPECT_LT(rel_l2(read_back(*gpu_, xg.t), ref), 1e-2) << "rms_norm in place";
    xg.set(x);
    gpu_->add_rms_norm(rg.t, xg.t, wg, 1e-6f, out.t);
    std::vector<float> rr = r, ref2(x.size());
    Tensor rrt = host_tensor(rr, {rows, d}), rt2 = host_tensor(ref2, {rows, d});
    cpu_->add_rms_norm(rrt, host_tensor(x, {rows, d}), host_tensor(w, {d}), 1e-6f, rt2);
    EXPECT_LT(rel_l2(read_back(*gpu_, out.t), ref2), 1e-2) << "add_rms_norm out";
    EXPECT_LT(rel_l2(read_back(*gpu_, rg.t), rr), 1e-2) << "add_rms_norm residual";
  }
}

TEST_F(CudaOps, AddGatedSoftcapGatherMatchCpu) {
  const int n = 45, d = 1000;
  auto a = random_values(rng_, static_cast<size_t>(n) * d, 4.0f), b = random_values(rng_, static_cast<size_t>(n) * d, 4.0f);
  DeviceTensor ag(DType::kBF16, {n, d}), bg(DType::kBF16, {n, d});
  ag.set(a);
  bg.set(b);
  gpu_->add(ag.t, bg.t);
  std::vector<float> ra = a;
  Tensor rat = host_tensor(ra, {n, d});
  cpu_->add(rat, host_tensor(b, {n, d}));
  EXPECT_LT(rel_l2(read_back(*gpu_, ag.t), ra), 1e-2) << "add";

  for (auto act : {GateActivation::kSilu, GateActivation::kGeluTanh}) {
    for (int dd : {1000, 1003}) {
      auto g = random_values(rng_, static_cast<size_t>(n) * dd, 4.0f), u = random_values(rng_, static_cast<size_t>(n) * dd, 2.0f);
      DeviceTensor gg(DType::kBF16, {n, dd}), ug(DType::kBF16, {n, dd});
      gg.set(g);
      ug.set(u);
      gpu_->gated_activation(gg.t, ug.t, act, gg.t);  // in place, as the model does
      std::vector<float> ref(g.size());
      Tensor rt = host_tensor(ref, {n, dd});
      cpu_->gated_activation(host_tensor(g, {n, dd}), host_tensor(u, {n, dd}), act, rt);
      EXPECT_LT(rel_l2(read_back(*gpu_, gg.t), ref), 1e-2) << "gated " << static_cast<int>(act) << " d=" << dd;
    }
  }

  auto l = random_values(rng_, static_cast<size_t>(n) * d, 80.0f);
  DeviceTensor lg(DType::kF32, {n, d});
  lg.set(l);
  gpu_->softcap(lg.t, 30.0f);
  std::vector<float> rl = l;
  Tensor rlt = host_tensor(rl, {n, d});
  cpu_->softcap(rlt, 30.0f);
  EXPECT_LT(rel_l2(read_back(*gpu_, lg.t), rl), 1e-5) << "softcap";

  std::vector<int32_t> rows = {3, 0, 44, 3, 17};
  DeviceTensor out(DType::kBF16, {5, d});
  ag.set(a);
  gpu_->gather_rows(ag.t, rows.data(), 5, out.t);
  std::vector<float> ref(5 * static_cast<size_t>(d));
  Tensor rt = host_tensor(ref, {5, d});
  cpu_->gather_rows(host_tensor(a, {n, d}), rows.data(), 5, rt);
  EXPECT_EQ(rel_l2(read_back(*gpu_, out.t), ref), 0.0) << "gather_rows";
}

TEST_F(CudaOps, RopeMatchesCpu) {
  struct Case { int n, heads, kvh, hd, rd; bool neox; float af; };
  for (const Case c : {Case{7, 32, 8, 128, 128, true, 1.0f}, {3, 4, 1, 256, 256, true, 1.0f}, {5, 9, 3, 64, 64, false, 1.0f},
                       {4, 8, 2, 128, 64, true, 1.2f}}) {
    auto q = random_values(rng_, static_cast<size_t>(c.n) * c.heads * c.hd);
    auto k = random_values(rng_, static_cast<size_t>(c.n) * c.kvh * c.hd);
    std::vector<int32_t> pos(static_cast<size_t>(c.n));
    for (auto& p : pos) p = static_cast<int32_t>(rng_() % 9000);
    std::vector<float> inv(static_cast<size_t>(c.rd / 2));
    for (int i = 0; i < c.rd / 2; ++i) inv[static_cast<size_t>(i)] = static_cast<float>(std::pow(500000.0, -2.0 * i / c.rd));
    RopeParams p{c.rd, c.neox, inv.data(), c.af};
    DeviceTensor qg(DType::kBF16, {c.n, c.heads, c.hd}), kg(DType::kBF16, {c.n, c.kvh, c.hd});
    qg.set(q);
    kg.set(k);
    gpu_->rope(qg.t, kg.t, pos.data(), p);
    std::vector<float> rq = q, rk = k;
    Tensor rqt = host_tensor(rq, {c.n, c.heads, c.hd}), rkt = host_tensor(rk, {c.n, c.kvh, c.hd});
    cpu_->rope(rqt, rkt, pos.data(), p);
    EXPECT_LT(rel_l2(read_back(*gpu_, qg.t), rq), 1e-2) << "rope q hd=" << c.hd;
    EXPECT_LT(rel_l2(read_back(*gpu_, kg.t), rk), 1e-2) << "rope k hd=" << c.hd;
  }
}

// A paged-attention scenario: sequences with context lengths and query counts, random blocks.
struct AttnCase {
  const char* name;
  int heads, kvh, hd;
  std::vector<int> seq_lens, q_lens;
  int window = 0;
  float softcap = 0.0f;
  int block_size = 16;
  int extra_blocks = 2;  // block-table capacity beyond the longest sequence
  bool sinks = false;    // attention-sink logits per head (gpt-oss)
};

class CudaAttention : public CudaOps {
 protected:
  void run(const AttnCase& c);
};

void CudaAttention::run(const AttnCase& c) {
  const int S = static_cast<int>(c.seq_lens.size()), bs = c.block_size;
  int max_blocks = 0, total_blocks = 0, total_ctx = 0, total_q = 0;
  for (int s = 0; s < S; ++s) {
    const int nb = (c.seq_lens[s] + bs - 1) / bs;
    max_blocks = std::max(max_blocks, nb);
    total_blocks += nb;
    total_ctx += c.seq_lens[s];
    total_q += c.q_lens[s];
  }
  max_blocks += c.extra_blocks;
  const int num_blocks = total_blocks + 3;
  std::vector<int32_t> perm(static_cast<size_t>(num_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng_);
  std::vector<int32_t> tables(static_cast<size_t>(S) * max_blocks, 0);
  int next = 0;
  for (int s = 0; s < S; ++s) {
    for (int b = 0; b < (c.seq_lens[s] + bs - 1) / bs; ++b) tables[static_cast<size_t>(s) * max_blocks + b] = perm[next++];
  }
  // Every context token's K/V, written through the slot mapping.
  std::vector<int64_t> all_slots;
  for (int s = 0; s < S; ++s) {
    for (int p = 0; p < c.seq_lens[s]; ++p) {
      all_slots.push_back(int64_t{tables[static_cast<size_t>(s) * max_blocks + p / bs]} * bs + p % bs);
    }
  }
  AttentionMetadata wm;
  wm.num_tokens = total_ctx;
  wm.slot_mapping = all_slots.data();
  wm.block_size = bs;
  const int64_t row = int64_t{c.kvh} * c.hd;
  auto kv_k = random_values(rng_, static_cast<size_t>(total_ctx * row)), kv_v = random_values(rng_, static_cast<size_t>(total_ctx * row));
  DeviceTensor kd(DType::kBF16, {total_ctx, c.kvh, c.hd}), vd(DType::kBF16, {total_ctx, c.kvh, c.hd});
  kd.set(kv_k);
  vd.set(kv_v);
  DeviceTensor kc(DType::kBF16, {num_blocks, bs, c.kvh, c.hd}), vc(DType::kBF16, {num_blocks, bs, c.kvh, c.hd});
  std::vector<float> ck(static_cast<size_t>(num_blocks) * bs * row, 0.0f), cv(ck.size(), 0.0f);
  Tensor ckt = host_tensor(ck, {num_blocks, bs, c.kvh, c.hd}), cvt = host_tensor(cv, {num_blocks, bs, c.kvh, c.hd});
  gpu_->write_kv(kd.t, vd.t, kc.t, vc.t, wm);
  cpu_->write_kv(host_tensor(kv_k, {total_ctx, c.kvh, c.hd}), host_tensor(kv_v, {total_ctx, c.kvh, c.hd}), ckt, cvt, wm);
  {
    const auto gk = read_back(*gpu_, kc.t);
    std::vector<float> a, b;
    for (int64_t slot : all_slots) {
      a.insert(a.end(), gk.begin() + slot * row, gk.begin() + (slot + 1) * row);
      b.insert(b.end(), ck.begin() + slot * row, ck.begin() + (slot + 1) * row);
    }
    EXPECT_EQ(rel_l2(a, b), 0.0) << c.name << ": write_kv";
  }

  std::vector<int32_t> qsl(1, 0), lens(c.seq_lens.begin(), c.seq_lens.end());
  std::vector<int64_t> qslots;
  for (int s = 0; s < S; ++s) {
    qsl.push_back(qsl.back() + c.q_lens[s]);
    for (int p = c.seq_lens[s] - c.q_lens[s]; p < c.seq_lens[s]; ++p) {
      qslots.push_back(int64_t{tables[static_cast<size_t>(s) * max_blocks + p / bs]} * bs + p % bs);
    }
  }
  AttentionMetadata m;
  m.num_seqs = S;
  m.num_tokens = total_q;
  m.query_start_loc = qsl.data();
  m.seq_lens = lens.data();
  m.block_tables = tables.data();
  m.max_blocks_per_seq = max_blocks;
  m.slot_mapping = qslots.data();
  m.block_size = bs;
  AttentionParams ap{1.0f / std::sqrt(static_cast<float>(c.hd)), c.window, c.softcap};
  auto q = random_values(rng_, static_cast<size_t>(total_q) * c.heads * c.hd, 2.0f);
  DeviceTensor qg(DType::kBF16, {total_q, c.heads, c.hd}), out(DType::kBF16, {total_q, c.heads, c.hd});
  qg.set(q);
  // Sinks around the scores' size, one far above them (the head's output near zero) and one far below.
  std::vector<float> sinks(static_cast<size_t>(c.heads), 0.0f);
  DeviceTensor sinks_dev(DType::kF32, {c.heads});
  AttentionParams gpu_ap = ap, cpu_ap = ap;
  if (c.sinks) {
    sinks = random_values(rng_, static_cast<size_t>(c.heads), 3.0f);
    sinks[0] = 12.0f;
    if (c.heads > 1) sinks[1] = -40.0f;
    sinks_dev.set(sinks);
    gpu_ap.sinks = sinks_dev.t;
    cpu_ap.sinks = host_tensor(sinks, {c.heads});
  }
  gpu_->attention(qg.t, kc.t, vc.t, m, gpu_ap, out.t);
  std::vector<float> ref(q.size());
  Tensor rt = host_tensor(ref, {total_q, c.heads, c.hd});
  cpu_->attention(host_tensor(q, {total_q, c.heads, c.hd}), ckt, cvt, m, cpu_ap, rt);
  EXPECT_LT(rel_l2(read_back(*gpu_, out.t), ref), 2e-2) << c.name;
}

TEST_F(CudaAttention, DecodeGqa) { run({"decode 32/8/128", 32, 8, 128, {1, 17, 100, 300, 513}, {1, 1, 1, 1, 1}}); }
TEST_F(CudaAttention, DecodeGroupOfSeven) { run({"decode 28/4/128", 28, 4, 128, {33, 250, 1000}, {1, 1, 1}}); }
TEST_F(CudaAttention, DecodeManySequences) {
  AttnCase c{"decode x64", 32, 8, 128, {}, {}};
  for (int i = 0; i < 64; ++i) {
    c.seq_lens.push_back(1 + static_cast<int>(rng_() % 700));
    c.q_lens.push_back(1);
  }
  run(c);
}
TEST_F(CudaAttention, DecodeHeadDim64And256) {
  run({"decode 9/3/64", 9, 3, 64, {70, 5}, {1, 1}});
  run({"decode 4/1/256 window softcap", 4, 1, 256, {40, 300}, {1, 1}, 32, 50.0f});
}
TEST_F(CudaAttention, Prefill) { run({"prefill 32/8/128", 32, 8, 128, {1, 20, 64, 130}, {1, 20, 64, 130}}); }
TEST_F(CudaAttention, ChunkedPrefillMixedWithDecode) {
  run({"mixed 32/8/128", 32, 8, 128, {200, 50, 77, 9, 1}, {37, 1, 77, 1, 1}});
}
TEST_F(CudaAttention, PrefillHeadDims) {
  run({"prefill 9/3/64", 9, 3, 64, {70, 5}, {70, 1}});
  run({"prefill 8/8/64 mha", 8, 8, 64, {65, 3}, {3, 3}});
  run({"prefill 28/4/128", 28, 4, 128, {90, 31}, {90, 30}});
  run({"prefill 4/1/256 window softcap", 4, 1, 256, {40, 300}, {40, 100}, 32, 50.0f});
  run({"prefill 16/2/128 block 32", 16, 2, 128, {100}, {10}, 0, 0.0f, 32});
  run({"prefill 32/8/128 window", 32, 8, 128, {300, 150}, {300, 64}, 100});
}
// Attention sinks through the decode kernels: the default plan (per-head below 8 sequences, the
// all-heads plan from 8, on mma_bulk where 8 kv heads of 128 allow), unsplit and split; the device
// script runs CudaAttention.* again under every KVASIR_CUDA_ATTN kernel.
TEST_F(CudaAttention, SinksDecode) {
  run({"sinks decode 32/8/128", 32, 8, 128, {1, 17, 100, 300, 513}, {1, 1, 1, 1, 1}, 0, 0.0f, 16, 2, true});
  run({"sinks decode unsplit", 8, 2, 64, {1, 5}, {1, 1}, 0, 0.0f, 16, 0, true});
  run({"sinks decode 4/1/256 window", 4, 1, 256, {40, 300}, {1, 1}, 32, 0.0f, 16, 2, true});
  AttnCase many{"sinks decode x64", 32, 8, 128, {}, {}};
  for (int i = 0; i < 64; ++i) {
    many.seq_lens.push_back(1 + static_cast<int>(rng_() % 700));
    many.q_lens.push_back(1);
  }
  many.sinks = true;
  run(many);
  AttnCase few_heads{"sinks decode x16 8/2/64", 8, 2, 64, {}, {}};
  for (int i = 0; i < 16; ++i) {
    few_heads.seq_lens.push_back(1 + static_cast<int>(rng_() % 40));
    few_heads.q_lens.push_back(1);
  }
  few_heads.extra_blocks = 0;
  few_heads.sinks = true;
  run(few_heads);
}
TEST_F(CudaAttention, SinksPrefillAndMixed) {
  run({"sinks prefill 32/8/128", 32, 8, 128, {1, 20, 64, 130}, {1, 20, 64, 130}, 0, 0.0f, 16, 2, true});
  run({"sinks mixed 8/1/64 window", 8, 1, 64, {200, 50, 77, 9, 1}, {37, 1, 77, 1, 1}, 16, 0.0f, 16, 2, true});
  run({"sinks prefill 28/4/128", 28, 4, 128, {90, 31}, {90, 30}, 0, 0.0f, 16, 2, true});
}

// The same decode step shape three times while sequences grow: eager, captured, replayed.
TEST_F(CudaOps, DecodeStepsReplayThroughGraphs) {
  const int S = 6, heads = 32, kvh = 8, hd = 128, bs = 16, max_blocks = 8, steps = 5;
  const int num_blocks = S * max_blocks;
  std::vector<int32_t> tables(static_cast<size_t>(num_blocks));
  std::iota(tables.begin(), tables.end(), 0);
  std::shuffle(tables.begin(), tables.end(), rng_);
  const int64_t row = int64_t{kvh} * hd;
  DeviceTensor kc(DType::kBF16, {num_blocks, bs, kvh, hd}), vc(DType::kBF16, {num_blocks, bs, kvh, hd});
  std::vector<float> ck(static_cast<size_t>(num_blocks) * bs * row, 0.0f), cv(ck.size(), 0.0f);
  Tensor ckt = host_tensor(ck, {num_blocks, bs, kvh, hd}), cvt = host_tensor(cv, {num_blocks, bs, kvh, hd});
  std::vector<int32_t> lens(S), qsl(S + 1);
  std::iota(qsl.begin(), qsl.end(), 0);
  for (int s = 0; s < S; ++s) lens[static_cast<size_t>(s)] = 3 + 11 * s;
  std::vector<int64_t> slots(S);
  DeviceTensor kd(DType::kBF16, {S, kvh, hd}), vd(DType::kBF16, {S, kvh, hd}), qg(DType::kBF16, {S, heads, hd}),
      out(DType::kBF16, {S, heads, hd});
  // Prefill the caches through the CPU layout, then copy them over once.
  for (int step = -1; step < steps; ++step) {
    const bool prefill = step < 0;
    AttentionMetadata m;
    m.num_seqs = S;
    m.num_tokens = S;
    m.query_start_loc = qsl.data();
    m.seq_lens = lens.data();
    m.block_tables = tables.data();
    m.max_blocks_per_seq = max_blocks;
    m.slot_mapping = slots.data();
    m.block_size = bs;
    const int reps = prefill ? *std::max_element(lens.begin(), lens.end()) : 1;
    for (int r = 0; r < reps; ++r) {
      // Token at position p for each sequence (prefill: all positions below its length).
      for (int s = 0; s < S; ++s) {
        const int p = prefill ? std::min(r, lens[static_cast<size_t>(s)] - 1) : lens[static_cast<size_t>(s)] - 1;
        slots[static_cast<size_t>(s)] = int64_t{tables[static_cast<size_t>(s) * max_blocks + p / bs]} * bs + p % bs;
      }
      auto k = random_values(rng_, static_cast<size_t>(S) * row), v = random_values(rng_, static_cast<size_t>(S) * row);
      kd.set(k);
      vd.set(v);
      gpu_->write_kv(kd.t, vd.t, kc.t, vc.t, m);
      cpu_->write_kv(host_tensor(k, {S, kvh, hd}), host_tensor(v, {S, kvh, hd}), ckt, cvt, m);
      gpu_->synchronize();
    }
    if (prefill) continue;
    auto q = random_values(rng_, static_cast<size_t>(S) * heads * hd, 2.0f);
    qg.set(q);
    AttentionParams ap{1.0f / std::sqrt(static_cast<float>(hd)), 0, 0.0f};
    gpu_->write_kv(kd.t, vd.t, kc.t, vc.t, m);  // same record sequence every step
    gpu_->attention(qg.t, kc.t, vc.t, m, ap, out.t);
    std::vector<float> ref(q.size());
    Tensor rt = host_tensor(ref, {S, heads, hd});
    cpu_->attention(host_tensor(q, {S, heads, hd}), ckt, cvt, m, ap, rt);
    EXPECT_LT(rel_l2(read_back(*gpu_, out.t), ref), 2e-2) << "step " << step;
    for (auto& l : lens) l += 1;  // the next step's token
  }
  EXPECT_NE(gpu_->stats().find("captures"), std::string::npos);
}

}  // namespace
}  // namespace kvasir
