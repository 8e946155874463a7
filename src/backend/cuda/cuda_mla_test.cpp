// The CUDA MLA ops (write_latent_kv, mla_attention) against the CPU backend's, on random
// bf16-exact inputs over paged latent caches with shuffled blocks: DeepSeek-V2-Lite / V3 sizes
// (kv_lora_rank 512, rope 64, 16 and 128 heads) and the tiny models' (32 / 16, 4 heads), odd
// widths that take the unvectorized paths, both RoPE pairings with a YaRN magnitude, decode
// batches from 1 to 64 (head_gemv and cuBLASLt products, one and many key splits), prefill,
// chunked prefill mixed with decode (the chunk's prefix already cached, as after a prefix hit),
// both per-head product paths forced, and decode steps replayed through captured graphs while the
// sequences grow. Outputs are poisoned with NaN first. Skips without a GPU.
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

struct MlaCase {
  std::string name;
  int H = 16, nope = 128, R = 64, L = 512, V = 128;
  std::vector<int> seq_lens, q_lens;  // per sequence: context after this step, tokens this step
  bool neox = false;
  float attention_factor = 1.0f;
  int block_size = 16;
  int extra_blocks = 2;  // block-table capacity beyond the longest sequence
};

class CudaMla : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    make_gpu();
    CpuBackendOptions o;
    o.num_threads = 4;
    o.precision = MatmulPrecision::kExact;
    cpu_ = std::make_unique<CpuBackend>(o);
  }
  // A fresh CUDA backend (it reads KVASIR_MLA_GEMM when it starts).
  void make_gpu() {
    owned_.clear();
    gpu_.reset();
    auto b = create_cuda_backend(CudaBackendOptions{});
    ASSERT_TRUE(b.ok()) << b.status().message();
    gpu_ = std::move(*b);
  }
  Tensor upload(std::vector<float>& v, std::initializer_list<int64_t> dims) {
    std::unique_ptr<Buffer> owner;
    auto t = gpu_->upload_weight(host_tensor(v, dims), &owner);
    EXPECT_TRUE(t.ok());
    owned_.push_back(std::move(owner));
    return *t;
  }
  // Writes every context token of the case (as one prefill would), then attends with the last
  // q_lens[s] tokens of each sequence; compares the cache rows and the outputs with the CPU's.
  void run(const MlaCase& c);

  std::unique_ptr<Backend> gpu_, cpu_;
  std::vector<std::unique_ptr<Buffer>> owned_;
  std::mt19937 rng_{4321};
};

std::vector<float> inv_freq_table(int R) {
  std::vector<float> inv(static_cast<size_t>(R / 2));
  for (int i = 0; i < R / 2; ++i) inv[static_cast<size_t>(i)] = static_cast<float>(std::pow(10000.0, -2.0 * i / R));
  return inv;
}

void CudaMla::run(const MlaCase& c) {
  SCOPED_TRACE(c.name);
  const int S = static_cast<int>(c.seq_lens.size()), bs = c.block_size, row = c.L + c.R, qk = c.nope + c.R;
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
  // Every context token, plus one padding token (slot -1) that must write nothing.
  std::vector<int64_t> slots;
  std::vector<int32_t> pos;
  for (int s = 0; s < S; ++s) {
    for (int p = 0; p < c.seq_lens[s]; ++p) {
      slots.push_back(int64_t{tables[static_cast<size_t>(s) * max_blocks + p / bs]} * bs + p % bs);
      pos.push_back(p);
    }
  }
  slots.push_back(-1);
  pos.push_back(0);
  const int nw = total_ctx + 1;
  std::vector<float> inv = inv_freq_table(c.R);
  const RopeParams rope{c.R, c.neox, inv.data(), c.attention_factor};
  AttentionMetadata wm;
  wm.num_tokens = nw;
  wm.slot_mapping = slots.data();
  wm.block_size = bs;
  auto c_kv = random_values(rng_, static_cast<size_t>(nw) * c.L), k_pe = random_values(rng_, static_cast<size_t>(nw) * c.R);
  DeviceTensor ckv_d(DType::kBF16, {nw, c.L}), kpe_d(DType::kBF16, {nw, c.R});
  ckv_d.set(c_kv);
  kpe_d.set(k_pe);
  DeviceTensor cache_d(DType::kBF16, {num_blocks, bs, 1, row});
  std::vector<float> cache_c(static_cast<size_t>(num_blocks) * bs * row, 0.0f);
  Tensor cache_ct = host_tensor(cache_c, {num_blocks, bs, 1, row});
  gpu_->write_latent_kv(ckv_d.t, kpe_d.t, pos.data(), rope, cache_d.t, wm);
  cpu_->write_latent_kv(host_tensor(c_kv, {nw, c.L}), host_tensor(k_pe, {nw, c.R}), pos.data(), rope, cache_ct, wm);
  {
    const auto g = read_back(*gpu_, cache_d.t);
    std::vector<float> a, b, a_ckv, b_ckv;
    for (int64_t slot : slots) {
      if (slot < 0) continue;
      a.insert(a.end(), g.begin() + slot * row, g.begin() + (slot + 1) * row);
      b.insert(b.end(), cache_c.begin() + slot * row, cache_c.begin() + (slot + 1) * row);
      a_ckv.insert(a_ckv.end(), g.begin() + slot * row, g.begin() + slot * row + c.L);
      b_ckv.insert(b_ckv.end(), cache_c.begin() + slot * row, cache_c.begin() + slot * row + c.L);
    }
    EXPECT_EQ(rel_l2(a_ckv, b_ckv), 0.0) << "write_latent_kv: c_kv copied exactly";
    EXPECT_LT(rel_l2(a, b), 1e-2) << "write_latent_kv: rotated k_pe";
    // Slots nobody wrote keep the poison: the padding token went nowhere.
    size_t written = 0;
    for (size_t i = 0; i < g.size(); ++i) written += std::isnan(g[i]) ? 0 : 1;
    EXPECT_EQ(written, static_cast<size_t>(total_ctx) * row) << "write_latent_kv wrote outside its slots";
  }
  // The CPU attends over the GPU's cache values, so the attention comparison sees only the
  // attention's own rounding (the cache's k_pe is bf16 on the GPU, float32 on the CPU).
  {
    const auto g = read_back(*gpu_, cache_d.t);
    for (size_t i = 0; i < g.size(); ++i) cache_c[i] = std::isnan(g[i]) ? 0.0f : g[i];
  }

  std::vector<int32_t> qsl(1, 0), lens(c.seq_lens.begin(), c.seq_lens.end()), qpos;
  std::vector<int64_t> qslots;
  for (int s = 0; s < S; ++s) {
    qsl.push_back(qsl.back() + c.q_lens[s]);
    for (int p = c.seq_lens[s] - c.q_lens[s]; p < c.seq_lens[s]; ++p) {
      qslots.push_back(int64_t{tables[static_cast<size_t>(s) * max_blocks + p / bs]} * bs + p % bs);
      qpos.push_back(p);
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
  auto q = random_values(rng_, static_cast<size_t>(total_q) * c.H * qk);
  auto w_uk = random_values(rng_, static_cast<size_t>(c.H) * c.L * c.nope, 1.0f / std::sqrt(static_cast<float>(c.nope)));
  auto w_uv = random_values(rng_, static_cast<size_t>(c.H) * c.V * c.L, 1.0f / std::sqrt(static_cast<float>(c.L)));
  MlaParams gp, cp;
  gp.w_uk_t = upload(w_uk, {c.H, c.L, c.nope});
  gp.w_uv = upload(w_uv, {c.H, c.V, c.L});
  cp.w_uk_t = host_tensor(w_uk, {c.H, c.L, c.nope});
  cp.w_uv = host_tensor(w_uv, {c.H, c.V, c.L});
  gp.rope = cp.rope = rope;
  gp.scale = cp.scale = 1.0f / std::sqrt(static_cast<float>(qk));
  DeviceTensor q_d(DType::kBF16, {total_q, c.H, qk}), out_d(DType::kBF16, {total_q, c.H, c.V});
  q_d.set(q);
  gpu_->mla_attention(q_d.t, qpos.data(), cache_d.t, m, gp, out_d.t);
  std::vector<float> ref(static_cast<size_t>(total_q) * c.H * c.V);
  Tensor ref_t = host_tensor(ref, {total_q, c.H, c.V});
  cpu_->mla_attention(host_tensor(q, {total_q, c.H, qk}), qpos.data(), cache_ct, m, cp, ref_t);
  const double err = rel_l2(read_back(*gpu_, out_d.t), ref);
  EXPECT_LT(err, 2e-2) << "mla_attention";
  // The query must not be changed by the op (the rope part is rotated into the scratch).
  EXPECT_EQ(rel_l2(read_back(*gpu_, q_d.t), q), 0.0) << "mla_attention changed q";
}

MlaCase decode_case(std::string name, int H, int nope, int R, int L, int V, std::vector<int> ctx) {
  MlaCase c;
  c.name = std::move(name);
  c.H = H, c.nope = nope, c.R = R, c.L = L, c.V = V;
  c.seq_lens = ctx;
  c.q_lens.assign(ctx.size(), 1);
  return c;
}

TEST_F(CudaMla, DecodeV2LiteShapes) {
  run(decode_case("decode 16 heads 512/64", 16, 128, 64, 512, 128, {1, 17, 100, 300, 513}));
  MlaCase one = decode_case("decode batch 1, long context (many splits)", 16, 128, 64, 512, 128, {4999});
  run(one);
  MlaCase neox = decode_case("decode neox yarn", 16, 128, 64, 512, 128, {33, 250});
  neox.neox = true;
  neox.attention_factor = 1.2f;
  run(neox);
}

TEST_F(CudaMla, DecodeBatchesOneToSixtyFour) {
  for (int b : {1, 2, 3, 8, 9, 16, 33, 64}) {
    std::vector<int> ctx;
    for (int i = 0; i < b; ++i) ctx.push_back(1 + static_cast<int>(rng_() % 700));
    run(decode_case("decode batch " + std::to_string(b), 16, 128, 64, 512, 128, ctx));
  }
}

TEST_F(CudaMla, DecodeAndPrefillWith128Heads) {
  run(decode_case("decode 128 heads", 128, 128, 64, 512, 128, {5, 200, 1000}));
  MlaCase p = decode_case("prefill 128 heads", 128, 128, 64, 512, 128, {70, 33});
  p.q_lens = {70, 10};
  run(p);
}

TEST_F(CudaMla, TinyModelShapes) {
  for (bool neox : {false, true}) {
    MlaCase d = decode_case("tiny decode", 4, 32, 16, 32, 32, {1, 9, 40, 64});
    d.neox = neox;
    run(d);
    MlaCase p = decode_case("tiny prefill", 4, 32, 16, 32, 32, {10, 24, 20});
    p.q_lens = {10, 24, 20};
    p.neox = neox;
    run(p);
  }
}

TEST_F(CudaMla, Prefill) {
  MlaCase c = decode_case("prefill 16 heads", 16, 128, 64, 512, 128, {1, 20, 64, 130});
  c.q_lens = c.seq_lens;
  run(c);
}

TEST_F(CudaMla, ChunkedPrefillAfterPrefixMixedWithDecode) {
  MlaCase c = decode_case("chunk after a cached prefix, with decodes", 16, 128, 64, 512, 128, {200, 50, 77, 9, 1});
  c.q_lens = {37, 1, 77, 1, 1};
  run(c);
  MlaCase t = decode_case("tiny chunks", 4, 32, 16, 32, 32, {48, 17, 5});
  t.q_lens = {16, 1, 5};
  run(t);
}

TEST_F(CudaMla, OddWidthsAndBlockSize32) {
  // D = L + R not a multiple of 8: the scalar cache loads and the zero-padded columns.
  MlaCase odd = decode_case("odd widths decode", 3, 20, 6, 36, 24, {1, 40, 77});
  run(odd);
  odd.name = "odd widths prefill";
  odd.q_lens = {1, 40, 30};
  run(odd);
  MlaCase b32 = decode_case("block 32", 16, 128, 64, 512, 128, {100, 31});
  b32.q_lens = {10, 1};
  b32.block_size = 32;
  run(b32);
}

// The per-head products forced onto each path (KVASIR_MLA_GEMM), at decode and prefill sizes.
TEST_F(CudaMla, BothHeadProductPaths) {
  for (const char* path : {"kernel", "cublas"}) {
    ::setenv("KVASIR_MLA_GEMM", path, 1);
    make_gpu();
    ::unsetenv("KVASIR_MLA_GEMM");
    run(decode_case(std::string("decode 3, ") + path, 16, 128, 64, 512, 128, {5, 90, 300}));
    MlaCase p = decode_case(std::string("prefill, ") + path, 16, 128, 64, 512, 128, {40, 12});
    p.q_lens = {40, 3};
    run(p);
    MlaCase t = decode_case(std::string("tiny prefill, ") + path, 4, 32, 16, 32, 32, {24});
    t.q_lens = {24};
    run(t);
  }
}

// "graph replays N" from the backend's stats line.
long long graph_replays(const Backend& b) {
  const std::string s = b.stats();
  const size_t at = s.find("graph replays ");
  return at == std::string::npos ? -1 : std::atoll(s.c_str() + at + 14);
}

// Decode steps with the same record sequence while the sequences grow: eager, captured, replayed.
TEST_F(CudaMla, DecodeStepsReplayThroughGraphs) {
  for (int S : {3, 12}) {
    const int H = 16, nope = 128, R = 64, L = 512, V = 128, bs = 16, max_blocks = 16, steps = 5;
    const int row = L + R, qk = nope + R, num_blocks = S * max_blocks;
    std::vector<int32_t> tables(static_cast<size_t>(num_blocks));
    std::iota(tables.begin(), tables.end(), 0);
    std::shuffle(tables.begin(), tables.end(), rng_);
    std::vector<float> inv = inv_freq_table(R);
    const RopeParams rope{R, false, inv.data(), 1.0f};
    DeviceTensor cache_d(DType::kBF16, {num_blocks, bs, 1, row});
    std::vector<float> cache_c(static_cast<size_t>(num_blocks) * bs * row, 0.0f);
    Tensor cache_ct = host_tensor(cache_c, {num_blocks, bs, 1, row});
    auto w_uk = random_values(rng_, static_cast<size_t>(H) * L * nope, 0.09f);
    auto w_uv = random_values(rng_, static_cast<size_t>(H) * V * L, 0.045f);
    MlaParams gp, cp;
    gp.w_uk_t = upload(w_uk, {H, L, nope});
    gp.w_uv = upload(w_uv, {H, V, L});
    cp.w_uk_t = host_tensor(w_uk, {H, L, nope});
    cp.w_uv = host_tensor(w_uv, {H, V, L});
    gp.rope = cp.rope = rope;
    gp.scale = cp.scale = 1.0f / std::sqrt(static_cast<float>(qk));
    std::vector<int32_t> lens(static_cast<size_t>(S)), qsl(static_cast<size_t>(S) + 1), pos(static_cast<size_t>(S));
    std::iota(qsl.begin(), qsl.end(), 0);
    for (int s = 0; s < S; ++s) lens[static_cast<size_t>(s)] = 3 + 17 * s;
    std::vector<int64_t> slots(static_cast<size_t>(S));
    DeviceTensor ckv_d(DType::kBF16, {S, L}), kpe_d(DType::kBF16, {S, R}), q_d(DType::kBF16, {S, H, qk}),
        out_d(DType::kBF16, {S, H, V});
    const int prefill_len = *std::max_element(lens.begin(), lens.end()) - 1;
    long long replays_before = 0;
    for (int step = -prefill_len; step < steps; ++step) {
      // Steps below 0 fill the caches one position at a time (every sequence's token at min(p, len - 1)).
      for (int s = 0; s < S; ++s) {
        const int p = step < 0 ? std::min(step + prefill_len, lens[static_cast<size_t>(s)] - 1) : lens[static_cast<size_t>(s)] - 1;
        slots[static_cast<size_t>(s)] = int64_t{tables[static_cast<size_t>(s) * max_blocks + p / bs]} * bs + p % bs;
        pos[static_cast<size_t>(s)] = p;
      }
      AttentionMetadata m;
      m.num_seqs = S;
      m.num_tokens = S;
      m.query_start_loc = qsl.data();
      m.seq_lens = lens.data();
      m.block_tables = tables.data();
      m.max_blocks_per_seq = max_blocks;
      m.slot_mapping = slots.data();
      m.block_size = bs;
      auto c_kv = random_values(rng_, static_cast<size_t>(S) * L), k_pe = random_values(rng_, static_cast<size_t>(S) * R);
      ckv_d.set(c_kv);
      kpe_d.set(k_pe);
      gpu_->write_latent_kv(ckv_d.t, kpe_d.t, pos.data(), rope, cache_d.t, m);
      cpu_->write_latent_kv(host_tensor(c_kv, {S, L}), host_tensor(k_pe, {S, R}), pos.data(), rope, cache_ct, m);
      if (step < 0) {
        gpu_->synchronize();
        replays_before = graph_replays(*gpu_);
        continue;
      }
      auto q = random_values(rng_, static_cast<size_t>(S) * H * qk);
      q_d.set(q);
      gpu_->mla_attention(q_d.t, pos.data(), cache_d.t, m, gp, out_d.t);
      std::vector<float> ref(static_cast<size_t>(S) * H * V);
      Tensor ref_t = host_tensor(ref, {S, H, V});
      cpu_->mla_attention(host_tensor(q, {S, H, qk}), pos.data(), cache_ct, m, cp, ref_t);
      EXPECT_LT(rel_l2(read_back(*gpu_, out_d.t), ref), 2e-2) << "S=" << S << " step " << step;
      for (auto& l : lens) l += 1;
    }
    // Seen, captured, then replayed at least the last three steps.
    EXPECT_GE(graph_replays(*gpu_) - replays_before, 3) << "S=" << S << ": " << gpu_->stats();
  }
}


}  // namespace
}  // namespace kvasir
