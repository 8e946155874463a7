// Small-batch GEMV: y[t, r] = x[t, :] · w[r, :] (+ bias[r]) for up to kGemvMaxRows tokens, the
// decode path where reading the weights once is all that matters. One warp per output row, 16-byte
// non-caching weight loads, four in flight per lane (the first four issued before the kernel waits
// for the previous one); x comes from L1/L2. Fusions, so a decode layer is a handful of kernels: up
// to three projections of the same x in one launch (q/k/v); gate/up with the activation applied;
// an RMSNorm of the input folded in (each CTA normalises the rows once into shared memory, the
// first CTA also writes them out); and a residual add in the epilogue (residual += bf16(x · w)).
// A single token's GEMV up to 512 MB of weights splits each row over 2 or 4 warps of a CTA
// (partial sums meet in shared memory), so CTAs are short and the last wave's tail small.
#include <algorithm>

#include "backend/cuda/gate_activation.cuh"
#include "backend/cuda/gemv_common.cuh"

namespace kvasir::cuda {
namespace {

using namespace gemv_detail;

constexpr int kUnroll = 4;
constexpr int kStep = 32 * 8;  // elements of a row one warp covers per load
constexpr int64_t kPrefetchBytes = kUnroll * kStep * 2;
// KVASIR_GEMV_MINB=5: the single-row kernels are built a second time with their registers cut
// for five CTAs per SM (48 registers, a few bytes spilled outside the loop), for the A/B of
// occupancy against the compiler's own choice (86 registers, two CTAs per SM); 4: 64 registers
// (batch 1: 4.69 ms against 4.64 for the compiler's choice, 4.52 for the split; H200, 2026-11-29).
// KVASIR_GEMV_EARLY=0: the first round goes towards L2 before the wait and into registers after
// it (the previous behaviour), instead of into registers before it.
bool gemv_early() { return kernel_tuning().gemv_early; }

// KVASIR_GEMV_SPLIT=1|2|4: warps per row (split-K inside a CTA) for single-token GEMVs without a
// folded norm, up to kSplitMaxBytes of weights (lm_head's 1 GB already streams at the copy rate).
// The split kernels are built for four CTAs per SM (64 registers). Batch-1 decode, H200,
// 2026-11-29, one call: 2 warps 4.52-4.56 ms per step, 1 warp 4.64, 4 warps 4.69-4.71 (ncu: gate/up
// 63.9 -> 59.4 us, 3.95 TB/s; q/k/v and o unchanged at 16.2 and 12.1 us).
constexpr int kSplitMinBlocks = 4;
constexpr int64_t kSplitMaxBytes = int64_t{512} << 20;
int gemv_split() { return kernel_tuning().gemv_split; }
int split_for(int n, bool norm, int64_t rows, int64_t k) {
  return n == 1 && !norm && rows * k * 2 <= kSplitMaxBytes ? gemv_split() : 1;
}

int gemv_minb() { return kernel_tuning().gemv_min_blocks; }

template <int N>
__device__ __forceinline__ void fma_chunk(const uint4& wv, const bf16* __restrict__ x, int64_t k, int64_t i,
                                          float (&acc)[N]) {
  float wf[8];
  unpack8(wv, wf);
#pragma unroll
  for (int t = 0; t < N; ++t) {
    float xf[8];
    load8(x + t * k + i, xf);
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[t] = fmaf(wf[e], xf[e], acc[t]);
  }
}

// The first round of a row (kUnroll 16-byte loads per lane) can be issued before the kernel
// waits for the previous one: weights are never written by an earlier kernel, so these loads
// overlap its tail. They land in the registers the dot product streams through (no extra
// registers: occupancy, and so the bytes in flight per SM, is what a GEMV lives on).
struct Round {
  uint4 w[kUnroll];
  bool full;  // a whole round was loaded (else the row's tail is left to the one-chunk loop)
};
__device__ __forceinline__ void load_round(const bf16* __restrict__ wr, int64_t k, int64_t i, Round& f) {
  f.full = i + (kUnroll - 1) * kStep < k;
  if (f.full) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) f.w[u] = load_stream(wr + i + u * kStep);
  }
}

// acc[t] = x[t, :] · wr, summed over the warp, starting from a loaded first round f (consumed).
// Four 16-byte loads per lane are in flight before any is used. (Measured on the H200: deeper
// unrolling and interleaving the gate and up rows were both slower, from register pressure.)
// The warp covers columns [kb, ke) of the row (the whole row unless the row is split over warps);
// x rows are k apart.
template <int N>
__device__ __forceinline__ void row_dot(const bf16* __restrict__ x, const bf16* __restrict__ wr, int64_t k, int64_t kb,
                                        int64_t ke, int lane, Round& f, float (&acc)[N]) {
#pragma unroll
  for (int t = 0; t < N; ++t) acc[t] = 0.0f;
  int64_t i = kb + lane * 8;
  while (f.full) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) fma_chunk<N>(f.w[u], x, k, i + u * kStep, acc);
    i += kUnroll * kStep;
    load_round(wr, ke, i, f);
  }
  for (; i < ke; i += kStep) fma_chunk<N>(load_stream(wr + i), x, k, i, acc);
#pragma unroll
  for (int t = 0; t < N; ++t) acc[t] = warp_sum(acc[t]);
}

// Rows beyond the first round are pulled towards L2 before the wait up to pf_bytes per row (the
// host sizes it so a kernel's prefetch stays well inside L2: whole rows prefetched by early CTAs
// of the 235 MB gate/up overflowed it and were read twice, +1.1 ms per batch-1 step).
__device__ __forceinline__ void prefetch_rest(const bf16* wr, int64_t k, int64_t pf_bytes, int lane) {
  const int64_t first = kPrefetchBytes;
  const int64_t upto = 2 * k < pf_bytes ? 2 * k : pf_bytes;
  if (upto > first) prefetch_l2_warp(reinterpret_cast<const char*>(wr) + first, upto - first, lane);
}

// Split-K inside a CTA (S > 1): S warps share a row, each covering a run of whole 256-column steps,
// and their partial sums meet in shared memory. A CTA then owns kWarps / S rows and lives for
// about one round of loads, so the last wave of CTAs (the tail where the GPU's bytes in flight
// run down) is S times shorter: the short q/k/v and o GEMVs lost ~3-4 us each to it.
template <int S>
__device__ __forceinline__ void split_range(int64_t k, int part, int64_t& kb, int64_t& ke) {
  if constexpr (S == 1) {
    kb = 0;
    ke = k;
  } else {
    const int64_t per = ((k + kStep - 1) / kStep + S - 1) / S * kStep;
    kb = part * per;
    ke = kb + per < k ? kb + per : k;
  }
}

// Sums the S partial results of each row into the row's first warp (lane 0 holds them); every
// thread of the CTA must call it. Returns whether this warp writes the row.
template <int S, int N>
__device__ __forceinline__ bool split_reduce(float (&acc)[N], int warp, int lane, bool live) {
  if constexpr (S == 1) {
    return live;
  } else {
    __shared__ float part_sums[kWarps][N];
    if (lane == 0) {
#pragma unroll
      for (int t = 0; t < N; ++t) part_sums[warp][t] = acc[t];
    }
    __syncthreads();
    if (!live || warp % S != 0) return false;
#pragma unroll
    for (int t = 0; t < N; ++t) {
      float v = 0.0f;
#pragma unroll
      for (int p = 0; p < S; ++p) v += part_sums[warp + p][t];
      acc[t] = v;
    }
    return true;
  }
}

template <int N, bool kNorm, int MINB, int S>
__global__ void __launch_bounds__(kWarps * 32, MINB) gemv_kernel(GemvInput in, Segments segs, int64_t k, bool f32_out,
                                                         int64_t pf_bytes, bool early_regs) {
  static_assert(kWarps % S == 0, "a CTA holds whole rows");
  pdl_launch_dependents();
  extern __shared__ __align__(16) unsigned char gemv_smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  int64_t r = int64_t{blockIdx.x} * (kWarps / S) + warp / S;
  int64_t kb, ke;
  split_range<S>(k, warp % S, kb, ke);
  // Which projection this row belongs to, without indexing the parameter array at run time
  // (that would copy it to local memory). Warps past the last row still take part in the
  // CTA's input staging.
  static_assert(kGemvMaxOutputs == 3, "segment selection below is unrolled for three");
  GemvOut g = segs.seg[0];
  bool live = true;
  if (r >= g.m) {
    r -= g.m;
    g = segs.seg[1];
    if (segs.num < 2 || r >= g.m) {
      r -= segs.num < 2 ? 0 : g.m;
      g = segs.seg[2];
      if (segs.num < 3 || r >= g.m) live = false;
    }
  }
  Round f{};
  const bf16* wr = static_cast<const bf16*>(g.w) + r * k;
  const int64_t len = ke > kb ? ke - kb : 0;
  if (live && len > 0) {
    if (early_regs) load_round(wr, ke, kb + lane * 8, f);
    else prefetch_l2_warp(wr + kb, (2 * len < kPrefetchBytes ? 2 * len : kPrefetchBytes), lane);
    prefetch_rest(wr + kb, len, pf_bytes, lane);
  }
  pdl_wait();
  const bf16* x = stage_input<N, kNorm>(in, k, reinterpret_cast<bf16*>(gemv_smem));
  if (S == 1 && !live) return;
  float acc[N];
  if (live) {
    if (!early_regs) load_round(wr, ke, kb + lane * 8, f);
    row_dot<N>(x, wr, k, kb, ke, lane, f, acc);
  } else {
#pragma unroll
    for (int t = 0; t < N; ++t) acc[t] = 0.0f;
  }
  if (!split_reduce<S, N>(acc, warp, lane, live)) return;
  if (lane == 0) {
    const float b = g.bias != nullptr ? g.bias[r] : 0.0f;
#pragma unroll
    for (int t = 0; t < N; ++t) {
      const float v = acc[t] + b;
      if (g.residual != nullptr) {
        const bf16 o = __float2bfloat16_rn(v);
        if (g.y != nullptr) static_cast<bf16*>(g.y)[t * g.m + r] = o;
        bf16* res = static_cast<bf16*>(g.residual) + t * g.m + r;
        *res = __float2bfloat16_rn(__bfloat162float(*res) + __bfloat162float(o));
      } else if (f32_out) {
        static_cast<float*>(g.y)[t * g.m + r] = v;
      } else {
        static_cast<bf16*>(g.y)[t * g.m + r] = __float2bfloat16_rn(v);
      }
    }
  }
}

template <int N, bool kNorm, int MINB, int S>
__global__ void __launch_bounds__(kWarps * 32, MINB) gemv_gated_kernel(GemvInput in, const bf16* __restrict__ wg,
                                                                 const bf16* __restrict__ wu, int64_t m, int64_t k,
                                                                 bool gelu_tanh, bf16* __restrict__ y,
                                                                 bf16* __restrict__ up_out, int64_t pf_bytes,
                                                                 bool early_regs) {
  static_assert(kWarps % S == 0, "a CTA holds whole rows");
  pdl_launch_dependents();
  extern __shared__ __align__(16) unsigned char gemv_smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t r = int64_t{blockIdx.x} * (kWarps / S) + warp / S;
  const bool live = r < m;
  int64_t kb, ke;
  split_range<S>(k, warp % S, kb, ke);
  const int64_t len = ke > kb ? ke - kb : 0;
  // The gate row's first round goes to registers, the up row's towards L2 (two rounds held in
  // registers would cost occupancy).
  Round f{};
  if (live && len > 0) {
    if (early_regs) load_round(wg + r * k, ke, kb + lane * 8, f);
    else prefetch_l2_warp(wg + r * k + kb, (2 * len < kPrefetchBytes ? 2 * len : kPrefetchBytes), lane);
    prefetch_l2_warp(wu + r * k + kb, (2 * len < kPrefetchBytes ? 2 * len : kPrefetchBytes), lane);
    prefetch_rest(wg + r * k + kb, len, pf_bytes, lane);
    prefetch_rest(wu + r * k + kb, len, pf_bytes, lane);
  }
  pdl_wait();
  const bf16* x = stage_input<N, kNorm>(in, k, reinterpret_cast<bf16*>(gemv_smem));
  if (S == 1 && !live) return;
  float g[N], u[N];
  if (live) {
    if (!early_regs) load_round(wg + r * k, ke, kb + lane * 8, f);
    row_dot<N>(x, wg + r * k, k, kb, ke, lane, f, g);
    load_round(wu + r * k, ke, kb + lane * 8, f);
    row_dot<N>(x, wu + r * k, k, kb, ke, lane, f, u);
  } else {
#pragma unroll
    for (int t = 0; t < N; ++t) g[t] = u[t] = 0.0f;
  }
  if constexpr (S > 1) {
    // Gate and up partial sums meet in one pass (one barrier).
    float gu[2 * N];
#pragma unroll
    for (int t = 0; t < N; ++t) gu[t] = g[t], gu[N + t] = u[t];
    if (!split_reduce<S, 2 * N>(gu, warp, lane, live)) return;
#pragma unroll
    for (int t = 0; t < N; ++t) g[t] = gu[t], u[t] = gu[N + t];
  }
  if (lane == 0) {
#pragma unroll
    for (int t = 0; t < N; ++t) {
      // Rounded like the unfused ops: gate and up are bf16 tensors there.
      const float gv = __bfloat162float(__float2bfloat16_rn(g[t]));
      const float uv = __bfloat162float(__float2bfloat16_rn(u[t]));
      const float a = gate_activation(gv, gelu_tanh);
      if (up_out != nullptr) up_out[t * m + r] = __float2bfloat16_rn(uv);
      y[t * m + r] = __float2bfloat16_rn(a * uv);
    }
  }
}

// KVASIR_GEMV_PREFETCH_MB: how much of a GEMV's weights (beyond each row's first round) its CTAs
// pull towards L2 before waiting for the previous kernel, spread over its rows (default 0).
int64_t prefetch_per_row(int64_t rows) {
  static const int64_t budget = int64_t{kernel_tuning().gemv_prefetch_mb} << 20;
  return budget > 0 && rows > 0 ? budget / rows / 128 * 128 : 0;
}

size_t norm_smem(bool norm, int n, int64_t k) { return norm ? static_cast<size_t>(n) * k * sizeof(bf16) : 0; }

template <int N, int MINB>
void launch_multi_nb(const GemvInput& in, const Segments& segs, int64_t rows, int64_t k, Elem out, cudaStream_t s) {
  const unsigned blocks = static_cast<unsigned>((rows + kWarps - 1) / kWarps);
  const bool f32 = out == Elem::kF32;
  const int64_t pf = prefetch_per_row(rows);
  if (in.norm_w != nullptr) {
    launch(gemv_kernel<N, true, MINB, 1>, blocks, kWarps * 32, norm_smem(true, N, k), s, in, segs, k, f32, pf,
           gemv_early());
  } else {
    launch(gemv_kernel<N, false, MINB, 1>, blocks, kWarps * 32, 0, s, in, segs, k, f32, pf, gemv_early());
  }
}
template <int S>
void launch_multi_split(const GemvInput& in, const Segments& segs, int64_t rows, int64_t k, Elem out, cudaStream_t s) {
  constexpr int kRows = kWarps / S;
  const unsigned blocks = static_cast<unsigned>((rows + kRows - 1) / kRows);
  launch(gemv_kernel<1, false, kSplitMinBlocks, S>, blocks, kWarps * 32, 0, s, in, segs, k, out == Elem::kF32,
         prefetch_per_row(rows), gemv_early());
}
template <int N>
void launch_multi_n(const GemvInput& in, const Segments& segs, int64_t rows, int64_t k, Elem out, cudaStream_t s) {
  if constexpr (N == 1) {
    switch (split_for(1, in.norm_w != nullptr, rows, k)) {
      case 2: return launch_multi_split<2>(in, segs, rows, k, out, s);
      case 4: return launch_multi_split<4>(in, segs, rows, k, out, s);
      default: break;
    }
    if (gemv_minb() == 5) return launch_multi_nb<1, 5>(in, segs, rows, k, out, s);
    if (gemv_minb() == 4) return launch_multi_nb<1, 4>(in, segs, rows, k, out, s);
  }
  launch_multi_nb<N, 1>(in, segs, rows, k, out, s);
}

template <int N, int MINB>
void launch_gated_nb(const GemvInput& in, const bf16* wg, const bf16* wu, int64_t m, int64_t k, bool gelu, bf16* y,
                     bf16* up_out, cudaStream_t s) {
  const unsigned blocks = static_cast<unsigned>((m + kWarps - 1) / kWarps);
  const int64_t pf = prefetch_per_row(2 * m);
  if (in.norm_w != nullptr) {
    launch(gemv_gated_kernel<N, true, MINB, 1>, blocks, kWarps * 32, norm_smem(true, N, k), s, in, wg, wu, m, k, gelu,
           y, up_out, pf, gemv_early());
  } else {
    launch(gemv_gated_kernel<N, false, MINB, 1>, blocks, kWarps * 32, 0, s, in, wg, wu, m, k, gelu, y, up_out, pf,
           gemv_early());
  }
}
template <int S>
void launch_gated_split(const GemvInput& in, const bf16* wg, const bf16* wu, int64_t m, int64_t k, bool gelu, bf16* y,
                        bf16* up_out, cudaStream_t s) {
  constexpr int kRows = kWarps / S;
  const unsigned blocks = static_cast<unsigned>((m + kRows - 1) / kRows);
  launch(gemv_gated_kernel<1, false, kSplitMinBlocks, S>, blocks, kWarps * 32, 0, s, in, wg, wu, m, k, gelu, y, up_out,
         prefetch_per_row(2 * m), gemv_early());
}
template <int N>
void launch_gated_n(const GemvInput& in, const bf16* wg, const bf16* wu, int64_t m, int64_t k, bool gelu, bf16* y,
                    bf16* up_out, cudaStream_t s) {
  if constexpr (N == 1) {
    // Gate and up together count against the split's size limit.
    switch (split_for(1, in.norm_w != nullptr, 2 * m, k)) {
      case 2: return launch_gated_split<2>(in, wg, wu, m, k, gelu, y, up_out, s);
      case 4: return launch_gated_split<4>(in, wg, wu, m, k, gelu, y, up_out, s);
      default: break;
    }
    if (gemv_minb() == 5) return launch_gated_nb<1, 5>(in, wg, wu, m, k, gelu, y, up_out, s);
    if (gemv_minb() == 4) return launch_gated_nb<1, 4>(in, wg, wu, m, k, gelu, y, up_out, s);
  }
  launch_gated_nb<N, 1>(in, wg, wu, m, k, gelu, y, up_out, s);
}

template <int N, int MINB>
void init_norm_nb() {
  KVASIR_CUDA_CHECK(cudaFuncSetAttribute(gemv_kernel<N, true, MINB, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(kGemvNormSmemMax)));
  KVASIR_CUDA_CHECK(cudaFuncSetAttribute(gemv_gated_kernel<N, true, MINB, 1>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(kGemvNormSmemMax)));
}
template <int N>
void init_norm_n() {
  init_norm_nb<N, 1>();
  if constexpr (N == 1) {
    init_norm_nb<1, 5>();
    init_norm_nb<1, 4>();
  }
}

}  // namespace

void init_gemv_kernels() {
  init_norm_n<1>();
  init_norm_n<2>();
  init_norm_n<3>();
  init_norm_n<4>();
  init_norm_n<5>();
  init_norm_n<6>();
  init_norm_n<7>();
  init_norm_n<8>();
  init_gemv_tc_kernels();
}

// Up to kGemvMaxRows (KVASIR_GEMV_MAX_ROWS lowers it for A/B runs against cuBLASLt): the rows share
// each weight load, but their FMAs and activation loads run on CUDA cores.
bool gemv_supported(int64_t n, int64_t k) {
  return n >= 1 && n <= std::min<int64_t>(kGemvMaxRows, kernel_tuning().gemv_max_rows) && k % 8 == 0;
}

void launch_gemv_multi(const GemvInput& in, const GemvOut* outs, int num, int n, int64_t k, Elem out, cudaStream_t s) {
  KVASIR_CHECK(num >= 1 && num <= kGemvMaxOutputs);
  if (gemv_tc_applies(n, outs, num)) return launch_gemv_tc_multi(in, outs, num, n, k, out, s);
  Segments segs{};
  int64_t rows = 0;
  for (int i = 0; i < num; ++i) {
    segs.seg[i] = outs[i];
    rows += outs[i].m;
  }
  segs.num = num;
  with_token_count(n, [&](auto t) { launch_multi_n<decltype(t)::value>(in, segs, rows, k, out, s); });
}

void launch_gemv(const void* x, const void* w, const float* bias, int n, int64_t m, int64_t k, void* y, Elem out,
                 cudaStream_t s) {
  const GemvOut o{w, bias, y, m, nullptr};
  launch_gemv_multi(GemvInput{x, nullptr, 0.0f, nullptr}, &o, 1, n, k, out, s);
}

void launch_gemv_gated(const GemvInput& in, const void* w_gate, const void* w_up, int n, int64_t m, int64_t k,
                       bool gelu_tanh, void* y, void* up_out, cudaStream_t s) {
  const GemvOut gate{w_gate, nullptr, y, m, nullptr};
  if (gemv_tc_applies(n, &gate, 1)) return launch_gemv_tc_gated(in, w_gate, w_up, n, m, k, gelu_tanh, y, up_out, s);
  const auto* wg = static_cast<const bf16*>(w_gate);
  const auto* wu = static_cast<const bf16*>(w_up);
  auto* out = static_cast<bf16*>(y);
  auto* up = static_cast<bf16*>(up_out);
  with_token_count(n, [&](auto t) { launch_gated_n<decltype(t)::value>(in, wg, wu, m, k, gelu_tanh, out, up, s); });
}

}  // namespace kvasir::cuda
