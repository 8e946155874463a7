// The op sequences the CUDA backend fuses while recording a step (cuda_fused_ops.cpp) against the
// CPU's unfused ops: q/k/v and gate/up GEMVs, residual add + norm, a whole decoder layer's chain
// (with and without norms folded into the GEMVs), and Qwen3's per-head q/k norms folded into the
// RoPE (+KV write) kernel. Every intermediate the unfused ops write must still be right. Skips
// without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_ops_test_fixture.h"
#include "backend/cuda/l2_prefetch_slot.h"

namespace kvasir {
namespace {

// Where the L2 prefetch record of a decode-sized linear goes (host only: runs without a GPU).
std::optional<cuda::L2PrefetchSlot> slot_of(std::vector<cuda::OpKind> kinds, bool every) {
  return cuda::l2_prefetch_slot([&](size_t i) { return kinds[i]; }, kinds.size(), every);
}
TEST(L2PrefetchSlot, TheOProjectionPrefetchesFromRightAfterTheQkvGemv) {
  using K = cuda::OpKind;
  const auto o = slot_of({K::kAddRmsNorm, K::kMultiGemv, K::kRopeWriteKv, K::kDecodeAttention, K::kMultiGemv}, false);
  ASSERT_TRUE(o.has_value());
  EXPECT_EQ(o->insert_at, 2u);  // before the RoPE / KV write
  EXPECT_EQ(o->existing, 0u);
  // Quantized o projections and the separate RoPE / KV write records count the same.
  const auto w4 = slot_of({K::kW4a16Linear, K::kRope, K::kWriteKv, K::kDecodeAttention, K::kW4a16Linear}, false);
  ASSERT_TRUE(w4.has_value());
  EXPECT_EQ(w4->insert_at, 1u);
  // A prefill or mixed step's attention is not a decode gap; nor is a gap without an attention.
  EXPECT_FALSE(slot_of({K::kMultiGemv, K::kRopeWriteKv, K::kPrefillAttention, K::kLinear}, false).has_value());
  EXPECT_FALSE(slot_of({K::kMultiGemv, K::kAddRmsNorm, K::kMultiGemv}, false).has_value());
  // Nothing streams weights before it in the step, or the step holds only the linear.
  EXPECT_FALSE(slot_of({K::kRmsNorm, K::kDecodeAttention, K::kMultiGemv}, false).has_value());
  EXPECT_FALSE(slot_of({K::kMultiGemv}, true).has_value());
}
TEST(L2PrefetchSlot, EveryLinearPrefetchesFromItsGapAndProjectionsOfOneGapShareARecord) {
  using K = cuda::OpKind;
  const auto qkv = slot_of({K::kFp8Linear, K::kAddRmsNorm, K::kFp8Linear}, true);
  ASSERT_TRUE(qkv.has_value());
  EXPECT_EQ(qkv->insert_at, 1u);
  EXPECT_EQ(qkv->existing, 0u);
  // k joining q's record finds q's prefetch record in the gap.
  const auto k = slot_of({K::kFp8Linear, K::kL2Prefetch, K::kAddRmsNorm, K::kFp8Linear}, true);
  ASSERT_TRUE(k.has_value());
  EXPECT_EQ(k->existing, 2u);
  // Nothing between two linears (gate/up then down): the record goes right between them.
  const auto down = slot_of({K::kGemvGated, K::kMultiGemv}, true);
  ASSERT_TRUE(down.has_value());
  EXPECT_EQ(down->insert_at, 1u);
  // MoE experts and routes stream weights too: the gap starts after them.
  const auto after_moe = slot_of({K::kMoeRoute, K::kMoeExperts, K::kAddRmsNorm, K::kMultiGemv}, true);
  ASSERT_TRUE(after_moe.has_value());
  EXPECT_EQ(after_moe->insert_at, 2u);
}

using cuda_test::CudaOps;
using cuda_test::DeviceTensor;
using cuda_test::host_tensor;
using cuda_test::random_values;
using cuda_test::read_back;
using cuda_test::rel_l2;
using cuda_test::slot_rows;

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
      EXPECT_LT(rel_l2(slot_rows(read_back(*gpu_, KC.t), slots, kvd), slot_rows(ckc, slots, kvd)), 2e-2)
          << "k cache, n=" << n;
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
        EXPECT_LT(rel_l2(slot_rows(read_back(*gpu_, KC.t), slots, kvd), slot_rows(ckc, slots, kvd)), 1e-2)
            << "k cache" << what;
      }
    }
  }
}
}  // namespace
}  // namespace kvasir
