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

#include "backend/cuda/cuda_ops_test_fixture.h"

namespace kvasir {
namespace {

using cuda_test::DeviceTensor;
using cuda_test::random_values;
using cuda_test::read_back;
using cuda_test::rel_l2;
using cuda_test::CudaOps;
using cuda_test::host_tensor;
using cuda_test::AttnCase;
using cuda_test::CudaAttention;
using cuda_test::PagedKvCache;


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
    EXPECT_LT(linear_error(c.n, c.k, c.m, c.bias, c.f32_out), c.f32_out ? 1e-4 : 1e-2)
        << c.n << "x" << c.k << " -> " << c.m << (c.bias ? " bias" : "");
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

// --calculate-kv-scales on the device: an FP8 cache at scale 0 takes, at its first write, max |K| /
// 200 and max |V| / 100 over the rows that write stores (a padding row, slot -1, is not data): the
// CPU's scales for the same values. It keeps them: a later write encodes with them (saturating past
// the first batch's range) and writes the CPU's codes. A first write of zeros gives 1.
TEST_F(CudaOps, WriteKvCalculatesFp8ScalesOnTheFirstWrite) {
  CudaBackendOptions o;
  o.kv_cache_dtype = DType::kF8E4M3;
  o.calculate_kv_scales = true;
  auto made = create_cuda_backend(o);
  ASSERT_TRUE(made.ok()) << made.status().message();
  Backend& g = **made;
  EXPECT_TRUE(g.calculates_kv_scales());
  EXPECT_FALSE(gpu_->calculates_kv_scales());
  constexpr int kvh = 2, hd = 64, row = kvh * hd, slots = 32, n = 3;
  for (DType dtype : {DType::kF8E4M3, DType::kF8E5M2}) {
    SCOPED_TRACE(dtype_name(dtype));
    DeviceTensor kc(dtype, {1, slots, kvh, hd}), vc(dtype, {1, slots, kvh, hd});
    std::vector<uint8_t> ck(slots * row), cv(slots * row);
    Tensor ckt = Tensor::make(ck.data(), dtype, {1, slots, kvh, hd}), cvt = Tensor::make(cv.data(), dtype, {1, slots, kvh, hd});
    kc.t.cache_scale = vc.t.cache_scale = ckt.cache_scale = cvt.cache_scale = 0.0f;
    std::vector<int64_t> slot_of;
    AttentionMetadata m;
    m.num_tokens = n;
    m.block_size = slots;
    // Writes k and v on both backends; the codes of the rows stored must be equal.
    auto write = [&](std::vector<float> k, std::vector<float> v) {
      m.slot_mapping = slot_of.data();
      DeviceTensor kd(DType::kBF16, {n, kvh, hd}), vd(DType::kBF16, {n, kvh, hd});
      kd.set(k);
      vd.set(v);
      g.write_kv(kd.t, vd.t, kc.t, vc.t, m);
      cpu_->write_kv(host_tensor(k, {n, kvh, hd}), host_tensor(v, {n, kvh, hd}), ckt, cvt, m);
      std::vector<uint8_t> gk(ck.size()), gv(cv.size());
      g.copy_to_host(kc.t, gk.data());
      g.copy_to_host(vc.t, gv.data());
      int differ = 0;
      for (int64_t slot : slot_of) {
        for (int64_t i = slot * row; slot >= 0 && i < (slot + 1) * row; ++i) differ += (gk[i] != ck[i]) + (gv[i] != cv[i]);
      }
      EXPECT_EQ(differ, 0);
    };
    auto k = random_values(rng_, n * row), v = random_values(rng_, n * row, 0.5f);
    k[row + 5] = -3.5f;  // the stored rows' largest |K| and |V|
    v[2 * row + 9] = 1.25f;
    std::fill(k.begin(), k.begin() + row, 100.0f);  // row 0 is padding
    slot_of = {-1, 3, 4};
    write(k, v);
    EXPECT_EQ(kc.t.cache_scale, 3.5f / 200.0f);
    EXPECT_EQ(vc.t.cache_scale, 1.25f / 100.0f);
    EXPECT_EQ(kc.t.cache_scale, ckt.cache_scale);
    EXPECT_EQ(vc.t.cache_scale, cvt.cache_scale);
    // Kept: a later batch 30x wider saturates under the first batch's scales.
    for (float& x : k) x = cuda_test::round_bf16(30.0f * x);  // still bf16 values: both backends see the same
    slot_of = {5, 6, -1};
    write(k, v);
    EXPECT_EQ(kc.t.cache_scale, 3.5f / 200.0f);
    EXPECT_EQ(vc.t.cache_scale, 1.25f / 100.0f);
    // Zeros: 1, not a division by zero.
    DeviceTensor kz(dtype, {1, slots, kvh, hd}), vz(dtype, {1, slots, kvh, hd});
    kz.t.cache_scale = vz.t.cache_scale = 0.0f;
    std::vector<float> zeros(n * row, 0.0f);
    DeviceTensor zd(DType::kBF16, {n, kvh, hd});
    zd.set(zeros);
    g.write_kv(zd.t, zd.t, kz.t, vz.t, m);
    g.synchronize();
    EXPECT_EQ(kz.t.cache_scale, 1.0f);
    EXPECT_EQ(vz.t.cache_scale, 1.0f);
  }
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

}  // namespace

// Declared with the fixture (cuda_ops_test_fixture.h): other files of this binary run cases too.
void cuda_test::CudaAttention::run(const AttnCase& c) {
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
  const bool fp8 = c.kv_cache != DType::kBF16;
  DeviceTensor kc(c.kv_cache, {num_blocks, bs, c.kvh, c.hd}), vc(c.kv_cache, {num_blocks, bs, c.kvh, c.hd});
  kc.t.cache_scale = c.k_scale;
  vc.t.cache_scale = c.v_scale;
  const size_t cache_elems = static_cast<size_t>(num_blocks) * bs * row;
  std::vector<float> ck(fp8 ? 0 : cache_elems, 0.0f), cv(ck.size(), 0.0f);
  std::vector<uint8_t> ck8(fp8 ? cache_elems : 0, 0), cv8(ck8.size(), 0);
  Tensor ckt = fp8 ? Tensor::make(ck8.data(), c.kv_cache, {num_blocks, bs, c.kvh, c.hd})
                   : host_tensor(ck, {num_blocks, bs, c.kvh, c.hd});
  Tensor cvt = fp8 ? Tensor::make(cv8.data(), c.kv_cache, {num_blocks, bs, c.kvh, c.hd})
                   : host_tensor(cv, {num_blocks, bs, c.kvh, c.hd});
  ckt.cache_scale = c.k_scale;
  cvt.cache_scale = c.v_scale;
  gpu_->write_kv(kd.t, vd.t, kc.t, vc.t, wm);
  cpu_->write_kv(host_tensor(kv_k, {total_ctx, c.kvh, c.hd}), host_tensor(kv_v, {total_ctx, c.kvh, c.hd}), ckt, cvt, wm);
  // Scales of 0 (--calculate-kv-scales) are set by the write on either backend: the same ones.
  EXPECT_EQ(kc.t.cache_scale, ckt.cache_scale) << c.name;
  EXPECT_EQ(vc.t.cache_scale, cvt.cache_scale) << c.name;
  EXPECT_GT(kc.t.cache_scale, 0.0f) << c.name;
  if (fp8) {
    // The same codes: the inputs are bf16 values, both divide by the scale in float32 and round
    // to nearest even with saturation.
    std::vector<uint8_t> gk(cache_elems), gv(cache_elems);
    gpu_->copy_to_host(kc.t, gk.data());
    gpu_->copy_to_host(vc.t, gv.data());
    int64_t differ = 0;
    for (int64_t slot : all_slots) {
      for (int64_t i = slot * row; i < (slot + 1) * row; ++i) differ += (gk[i] != ck8[i]) + (gv[i] != cv8[i]);
    }
    EXPECT_EQ(differ, 0) << c.name << ": write_kv FP8 codes";
  } else {
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

namespace {

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
// Long contexts in a block table planned for far more (a 128k table at batch 1): the split plan is
// made for the table's capacity, and the splits are cut from each sequence's own length
// (splits_by_context), so every split has keys; also windows starting deep in a long context.
TEST_F(CudaAttention, DecodeLongContextsInALargeTable) {
  AttnCase one{"decode 32k in 128k table", 32, 8, 128, {32000}, {1}};
  one.extra_blocks = (131072 - 32000) / 16;
  run(one);
  AttnCase mixed{"decode long x3", 32, 8, 128, {9000, 20011, 4097}, {1, 1, 1}};
  mixed.extra_blocks = 1000;
  run(mixed);
  run({"decode long window", 16, 2, 128, {20000, 7000}, {1, 1}, 4096});
  AttnCase sinks{"sinks decode long", 32, 8, 128, {12345}, {1}, 0, 0.0f, 16, 3000, true};
  run(sinks);
  // The 8-kv-head shape (mma_bulk from 8 sequences) at every GQA group it takes.
  for (int heads : {8, 16, 32, 64}) run(twelve_decodes("decode x12 groups", heads));
}
TEST_F(CudaAttention, Prefill) { run({"prefill 32/8/128", 32, 8, 128, {1, 20, 64, 130}, {1, 20, 64, 130}}); }
TEST_F(CudaAttention, ChunkedPrefillMixedWithDecode) {
  run({"mixed 32/8/128", 32, 8, 128, {200, 50, 77, 9, 1}, {37, 1, 77, 1, 1}});
}
// Many key tiles through the prefill pipeline: a long prompt, a late chunk over a long cached
// context, windows and soft-capping deep in a sequence, every head_dim, group sizes that leave
// padding rows in a tile.
TEST_F(CudaAttention, PrefillLongContexts) {
  run({"prefill 2000", 32, 8, 128, {2000}, {2000}});
  run({"chunk 300 of 4100", 32, 8, 128, {4100, 700}, {300, 1}});
  run({"prefill window 1000 softcap", 16, 2, 128, {1500}, {1500}, 1000, 30.0f});
  run({"prefill 1200 hd64 group 7", 28, 4, 64, {1200}, {1200}});
  run({"chunk 200 of 1800 hd256", 8, 2, 256, {1800}, {200}});
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
// FP8 KV cache (--kv-cache-dtype fp8 / fp8_e5m2): both backends write the same codes (checked bit
// for bit), then every kernel that reads them against the CPU's reading: decode on the per-head
// plan (below 8 sequences) and the all-heads plan (8 and more: mma_bulk where 8 kv heads of 128
// allow, its f16 path over permuted dims, else all_heads), split and unsplit, long contexts in a large table; prefill, chunked prefill and mixed
// steps on our prefill kernel (FlashInfer's is bf16-only); windows, soft-cap, sinks; scales other
// than 1 (from a checkpoint), under which saturation matters. The device script runs these under
// every KVASIR_CUDA_ATTN kernel as well.
using cuda_test::with_fp8_cache;
TEST_F(CudaAttention, Fp8CacheDecode) {
  for (DType t : {DType::kF8E4M3, DType::kF8E5M2}) {
    run(with_fp8_cache({"fp8 decode 32/8/128", 32, 8, 128, {1, 17, 100, 300, 513}, {1, 1, 1, 1, 1}}, t));
    run(with_fp8_cache({"fp8 decode 9/3/64 scaled", 9, 3, 64, {70, 5}, {1, 1}}, t, 0.05f, 3.0f));
    run(with_fp8_cache({"fp8 decode 4/1/256 window softcap", 4, 1, 256, {40, 300}, {1, 1}, 32, 50.0f}, t, 0.5f, 0.25f));
    AttnCase many{"fp8 decode x64", 32, 8, 128, {}, {}};
    for (int i = 0; i < 64; ++i) {
      many.seq_lens.push_back(1 + static_cast<int>(rng_() % 700));
      many.q_lens.push_back(1);
    }
    run(with_fp8_cache(many, t, 2.0f, 0.5f));
    AttnCase sinks{"fp8 sinks decode x12 8/2/64", 8, 2, 64, {}, {}};
    for (int i = 0; i < 12; ++i) {
      sinks.seq_lens.push_back(1 + static_cast<int>(rng_() % 300));
      sinks.q_lens.push_back(1);
    }
    sinks.sinks = true;
    run(with_fp8_cache(sinks, t));
    // Scales calculated by the first write (--calculate-kv-scales), then read by the kernels.
    run(with_fp8_cache({"fp8 decode calculated scales", 32, 8, 128, {1, 17, 300, 513}, {1, 1, 1, 1}}, t, 0.0f, 0.0f));
  }
  // mma_bulk's FP8 path at every GQA group it takes (1, 2, 4, 8 query heads per kv head), partial
  // first and last tiles (contexts not multiples of 8), splits of long contexts, scales not 1.
  for (int heads : {8, 16, 32, 64}) {
    run(with_fp8_cache(twelve_decodes("fp8 decode x12 mma_bulk", heads), heads == 16 ? DType::kF8E5M2 : DType::kF8E4M3,
                       0.75f, 1.5f));
  }
  AttnCase bulk_window{"fp8 decode x8 window softcap", 32, 8, 128, {3000, 41, 700, 5, 1200, 64, 65, 2000}, {1, 1, 1, 1, 1, 1, 1, 1},
                       500, 30.0f};
  run(with_fp8_cache(bulk_window, DType::kF8E4M3));
  AttnCase one{"fp8 decode 32k in 128k table", 32, 8, 128, {32000}, {1}};
  one.extra_blocks = (131072 - 32000) / 16;
  run(with_fp8_cache(one, DType::kF8E4M3));
  run(with_fp8_cache({"fp8 decode long window", 16, 2, 128, {20000, 7000}, {1, 1}, 4096}, DType::kF8E4M3));
}
TEST_F(CudaAttention, Fp8CachePrefillAndMixed) {
  for (DType t : {DType::kF8E4M3, DType::kF8E5M2}) {
    run(with_fp8_cache({"fp8 prefill 32/8/128", 32, 8, 128, {1, 20, 64, 130}, {1, 20, 64, 130}}, t));
    run(with_fp8_cache({"fp8 mixed 32/8/128", 32, 8, 128, {200, 50, 77, 9, 1}, {37, 1, 77, 1, 1}}, t, 0.1f, 4.0f));
    run(with_fp8_cache({"fp8 prefill 9/3/64", 9, 3, 64, {70, 5}, {70, 1}}, t));
    run(with_fp8_cache({"fp8 prefill 4/1/256 window softcap", 4, 1, 256, {40, 300}, {40, 100}, 32, 50.0f}, t));
    run(with_fp8_cache({"fp8 mixed calculated scales", 32, 8, 128, {200, 50, 9}, {37, 1, 9}}, t, 0.0f, 0.0f));
  }
  run(with_fp8_cache({"fp8 prefill 2000", 32, 8, 128, {2000}, {2000}}, DType::kF8E4M3));
  run(with_fp8_cache({"fp8 chunk 300 of 4100", 32, 8, 128, {4100, 700}, {300, 1}}, DType::kF8E4M3, 0.5f, 2.0f));
  run(with_fp8_cache({"fp8 sinks mixed 8/1/64 window", 8, 1, 64, {200, 50, 77, 9, 1}, {37, 1, 77, 1, 1}, 16, 0.0f, 16, 2, true},
                     DType::kF8E4M3));
}

TEST_F(CudaAttention, SinksPrefillAndMixed) {
  run({"sinks prefill 32/8/128", 32, 8, 128, {1, 20, 64, 130}, {1, 20, 64, 130}, 0, 0.0f, 16, 2, true});
  run({"sinks mixed 8/1/64 window", 8, 1, 64, {200, 50, 77, 9, 1}, {37, 1, 77, 1, 1}, 16, 0.0f, 16, 2, true});
  run({"sinks prefill 28/4/128", 28, 4, 128, {90, 31}, {90, 30}, 0, 0.0f, 16, 2, true});
}

// The same decode step shape three times while sequences grow: eager, captured, replayed.
TEST_F(CudaOps, DecodeStepsReplayThroughGraphs) {
  const int S = 6, heads = 32, kvh = 8, hd = 128, bs = 16, max_blocks = 8, steps = 5;
  const int64_t row = int64_t{kvh} * hd;
  PagedKvCache kv(rng_, S, kvh, hd, bs, max_blocks);
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
    m.block_tables = kv.tables.data();
    m.max_blocks_per_seq = max_blocks;
    m.slot_mapping = slots.data();
    m.block_size = bs;
    const int reps = prefill ? *std::max_element(lens.begin(), lens.end()) : 1;
    for (int r = 0; r < reps; ++r) {
      // Token at position p for each sequence (prefill: all positions below its length).
      for (int s = 0; s < S; ++s) {
        const int p = prefill ? std::min(r, lens[static_cast<size_t>(s)] - 1) : lens[static_cast<size_t>(s)] - 1;
        slots[static_cast<size_t>(s)] = kv.slot(s, p);
      }
      auto k = random_values(rng_, static_cast<size_t>(S) * row), v = random_values(rng_, static_cast<size_t>(S) * row);
      kd.set(k);
      vd.set(v);
      gpu_->write_kv(kd.t, vd.t, kv.k.t, kv.v.t, m);
      cpu_->write_kv(host_tensor(k, {S, kvh, hd}), host_tensor(v, {S, kvh, hd}), kv.host_k_t, kv.host_v_t, m);
      gpu_->synchronize();
    }
    if (prefill) continue;
    auto q = random_values(rng_, static_cast<size_t>(S) * heads * hd, 2.0f);
    qg.set(q);
    AttentionParams ap{1.0f / std::sqrt(static_cast<float>(hd)), 0, 0.0f};
    gpu_->write_kv(kd.t, vd.t, kv.k.t, kv.v.t, m);  // same record sequence every step
    gpu_->attention(qg.t, kv.k.t, kv.v.t, m, ap, out.t);
    std::vector<float> ref(q.size());
    Tensor rt = host_tensor(ref, {S, heads, hd});
    cpu_->attention(host_tensor(q, {S, heads, hd}), kv.host_k_t, kv.host_v_t, m, ap, rt);
    EXPECT_LT(rel_l2(read_back(*gpu_, out.t), ref), 2e-2) << "step " << step;
    for (auto& l : lens) l += 1;  // the next step's token
  }
  EXPECT_NE(gpu_->stats().find("captures"), std::string::npos);
}

}  // namespace
}  // namespace kvasir
