// The CPU MLA ops (write_latent_kv, mla_attention) against a naive reference that decompresses
// the latent cache into per-head keys and values (k = [W_UK c_kv | rope(k_pe)], v = W_UV c_kv)
// and runs plain causal attention in double precision: the absorbed form must be the same math.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"

namespace kvasir {
namespace {

struct Dims {
  int H = 4, nope = 16, R = 8, L = 24, V = 12;
  int qk() const { return nope + R; }
};

std::vector<float> random_vec(std::mt19937& rng, size_t n, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

void rope_ref(double* v, int R, int pos, const std::vector<float>& inv_freq, bool neox) {
  for (int i = 0; i < R / 2; ++i) {
    const double th = static_cast<double>(static_cast<float>(pos) * inv_freq[i]);
    const int i0 = neox ? i : 2 * i, i1 = neox ? i + R / 2 : 2 * i + 1;
    const double a = v[i0], b = v[i1];
    v[i0] = a * std::cos(th) - b * std::sin(th);
    v[i1] = b * std::cos(th) + a * std::sin(th);
  }
}

// Sequences with their full token data (every position's c_kv and k_pe), a paged layout with
// shuffled blocks, and which trailing tokens are this step's queries.
struct Scenario {
  Dims d;
  int block_size = 16;
  std::vector<int> ctx, num_q;   // per sequence
  std::vector<std::vector<float>> c_kv, k_pe;  // per sequence [ctx, L], [ctx, R]
  std::vector<std::vector<int32_t>> tables;
  int num_blocks = 0;
  std::vector<float> q;          // [sum num_q, H, qk]
  std::vector<float> kv_b;       // [H * (nope + V), L]
  std::vector<float> w_uk_t, w_uv;
  std::vector<float> inv_freq;
  bool neox = false;
  float scale = 0.3f;

  Scenario(std::vector<int> ctx_, std::vector<int> num_q_, bool neox_, uint32_t seed) : ctx(ctx_), num_q(num_q_), neox(neox_) {
    std::mt19937 rng(seed);
    for (int c : ctx) num_blocks += (c + block_size - 1) / block_size;
    std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    size_t next = 0;
    int total_q = 0;
    for (size_t s = 0; s < ctx.size(); ++s) {
      c_kv.push_back(random_vec(rng, static_cast<size_t>(ctx[s]) * d.L, 1.0f));
      k_pe.push_back(random_vec(rng, static_cast<size_t>(ctx[s]) * d.R, 1.0f));
      std::vector<int32_t> t;
      for (int b = 0; b < (ctx[s] + block_size - 1) / block_size; ++b) t.push_back(ids[next++]);
      tables.push_back(t);
      total_q += num_q[s];
    }
    q = random_vec(rng, static_cast<size_t>(total_q) * d.H * d.qk(), 1.0f);
    kv_b = random_vec(rng, static_cast<size_t>(d.H) * (d.nope + d.V) * d.L, 0.3f);
    w_uk_t.resize(static_cast<size_t>(d.H) * d.L * d.nope);
    w_uv.resize(static_cast<size_t>(d.H) * d.V * d.L);
    for (int h = 0; h < d.H; ++h) {
      for (int n = 0; n < d.nope; ++n) {
        for (int l = 0; l < d.L; ++l) {
          w_uk_t[(static_cast<size_t>(h) * d.L + l) * d.nope + n] = kv_b[(static_cast<size_t>(h) * (d.nope + d.V) + n) * d.L + l];
        }
      }
      for (int v = 0; v < d.V; ++v) {
        for (int l = 0; l < d.L; ++l) {
          w_uv[(static_cast<size_t>(h) * d.V + v) * d.L + l] = kv_b[(static_cast<size_t>(h) * (d.nope + d.V) + d.nope + v) * d.L + l];
        }
      }
    }
    for (int i = 0; i < d.R / 2; ++i) inv_freq.push_back(1.0f / std::pow(100.0f, 2.0f * i / d.R));
  }

  RopeParams rope() const { return RopeParams{d.R, neox, inv_freq.data(), 1.0f}; }

  // Reference output [sum num_q, H, V] in double.
  std::vector<double> reference() const {
    std::vector<double> out;
    size_t qrow = 0;
    for (size_t s = 0; s < ctx.size(); ++s) {
      for (int i = 0; i < num_q[s]; ++i, ++qrow) {
        const int pos = ctx[s] - num_q[s] + i;
        for (int h = 0; h < d.H; ++h) {
          std::vector<double> qv(static_cast<size_t>(d.qk()));
          for (int x = 0; x < d.qk(); ++x) qv[x] = q[(qrow * d.H + h) * d.qk() + x];
          rope_ref(qv.data() + d.nope, d.R, pos, inv_freq, neox);
          std::vector<double> sc(static_cast<size_t>(pos + 1));
          double mx = -1e300;
          for (int j = 0; j <= pos; ++j) {
            std::vector<double> k(static_cast<size_t>(d.qk()), 0.0);
            for (int n = 0; n < d.nope; ++n) {
              for (int l = 0; l < d.L; ++l) {
                k[n] += double{kv_b[(static_cast<size_t>(h) * (d.nope + d.V) + n) * d.L + l]} * c_kv[s][static_cast<size_t>(j) * d.L + l];
              }
            }
            for (int r = 0; r < d.R; ++r) k[d.nope + r] = k_pe[s][static_cast<size_t>(j) * d.R + r];
            rope_ref(k.data() + d.nope, d.R, j, inv_freq, neox);
            double dotv = 0;
            for (int x = 0; x < d.qk(); ++x) dotv += qv[x] * k[x];
            sc[j] = dotv * scale;
            mx = std::max(mx, sc[j]);
          }
          double sum = 0;
          for (double& x : sc) sum += (x = std::exp(x - mx));
          for (int v = 0; v < d.V; ++v) {
            double o = 0;
            for (int j = 0; j <= pos; ++j) {
              double vj = 0;
              for (int l = 0; l < d.L; ++l) {
                vj += double{kv_b[(static_cast<size_t>(h) * (d.nope + d.V) + d.nope + v) * d.L + l]} * c_kv[s][static_cast<size_t>(j) * d.L + l];
              }
              o += sc[j] / sum * vj;
            }
            out.push_back(o);
          }
        }
      }
    }
    return out;
  }
};

// Writes every token of the scenario in one write_latent_kv (as a whole-prompt prefill would),
// then attends with the scenario's query tokens; returns out [sum num_q, H, V].
std::vector<float> run(CpuBackend& be, const Scenario& sc, std::vector<uint16_t>* f16_cache = nullptr) {
  const Dims& d = sc.d;
  const int bs = sc.block_size, row = d.L + d.R;
  std::vector<float> cache32(static_cast<size_t>(sc.num_blocks) * bs * row, NAN);
  std::vector<uint16_t> cache16(static_cast<size_t>(sc.num_blocks) * bs * row);
  const bool f16 = be.kv_cache_dtype() == DType::kF16;
  Tensor cache = Tensor::make(f16 ? static_cast<void*>(cache16.data()) : cache32.data(), be.kv_cache_dtype(),
                              {sc.num_blocks, bs, 1, row});
  // Writes: all tokens of all sequences.
  std::vector<float> c_all, pe_all;
  std::vector<int32_t> pos_all;
  std::vector<int64_t> slots_all;
  for (size_t s = 0; s < sc.ctx.size(); ++s) {
    c_all.insert(c_all.end(), sc.c_kv[s].begin(), sc.c_kv[s].end());
    pe_all.insert(pe_all.end(), sc.k_pe[s].begin(), sc.k_pe[s].end());
    for (int j = 0; j < sc.ctx[s]; ++j) {
      pos_all.push_back(j);
      slots_all.push_back(int64_t{sc.tables[s][static_cast<size_t>(j / bs)]} * bs + j % bs);
    }
  }
  AttentionMetadata wm;
  wm.num_tokens = static_cast<int>(pos_all.size());
  wm.slot_mapping = slots_all.data();
  wm.block_size = bs;
  const int64_t nw = wm.num_tokens;
  Tensor c_t = Tensor::make(c_all.data(), DType::kF32, {nw, d.L});
  Tensor pe_t = Tensor::make(pe_all.data(), DType::kF32, {nw, d.R});
  be.write_latent_kv(c_t, pe_t, pos_all.data(), sc.rope(), cache, wm);
  EXPECT_EQ(pe_all, [&] {  // the input is left as it was
    std::vector<float> v;
    for (const auto& p : sc.k_pe) v.insert(v.end(), p.begin(), p.end());
    return v;
  }());

  // Attention for the query tokens.
  std::vector<int32_t> qsl{0}, seq_lens, tables, positions;
  int max_blocks = 0;
  for (const auto& t : sc.tables) max_blocks = std::max(max_blocks, static_cast<int>(t.size()));
  for (size_t s = 0; s < sc.ctx.size(); ++s) {
    qsl.push_back(qsl.back() + sc.num_q[s]);
    seq_lens.push_back(sc.ctx[s]);
    for (int i = 0; i < sc.num_q[s]; ++i) positions.push_back(sc.ctx[s] - sc.num_q[s] + i);
    for (int b = 0; b < max_blocks; ++b) tables.push_back(b < static_cast<int>(sc.tables[s].size()) ? sc.tables[s][b] : 0);
  }
  AttentionMetadata m;
  m.num_seqs = static_cast<int>(sc.ctx.size());
  m.num_tokens = qsl.back();
  m.query_start_loc = qsl.data();
  m.seq_lens = seq_lens.data();
  m.block_tables = tables.data();
  m.max_blocks_per_seq = max_blocks;
  m.block_size = bs;
  MlaParams p;
  p.w_uk_t = Tensor::make(const_cast<float*>(sc.w_uk_t.data()), DType::kF32, {d.H, d.L, d.nope});
  p.w_uv = Tensor::make(const_cast<float*>(sc.w_uv.data()), DType::kF32, {d.H, d.V, d.L});
  p.rope = sc.rope();
  p.scale = sc.scale;
  std::vector<float> q = sc.q;
  Tensor qt = Tensor::make(q.data(), DType::kF32, {m.num_tokens, d.H, d.qk()});
  std::vector<float> out(static_cast<size_t>(m.num_tokens) * d.H * d.V);
  Tensor ot = Tensor::make(out.data(), DType::kF32, {m.num_tokens, d.H, d.V});
  be.mla_attention(qt, positions.data(), cache, m, p, ot);
  EXPECT_EQ(q, sc.q);  // q is read, not rotated in place
  if (f16_cache != nullptr) *f16_cache = cache16;
  return out;
}

double max_rel_err(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / den);
}

TEST(CpuMlaAttention, MatchesDecompressedAttentionForPrefillChunksAndDecode) {
  // A whole prompt, a chunk of a longer one (split key ranges: 200 keys), decode steps.
  for (bool neox : {false, true}) {
    Scenario sc({9, 200, 33, 70}, {9, 20, 1, 1}, neox, 7);
    CpuBackend be(CpuBackendOptions{4});
    const std::vector<float> got = run(be, sc);
    const double err = max_rel_err(got, sc.reference());
    EXPECT_LT(err, 1e-5) << "neox " << neox;
  }
}

TEST(CpuMlaAttention, Float16CacheIsCloseToTheReference) {
  Scenario sc({40, 130}, {3, 1}, false, 11);
  CpuBackendOptions o;
  o.num_threads = 2;
  o.kv_cache_dtype = DType::kF16;
  CpuBackend be(o);
  std::vector<uint16_t> cache;
  const std::vector<float> got = run(be, sc, &cache);
  EXPECT_LT(max_rel_err(got, sc.reference()), 3e-3);
}

TEST(CpuMlaAttention, ATokensOutputDoesNotDependOnItsBatch) {
  Scenario both({150, 12}, {1, 12}, false, 3);
  Scenario alone({150}, {1}, false, 3);  // the same first sequence (same seed, same draws first)
  CpuBackend be(CpuBackendOptions{3});
  const Dims& d = both.d;
  // The lone run's data must be the batch's first sequence: copy it over.
  alone.c_kv[0] = both.c_kv[0];
  alone.k_pe[0] = both.k_pe[0];
  alone.kv_b = both.kv_b;
  alone.w_uk_t = both.w_uk_t;
  alone.w_uv = both.w_uv;
  alone.q.assign(both.q.begin(), both.q.begin() + d.H * d.qk());
  const std::vector<float> b = run(be, both), a = run(be, alone);
  for (int i = 0; i < d.H * d.V; ++i) ASSERT_EQ(a[static_cast<size_t>(i)], b[static_cast<size_t>(i)]) << i;
}

TEST(CpuMlaAttention, PaddingSlotsAreNotWritten) {
  const Dims d;
  CpuBackend be(CpuBackendOptions{1});
  std::vector<float> cache(static_cast<size_t>(2) * 16 * (d.L + d.R), 7.0f);
  Tensor ct = Tensor::make(cache.data(), DType::kF32, {2, 16, 1, d.L + d.R});
  std::vector<float> c(static_cast<size_t>(2) * d.L, 1.0f), pe(static_cast<size_t>(2) * d.R, 1.0f);
  std::vector<float> inv(static_cast<size_t>(d.R / 2), 0.5f);
  std::vector<int32_t> pos{0, 1};
  std::vector<int64_t> slots{-1, 17};
  AttentionMetadata m;
  m.num_tokens = 2;
  m.slot_mapping = slots.data();
  be.write_latent_kv(Tensor::make(c.data(), DType::kF32, {2, d.L}), Tensor::make(pe.data(), DType::kF32, {2, d.R}),
                     pos.data(), RopeParams{d.R, false, inv.data(), 1.0f}, ct, m);
  for (int s = 0; s < 32; ++s) {
    const float first = cache[static_cast<size_t>(s) * (d.L + d.R)];
    EXPECT_EQ(first, s == 17 ? 1.0f : 7.0f) << s;
  }
}

}  // namespace
}  // namespace kvasir
