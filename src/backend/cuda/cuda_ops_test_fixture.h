// The CudaOps fixture shared by the op test files (cuda_ops_test.cpp, cuda_fused_ops_test.cpp):
// a CUDA backend and the exact CPU backend it is checked against, weight upload, a seeded rng.
// Skips without a GPU.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_test_util.h"

namespace kvasir::cuda_test {

// The rows `slots` of a [num_slots, row] cache, concatenated (what a KV write touched).
inline std::vector<float> slot_rows(const std::vector<float>& cache, const std::vector<int64_t>& slots, int64_t row) {
  std::vector<float> out;
  for (int64_t slot : slots) out.insert(out.end(), cache.begin() + slot * row, cache.begin() + (slot + 1) * row);
  return out;
}

inline Tensor host_tensor(std::vector<float>& v, std::initializer_list<int64_t> dims) {
  return Tensor::make(v.data(), DType::kF32, dims);
}

// A paged bf16 KV cache on the device beside its float copy on the host (what the CPU reference
// reads), for decode tests: num_seqs sequences of max_blocks blocks each, the blocks shuffled over
// the pool so that no sequence's blocks are contiguous.
struct PagedKvCache {
  int num_seqs, kv_heads, head_dim, block_size, max_blocks;
  std::vector<int32_t> tables;  // [num_seqs, max_blocks]
  DeviceTensor k, v;            // [num_seqs * max_blocks, block_size, kv_heads, head_dim]
  std::vector<float> host_k, host_v;
  Tensor host_k_t, host_v_t;

  PagedKvCache(std::mt19937& rng, int S, int kvh, int hd, int bs, int blocks_per_seq)
      : num_seqs(S), kv_heads(kvh), head_dim(hd), block_size(bs), max_blocks(blocks_per_seq),
        tables(static_cast<size_t>(S) * blocks_per_seq),
        k(DType::kBF16, {S * blocks_per_seq, bs, kvh, hd}),
        v(DType::kBF16, {S * blocks_per_seq, bs, kvh, hd}),
        host_k(static_cast<size_t>(S) * blocks_per_seq * bs * kvh * hd, 0.0f),
        host_v(host_k.size(), 0.0f) {
    for (size_t i = 0; i < tables.size(); ++i) tables[i] = static_cast<int32_t>(i);
    std::shuffle(tables.begin(), tables.end(), rng);
    host_k_t = host_tensor(host_k, {S * blocks_per_seq, bs, kvh, hd});
    host_v_t = host_tensor(host_v, {S * blocks_per_seq, bs, kvh, hd});
  }
  PagedKvCache(const PagedKvCache&) = delete;
  PagedKvCache& operator=(const PagedKvCache&) = delete;

  // The cache slot of sequence s's position pos.
  int64_t slot(int s, int pos) const {
    return int64_t{tables[static_cast<size_t>(s) * max_blocks + pos / block_size]} * block_size + pos % block_size;
  }
  // Random keys and values at every position of every sequence, written through both backends'
  // write_kv (the device one synchronized).
  void fill(Backend& gpu, Backend& cpu, std::mt19937& rng) {
    const int cap = max_blocks * block_size, n = num_seqs * cap;
    std::vector<int64_t> slots;
    for (int s = 0; s < num_seqs; ++s) {
      for (int p = 0; p < cap; ++p) slots.push_back(slot(s, p));
    }
    AttentionMetadata m;
    m.num_tokens = n;
    m.slot_mapping = slots.data();
    m.block_size = block_size;
    auto kv = random_values(rng, static_cast<size_t>(n) * kv_heads * head_dim);
    auto vv = random_values(rng, kv.size());
    DeviceTensor kd(DType::kBF16, {n, kv_heads, head_dim}), vd(DType::kBF16, {n, kv_heads, head_dim});
    kd.set(kv);
    vd.set(vv);
    gpu.write_kv(kd.t, vd.t, k.t, v.t, m);
    cpu.write_kv(host_tensor(kv, {n, kv_heads, head_dim}), host_tensor(vv, {n, kv_heads, head_dim}), host_k_t, host_v_t, m);
    gpu.synchronize();
  }
};

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
  // linear() of random x [n, k] and w [m, k] (bias optional, bf16 or f32 out) on both backends:
  // the relative L2 error of the GPU's result against the CPU's.
  double linear_error(int n, int64_t k, int64_t m, bool bias, bool f32_out) {
    auto x = random_values(rng_, static_cast<size_t>(n) * k);
    auto w = random_values(rng_, static_cast<size_t>(m) * k, 1.0f / std::sqrt(static_cast<float>(k)));
    auto b = random_values(rng_, static_cast<size_t>(m));
    DeviceTensor xg(DType::kBF16, {n, k});
    xg.set(x);
    Tensor wg = upload(w, {m, k});
    Tensor bg = upload(b, {m});
    DeviceTensor out(f32_out ? DType::kF32 : DType::kBF16, {n, m});
    gpu_->linear(xg.t, wg, bias ? &bg : nullptr, out.t);
    std::vector<float> ref(static_cast<size_t>(n) * m);
    Tensor rt = host_tensor(ref, {n, m});
    Tensor bt = host_tensor(b, {m});
    cpu_->linear(host_tensor(x, {n, k}), host_tensor(w, {m, k}), bias ? &bt : nullptr, rt);
    return rel_l2(read_back(*gpu_, out.t), ref);
  }
  std::unique_ptr<Backend> gpu_, cpu_;
  std::vector<std::unique_ptr<Buffer>> owned_;
  std::mt19937 rng_{1234};
};

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
  // The cache's elements on both backends (--kv-cache-dtype): bf16 on the GPU (float32 on the
  // CPU), or the same FP8 codes of k / k_scale and v / v_scale on both.
  DType kv_cache = DType::kBF16;
  float k_scale = 1.0f, v_scale = 1.0f;
};

inline AttnCase with_fp8_cache(AttnCase c, DType codes, float k_scale = 1.0f, float v_scale = 1.0f) {
  c.kv_cache = codes;
  c.k_scale = k_scale;
  c.v_scale = v_scale;
  return c;
}

// run(): writes the case's context through write_kv on both backends, attends on both, compares
// (cuda_ops_test.cpp); cuda_attention_prefill_test.cpp runs it on backends made under each
// KVASIR_CUDA_PREFILL.
class CudaAttention : public CudaOps {
 protected:
  void run(const AttnCase& c);
  // Twelve decoding sequences of the 8-kv-head, 128-dim shape (mma_bulk's from 8 sequences) with
  // `heads` query heads: two contexts of up to 9,000 tokens (split), ten of up to 600, none
  // necessarily a multiple of a tile, in a table with 200 spare blocks.
  AttnCase twelve_decodes(const char* name, int heads) {
    AttnCase c{name, heads, 8, 128, {}, {}};
    for (int i = 0; i < 12; ++i) {
      c.seq_lens.push_back(1 + static_cast<int>(rng_() % (i < 2 ? 9000 : 600)));
      c.q_lens.push_back(1);
    }
    c.extra_blocks = 200;
    return c;
  }
};

}  // namespace kvasir::cuda_test
