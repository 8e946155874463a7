// GGUF block weights on the CUDA backend against the CPU backend: for every type the GPU keeps in
// its blocks, the device decoders equal quant::dequantize_row bit for bit (float32 rows, and bf16
// embedding rows equal the CPU's rounded to bf16), and linear() follows the CPU's exact quantized
// matmul through the GEMVs (the tensor-core one up to 32 rows, 16 tokens per pass, Q4_K and Q6_K up
// to 16; the float32 one up to 8, called directly), the K-quant GEMM (Q4_K and Q6_K, 17 to 64
// rows) and the dequantize + cuBLASLt path (above those, including an lm_head-sized weight that
// goes in slices). Random blocks: random quant bytes with sane fp16
// scales (a few subnormal and negative ones, so the conversions' edge cases are met).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/cuda/cuda_ops_test_fixture.h"
#include "backend/cuda/gguf_kernels.h"
#include "backend/cuda/gguf_kquant_stream.h"
#include "quant/block_formats.h"
#include "quant/dequantize.h"

namespace kvasir::cuda_test {
namespace {

struct Format {
  DType type;
  const char* name;
  std::vector<int> scale_offsets;  // fp16 d (and m / dmin) fields inside a block
};

const std::vector<Format>& formats() {
  static const std::vector<Format> f = {
      {DType::kQ4_0, "Q4_0", {0}},    {DType::kQ4_1, "Q4_1", {0, 2}}, {DType::kQ5_0, "Q5_0", {0}},
      {DType::kQ5_1, "Q5_1", {0, 2}}, {DType::kQ8_0, "Q8_0", {0}},    {DType::kQ4_K, "Q4_K", {0, 2}},
      {DType::kQ5_K, "Q5_K", {0, 2}}, {DType::kQ6_K, "Q6_K", {208}},
  };
  return f;
}

int block_elems(DType t) { return dtype_info(t)->block_size; }
size_t block_bytes(DType t) { return dtype_info(t)->type_size; }

// rows x k weights of type f: random bytes, then each block's scales set to values of size
// `scale` (every 97th block a subnormal, every 5th a negative one).
std::vector<uint8_t> random_blocks(std::mt19937& rng, const Format& f, int64_t rows, int64_t k, float scale) {
  const int64_t blocks = rows * k / block_elems(f.type);
  std::vector<uint8_t> bytes(static_cast<size_t>(blocks) * block_bytes(f.type));
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> mag(0.25f * scale, scale);
  for (int64_t b = 0; b < blocks; ++b) {
    uint8_t* blk = bytes.data() + static_cast<size_t>(b) * block_bytes(f.type);
    for (int off : f.scale_offsets) {
      float v = mag(rng);
      if (b % 5 == 3) v = -v;
      const quant::fp16_t h = b % 97 == 1 ? static_cast<quant::fp16_t>(1 + rng() % 1023) : quant::f32_to_fp16(v);
      std::memcpy(blk + off, &h, 2);
    }
  }
  return bytes;
}

// The scale that keeps x · w O(1) for inputs in [-1, 1]: values are up to ~32x the block scale.
float sane_scale(DType t, int64_t k) {
  const float per_value = t == DType::kQ8_0 ? 127.0f : (t == DType::kQ6_K ? 32.0f * 64.0f : 16.0f);
  return 1.0f / (per_value * std::sqrt(static_cast<float>(k)));
}

class CudaGguf : public CudaOps {
 protected:
  // The weight on the GPU, which must have kept its blocks.
  Tensor upload_blocks(std::vector<uint8_t>& bytes, DType t, int64_t rows, int64_t k) {
    std::unique_ptr<Buffer> owner;
    auto w = gpu_->upload_weight(Tensor::make(bytes.data(), t, {rows, k}), &owner);
    EXPECT_TRUE(w.ok()) << w.status().message();
    if (!w.ok()) return {};
    EXPECT_EQ(w->dtype, t) << "the CUDA backend must keep " << dtype_name(t) << " weights in their blocks";
    owned_.push_back(std::move(owner));
    return *w;
  }
  void expect_batch_invariant(const Format& f, const std::vector<int>& ns);
};

TEST_F(CudaGguf, DecodersEqualTheCpuReferenceBitForBit) {
  for (const Format& f : formats()) {
    const int64_t rows = 9, k = 4 * 256;
    auto bytes = random_blocks(rng_, f, rows, k, 0.01f);
    const Tensor w = upload_blocks(bytes, f.type, rows, k);
    ASSERT_NE(w.data, nullptr);
    const int64_t row0 = 2, n = 6;  // an offset slice, as the GEMM path's
    DeviceTensor out(DType::kF32, {n, k});
    cuda::launch_gguf_dequantize(w.data, f.type, row0, n, k, out.t.data, cuda::Elem::kF32, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float> got(static_cast<size_t>(n * k)), want(got.size());
    ASSERT_EQ(cudaMemcpy(got.data(), out.t.data, got.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    const size_t rb = *row_bytes(f.type, k);
    for (int64_t r = 0; r < n; ++r) {
      quant::dequantize_row(f.type, bytes.data() + static_cast<size_t>(row0 + r) * rb, want.data() + r * k, k);
    }
    int64_t mismatches = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      uint32_t a, b;
      std::memcpy(&a, &got[i], 4);
      std::memcpy(&b, &want[i], 4);
      if (a != b && mismatches++ < 3) ADD_FAILURE() << f.name << " element " << i << ": " << got[i] << " vs " << want[i];
    }
    EXPECT_EQ(mismatches, 0) << f.name;
  }
}

TEST_F(CudaGguf, EmbeddingRowsEqualTheCpuRoundedToBf16) {
  for (const Format& f : formats()) {
    const int64_t vocab = 50, d = 512;
    auto bytes = random_blocks(rng_, f, vocab, d, 0.02f);
    const Tensor table = upload_blocks(bytes, f.type, vocab, d);
    ASSERT_NE(table.data, nullptr);
    const std::vector<int32_t> ids = {0, 49, 7, 7, 23, 1};
    const int n = static_cast<int>(ids.size());
    for (float scale : {1.0f, 22.627417f}) {  // Gemma scales by sqrt(hidden)
      DeviceTensor out(DType::kBF16, {n, d});
      gpu_->embedding(table, ids.data(), n, scale, out.t);
      std::vector<float> ref(static_cast<size_t>(n * d));
      Tensor rt = host_tensor(ref, {n, d});
      cpu_->embedding(Tensor::make(bytes.data(), f.type, {vocab, d}), ids.data(), n, scale, rt);
      const auto got = read_back(*gpu_, out.t);
      int64_t mismatches = 0;
      for (size_t i = 0; i < got.size(); ++i) mismatches += got[i] != round_bf16(ref[i]);
      EXPECT_EQ(mismatches, 0) << f.name << " scale " << scale;
    }
  }
}

struct LinearCase {
  int n;
  int64_t blocks, m;  // in_features = blocks x the format's block size
  bool bias, f32_out;
};

TEST_F(CudaGguf, LinearMatchesCpuThroughGemvAndGemm) {
  const LinearCase cases[] = {{1, 1, 64, false, false},  {1, 16, 1000, true, true},  {2, 3, 96, false, true},
                              {3, 5, 130, true, false},  {4, 16, 512, false, true},  {5, 2, 7, false, true},
                              {7, 9, 300, true, true},   {8, 16, 256, false, false}, {8, 4, 1001, true, true},
                              {9, 4, 384, false, true},  {16, 8, 136, true, true},   {20, 2, 64, false, true},
                              {32, 3, 96, true, false},  {33, 3, 200, true, false},  {130, 16, 512, false, true},
                              {17, 2, 40, false, true},  {64, 16, 520, true, true},  {100, 8, 300, true, false},
                              {128, 4, 64, false, true}};
  for (const Format& f : formats()) {
    for (const LinearCase& c : cases) {
      const int64_t k = c.blocks * block_elems(f.type);
      auto bytes = random_blocks(rng_, f, c.m, k, sane_scale(f.type, k) * 16.0f);
      const Tensor wg = upload_blocks(bytes, f.type, c.m, k);
      ASSERT_NE(wg.data, nullptr);
      auto x = random_values(rng_, static_cast<size_t>(c.n * k));
      auto b = random_values(rng_, static_cast<size_t>(c.m));
      DeviceTensor xg(DType::kBF16, {c.n, k});
      xg.set(x);
      Tensor bg = upload(b, {c.m});
      DeviceTensor out(c.f32_out ? DType::kF32 : DType::kBF16, {c.n, c.m});
      gpu_->linear(xg.t, wg, c.bias ? &bg : nullptr, out.t);
      std::vector<float> ref(static_cast<size_t>(c.n * c.m));
      Tensor rt = host_tensor(ref, {c.n, c.m});
      Tensor bt = host_tensor(b, {c.m});
      cpu_->linear(host_tensor(x, {c.n, k}), Tensor::make(bytes.data(), f.type, {c.m, k}), c.bias ? &bt : nullptr, rt);
      // Tensor-core GEMV (up to 32 tokens, 16 per pass) and GEMM: the weights rounded to bf16
      // first (2^-9 relative each, as the bf16 path's; the K-quants computed in packed bf16 with
      // bf16-rounded scales): 1-4.5e-3 rel L2 (worst of 200 draws) in a host emulation of the
      // tensor-core GEMV on blocks like these; a wrong scale or nibble gives > 0.1.
      // The K-quant GEMM rounds the weights to bf16 as the others (its scales too; a lost split or
      // a wrong nibble order gives > 0.1).
      const bool kquant_gemm = cuda::gguf_kquant_gemm_supported(f.type, k) && c.n > cuda::kGgufKquantGemvMaxRows &&
                               c.n <= cuda::kGgufKquantGemmMaxRows;
      const bool gemv = c.n <= cuda::kGgufMmaGemvMaxRows;
      EXPECT_LT(rel_l2(read_back(*gpu_, out.t), ref), 1e-2)
          << f.name << " " << c.n << "x" << k << " -> " << c.m << (c.bias ? " bias" : "")
          << (kquant_gemm ? " K-quant gemm" : gemv ? " gemv" : " gemm");
      if (c.n <= cuda::kGgufGemvMaxRows) {
        // The float32 GEMV as well (what KVASIR_GGUF_GEMV=exact runs): the CPU's weights exactly,
        // float32 sums in another order (1e-4 for float32 outputs).
        DeviceTensor exact(c.f32_out ? DType::kF32 : DType::kBF16, {c.n, c.m});
        cuda::launch_gguf_gemv(xg.t.data, wg.data, f.type, c.bias ? static_cast<const float*>(bg.data) : nullptr,
                               exact.t.data, c.n, c.m, k, c.f32_out ? cuda::Elem::kF32 : cuda::Elem::kBf16, nullptr);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        EXPECT_LT(rel_l2(read_back(*gpu_, exact.t), ref), c.f32_out ? 1e-4 : 1e-2)
            << f.name << " float32 GEMV " << c.n << "x" << k << " -> " << c.m;
      }
    }
  }
}

// q/k/v-like projections of one input recorded back to back (up to three of one type share a
// tensor-core GEMV launch; a projection of another type or a fourth starts a new one), each
// output checked against the CPU.
TEST_F(CudaGguf, ProjectionsOfOneInputFollowTheCpu) {
  const Format& q4k = formats()[5];
  const Format& q6k = formats()[7];
  ASSERT_EQ(q4k.type, DType::kQ4_K);
  ASSERT_EQ(q6k.type, DType::kQ6_K);
  const int64_t k = 3 * 256;
  for (int n : {1, 5, 12, 40, 64, 100}) {
    // q, k (Q4_K), v (Q6_K: another launch), then four more Q4_K projections (3 + 1); from 17 tokens
    // the Q4_K ones on the K-quant GEMM, the same grouping.
    const std::vector<std::pair<const Format*, int64_t>> projs = {{&q4k, 96}, {&q4k, 40}, {&q6k, 40}, {&q4k, 64},
                                                                  {&q4k, 24}, {&q4k, 136}, {&q4k, 8}};
    auto x = random_values(rng_, static_cast<size_t>(n * k));
    DeviceTensor xg(DType::kBF16, {n, k});
    xg.set(x);
    std::vector<std::vector<uint8_t>> bytes;
    std::vector<std::vector<float>> biases;
    std::vector<std::unique_ptr<DeviceTensor>> outs;
    for (size_t i = 0; i < projs.size(); ++i) {
      const auto [f, m] = projs[i];
      bytes.push_back(random_blocks(rng_, *f, m, k, sane_scale(f->type, k) * 16.0f));
      biases.push_back(random_values(rng_, static_cast<size_t>(m)));
      outs.push_back(std::make_unique<DeviceTensor>(DType::kF32, std::initializer_list<int64_t>{n, m}));
    }
    // Every upload first: an upload flushes the step, and the projections must be recorded back to back.
    std::vector<Tensor> wgs, bgs;
    for (size_t i = 0; i < projs.size(); ++i) {
      const auto [f, m] = projs[i];
      wgs.push_back(upload_blocks(bytes[i], f->type, m, k));
      ASSERT_NE(wgs.back().data, nullptr);
      bgs.push_back(upload(biases[i], {m}));
    }
    for (size_t i = 0; i < projs.size(); ++i) gpu_->linear(xg.t, wgs[i], i % 2 == 0 ? &bgs[i] : nullptr, outs[i]->t);
    for (size_t i = 0; i < projs.size(); ++i) {
      const auto [f, m] = projs[i];
      std::vector<float> ref(static_cast<size_t>(n * m));
      Tensor rt = host_tensor(ref, {n, m});
      Tensor bt = host_tensor(biases[i], {m});
      cpu_->linear(host_tensor(x, {n, k}), Tensor::make(bytes[i].data(), f->type, {m, k}), i % 2 == 0 ? &bt : nullptr,
                   rt);
      EXPECT_LT(rel_l2(read_back(*gpu_, outs[i]->t), ref), 1e-2) << "projection " << i << ", " << n << " tokens";
    }
  }
}

// Token 0 and the last token of every batch size in ns carry the same row (random rows elsewhere):
// their float32 outputs through linear() must equal those of the first batch bit for bit.
// k = 4096, m = 72.
void CudaGguf::expect_batch_invariant(const Format& f, const std::vector<int>& ns) {
  const int64_t k = 16 * 256, m = 72;
  auto bytes = random_blocks(rng_, f, m, k, sane_scale(f.type, k) * 16.0f);
  const Tensor wg = upload_blocks(bytes, f.type, m, k);
  ASSERT_NE(wg.data, nullptr);
  auto row = random_values(rng_, static_cast<size_t>(k));
  std::vector<float> first;
  for (int n : ns) {
    auto x = random_values(rng_, static_cast<size_t>(n * k));
    std::copy(row.begin(), row.end(), x.begin());
    std::copy(row.begin(), row.end(), x.begin() + (n - 1) * k);
    DeviceTensor xg(DType::kBF16, {n, k});
    xg.set(x);
    DeviceTensor out(DType::kF32, {n, m});
    gpu_->linear(xg.t, wg, nullptr, out.t);
    const auto got = read_back(*gpu_, out.t);
    if (first.empty()) first.assign(got.begin(), got.begin() + m);
    EXPECT_TRUE(std::equal(first.begin(), first.end(), got.begin())) << f.name << ": token 0 of " << n;
    EXPECT_TRUE(std::equal(first.begin(), first.end(), got.begin() + (n - 1) * m)) << f.name << ": last of " << n;
  }
}

// A token's output of the tensor-core GEMV does not depend on the batch around it (each MMA output
// element is its own dot product, the other A rows only ride along): alone, among 7, among 16 (rows
// 8..15 of the fragments, or the second octet of B in the K-quant kernel) and in the second pass of
// 20 (Q8_0; 20 Q4_K or Q6_K tokens take the K-quant GEMM). At k = 4096 the K-quant kernel stages x
// in shared memory for 1 and 7 tokens and reads it from L1 for 16.
TEST_F(CudaGguf, GemvRowsAreBatchInvariant) {
  expect_batch_invariant(formats()[5], {1, 7, 16});      // Q4_K
  expect_batch_invariant(formats()[4], {1, 7, 16, 20});  // Q8_0
  expect_batch_invariant(formats()[7], {1, 7, 16});      // Q6_K
}

// The K-quant GEMM's tokens do not depend on the batch either: the K splits are chosen from the
// weights' shape alone and a token's MMA columns are its own. Among 17 and 32 (32-token tiles), 40
// and 64 (64-token tiles); 72 rows are one tile, K split 8 ways.
TEST_F(CudaGguf, KquantGemmRowsAreBatchInvariant) {
  expect_batch_invariant(formats()[5], {17, 32, 40, 64});  // Q4_K
  expect_batch_invariant(formats()[7], {17, 32, 40, 64});  // Q6_K
}

// One token's gate/up on the K-quant GEMV followed by the gated activation in place: the backend
// folds the activation into the GEMV's epilogue (one launch), which must leave gate and up exactly
// as the unfused ops do (a backend recording one op per call, KVASIR_CUDA_FUSE=0) and follow the
// CPU. 72 rows: a partial last tile; k = 1024 and 4096 (x staged), 40,960 (x read from L1).
TEST_F(CudaGguf, GatedGateUpEqualsTheUnfusedOpsBitForBit) {
  ::setenv("KVASIR_CUDA_FUSE", "0", 1);
  auto plain = create_cuda_backend(CudaBackendOptions{});
  ::unsetenv("KVASIR_CUDA_FUSE");
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  std::vector<std::unique_ptr<Buffer>> plain_owned;
  const int64_t m = 72;
  const int n = 1;
  for (const Format* f : {&formats()[5], &formats()[7]}) {
    for (int64_t k : {int64_t{1024}, int64_t{4096}, int64_t{40960}}) {
      auto wgb = random_blocks(rng_, *f, m, k, sane_scale(f->type, k) * 16.0f);
      auto wub = random_blocks(rng_, *f, m, k, sane_scale(f->type, k) * 16.0f);
      const Tensor wg = upload_blocks(wgb, f->type, m, k), wu = upload_blocks(wub, f->type, m, k);
      ASSERT_NE(wg.data, nullptr);
      std::unique_ptr<Buffer> o1, o2;
      auto pwg = (*plain)->upload_weight(Tensor::make(wgb.data(), f->type, {m, k}), &o1);
      auto pwu = (*plain)->upload_weight(Tensor::make(wub.data(), f->type, {m, k}), &o2);
      ASSERT_TRUE(pwg.ok() && pwu.ok());
      plain_owned.push_back(std::move(o1));
      plain_owned.push_back(std::move(o2));
      for (GateActivation act : {GateActivation::kSilu, GateActivation::kGeluTanh}) {
        auto x = random_values(rng_, static_cast<size_t>(n * k));
        DeviceTensor xg(DType::kBF16, {n, k});
        xg.set(x);
        DeviceTensor g1(DType::kBF16, {n, m}), u1(DType::kBF16, {n, m}), g2(DType::kBF16, {n, m}),
            u2(DType::kBF16, {n, m});
        gpu_->linear(xg.t, wg, nullptr, g1.t);
        gpu_->linear(xg.t, wu, nullptr, u1.t);
        gpu_->gated_activation(g1.t, u1.t, act, g1.t);
        (*plain)->linear(xg.t, *pwg, nullptr, g2.t);
        (*plain)->linear(xg.t, *pwu, nullptr, u2.t);
        (*plain)->gated_activation(g2.t, u2.t, act, g2.t);
        const auto fused_g = read_back(*gpu_, g1.t), fused_u = read_back(*gpu_, u1.t);
        const std::string what = std::string(f->name) + " k=" + std::to_string(k) +
                                 (act == GateActivation::kSilu ? " silu" : " gelu_tanh");
        EXPECT_TRUE(fused_g == read_back(**plain, g2.t)) << what << ": act(gate) * up";
        EXPECT_TRUE(fused_u == read_back(**plain, u2.t)) << what << ": up";
        std::vector<float> rg(static_cast<size_t>(n * m)), ru(rg.size());
        Tensor rgt = host_tensor(rg, {n, m}), rut = host_tensor(ru, {n, m});
        cpu_->linear(host_tensor(x, {n, k}), Tensor::make(wgb.data(), f->type, {m, k}), nullptr, rgt);
        cpu_->linear(host_tensor(x, {n, k}), Tensor::make(wub.data(), f->type, {m, k}), nullptr, rut);
        cpu_->gated_activation(rgt, rut, act, rgt);
        EXPECT_LT(rel_l2(fused_g, rg), 2e-2) << what << ": against the CPU";
      }
    }
  }
}

// One token on the streamed K-quant GEMV (gguf_kquant_stream.cu), aimed at 1, 2 and 3 CTAs per SM,
// against the per-tile kernel (stream 0) bit for bit: the same sums in the same order. Shapes: one
// super-block (a stage of one, seven warps idle), a last stage of one super-block (k = 2,304),
// three projections of one launch with biases and partial tiles, the 8B's down (k = 14,336: 7
// stages a tile) and q/k/v, more tiles than CTAs (gate/up: 896), x from L1 (k = 40,960), gated
// gate/up in bf16, float32 and bf16 outputs; Q6_K rows of 8 and 56 super-blocks, and of 12 (not a
// multiple of 8: the ring refuses it, the tile kernel runs).
TEST_F(CudaGguf, StreamedOneTokenGemvEqualsTheTileKernelBitForBit) {
  struct Case {
    int format;  // index into formats()
    int64_t k;
    std::vector<int64_t> ms;
    bool gated, f32_out;
  };
  const Case cases[] = {
      {5, 256, {72}, false, true},           {5, 2304, {40}, false, false},
      {5, 1024, {96, 40, 8}, false, true},   {5, 4096, {4096, 1024, 1024}, false, false},
      {5, 14336, {4104}, false, false},      {5, 40960, {72}, false, true},
      {5, 4096, {14336, 14336}, true, false}, {5, 1024, {72, 72}, true, false},
      {5, 40960, {40, 40}, true, false},     {7, 2048, {72}, false, true},
      {7, 14336, {4096}, false, false},      {7, 3072, {72, 24}, false, true},
      {7, 4096, {72, 72}, true, false},      {7, 4096, {1024, 1024, 520}, false, true},
  };
  for (const Case& c : cases) {
    const Format& f = formats()[c.format];
    ASSERT_TRUE(f.type == DType::kQ4_K || f.type == DType::kQ6_K);
    auto x = random_values(rng_, static_cast<size_t>(c.k));
    DeviceTensor xg(DType::kBF16, {1, c.k});
    xg.set(x);
    std::vector<std::vector<uint8_t>> bytes;
    std::vector<Tensor> ws, biases;
    for (size_t p = 0; p < c.ms.size(); ++p) {
      bytes.push_back(random_blocks(rng_, f, c.ms[p], c.k, sane_scale(f.type, c.k) * 16.0f));
      ws.push_back(upload_blocks(bytes.back(), f.type, c.ms[p], c.k));
      ASSERT_NE(ws.back().data, nullptr);
      auto b = random_values(rng_, static_cast<size_t>(c.ms[p]));
      biases.push_back(upload(b, {c.ms[p]}));
    }
    const DType out_type = c.f32_out ? DType::kF32 : DType::kBF16;
    const auto run = [&](int stream_ctas) {
      std::vector<std::unique_ptr<DeviceTensor>> ys;
      cuda::GgufProjection proj[cuda::kGgufMaxProjections];
      for (size_t p = 0; p < c.ms.size(); ++p) {
        ys.push_back(std::make_unique<DeviceTensor>(out_type, std::initializer_list<int64_t>{1, c.ms[p]}));
        const bool bias = !c.gated && p % 2 == 0;
        proj[p] = {ws[p].data, bias ? static_cast<const float*>(biases[p].data) : nullptr, ys.back()->t.data,
                   c.ms[p]};
      }
      cuda::launch_gguf_kquant_gemv(xg.t.data, proj, static_cast<int>(c.ms.size()), f.type, 1, c.k,
                                    c.f32_out ? cuda::Elem::kF32 : cuda::Elem::kBf16, nullptr,
                                    c.gated ? cuda::kGateSilu : cuda::kGateNone, stream_ctas);
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<std::vector<float>> got;
      for (auto& y : ys) got.push_back(read_back(*gpu_, y->t));
      return got;
    };
    const auto tile = run(0);
    for (int ctas : {1, 2, 3, cuda::kKquantStreamAuto}) {
      const auto streamed = run(ctas);
      for (size_t p = 0; p < c.ms.size(); ++p) {
        EXPECT_TRUE(streamed[p] == tile[p]) << f.name << " k=" << c.k << " projection " << p << " of "
                                            << c.ms.size() << (c.gated ? " gated" : "") << ", " << ctas
                                            << " CTAs per SM";
      }
    }
  }
}

// The ring's plans on an H100's limits (132 SMs, 228 KB a SM, 227 KB a block): at least two
// stages and within the shared memory of the residency chosen, fewer CTAs per SM where a ring of
// two does not fit, none for Q6_K rows the stages cannot cut into 16-byte units.
TEST_F(CudaGguf, StreamedGemvPlansFitTheirResidency) {
  const size_t per_sm = 233472, per_block = 232448;
  struct Want {
    DType t;
    int64_t k, tiles;
    bool gated;
    int ask, ctas_per_sm;
  };
  const Want wants[] = {
      {DType::kQ4_K, 4096, 896, true, 2, 2},  {DType::kQ4_K, 4096, 896, true, 3, 2},
      {DType::kQ4_K, 4096, 384, false, 3, 3}, {DType::kQ6_K, 14336, 256, false, 3, 2},
      {DType::kQ4_K, 14336, 256, false, 2, 2}, {DType::kQ4_K, 65536, 8, true, 2, 2},
      {DType::kQ6_K, 3072, 8, false, 2, 0},   {DType::kQ4_K, 4096, 100, false, 1, 1},
      // Auto: three per SM where that takes a round off (384 q/k/v tiles: 1 round of 396 CTAs
      // against 2 of 264), else two (256 tiles fit 264 CTAs; 896 gated tiles need two per SM).
      {DType::kQ4_K, 4096, 384, false, cuda::kKquantStreamAuto, 3},
      {DType::kQ4_K, 4096, 256, false, cuda::kKquantStreamAuto, 2},
      {DType::kQ4_K, 4096, 896, true, cuda::kKquantStreamAuto, 2},
  };
  for (const Want& w : wants) {
    const auto plan = cuda::plan_gguf_kquant_stream(w.t, w.k, w.tiles, w.gated, w.ask, 132, per_sm, per_block);
    const std::string what = std::string(dtype_name(w.t)) + " k=" + std::to_string(w.k) + (w.gated ? " gated" : "");
    EXPECT_EQ(plan.ctas_per_sm, w.ctas_per_sm) << what;
    if (w.ctas_per_sm == 0) {
      EXPECT_EQ(plan.ctas, 0) << what;
      continue;
    }
    EXPECT_GE(plan.stages, 2) << what;
    EXPECT_EQ(plan.ctas, std::min<int64_t>(w.tiles, 132 * w.ctas_per_sm)) << what;
    EXPECT_GE(plan.cta_smem, plan.smem + 1024) << what;  // the runtime reserves 1 KB a CTA
    EXPECT_LE(plan.ctas_per_sm * plan.cta_smem, per_sm) << what;
    EXPECT_LE(plan.smem, per_block) << what;
  }
}

// A 17,000 x 4096 Q6_K lm_head is 69.6M elements, over the 64M-element bf16 scratch: the GEMM path
// dequantizes and multiplies it in two slices of output features (16,384 + 616), each product
// copied into its columns of the float32 logits.
TEST_F(CudaGguf, LmHeadLargerThanTheScratchGoesInSlices) {
  const Format& f = formats().back();
  ASSERT_EQ(f.type, DType::kQ6_K);
  const int n = cuda::kGgufKquantGemmMaxRows + 3;  // past the GEMVs and the K-quant GEMM
  const int64_t k = 4096, m = 17000;
  auto bytes = random_blocks(rng_, f, m, k, sane_scale(f.type, k) * 16.0f);
  const Tensor wg = upload_blocks(bytes, f.type, m, k);
  ASSERT_NE(wg.data, nullptr);
  auto x = random_values(rng_, static_cast<size_t>(n * k));
  DeviceTensor xg(DType::kBF16, {n, k});
  xg.set(x);
  DeviceTensor out(DType::kF32, {n, m});
  gpu_->linear(xg.t, wg, nullptr, out.t);
  std::vector<float> ref(static_cast<size_t>(n * m));
  Tensor rt = host_tensor(ref, {n, m});
  cpu_->linear(host_tensor(x, {n, k}), Tensor::make(bytes.data(), f.type, {m, k}), nullptr, rt);
  const auto got = read_back(*gpu_, out.t);
  EXPECT_LT(rel_l2(got, ref), 1e-2);
  // The last slice's columns, on their own (a misplaced copy would leave NaN or wrong rows there).
  std::vector<float> tail_got, tail_ref;
  for (int t = 0; t < n; ++t) {
    for (int64_t c = 16384; c < m; ++c) {
      tail_got.push_back(got[static_cast<size_t>(t * m + c)]);
      tail_ref.push_back(ref[static_cast<size_t>(t * m + c)]);
    }
  }
  EXPECT_LT(rel_l2(tail_got, tail_ref), 1e-2);
}

// Types without a GGUF kernel (Q2_K here) and 3-D tensors (stacked MoE experts) still become bf16.
TEST_F(CudaGguf, OtherTypesAndStackedTensorsAreStillDequantizedToBf16) {
  std::vector<uint8_t> q2(static_cast<size_t>(4 * 2) * block_bytes(DType::kQ2_K), 0);
  std::unique_ptr<Buffer> owner;
  auto w = gpu_->upload_weight(Tensor::make(q2.data(), DType::kQ2_K, {4, 512}), &owner);
  ASSERT_TRUE(w.ok()) << w.status().message();
  EXPECT_EQ(w->dtype, DType::kBF16);
  auto q4 = random_blocks(rng_, formats()[0], 2 * 8, 64, 0.01f);
  std::unique_ptr<Buffer> owner3;
  auto stacked = gpu_->upload_weight(Tensor::make(q4.data(), DType::kQ4_0, {2, 8, 64}), &owner3);
  ASSERT_TRUE(stacked.ok()) << stacked.status().message();
  EXPECT_EQ(stacked->dtype, DType::kBF16);
}

}  // namespace
}  // namespace kvasir::cuda_test
