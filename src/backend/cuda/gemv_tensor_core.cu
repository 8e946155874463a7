// Small-batch GEMV on tensor cores, for 2-8 tokens (a verify step, a small decode batch): on CUDA
// cores every weight costs n FMAs plus n activation loads and conversions, which at 5-8 tokens
// issue-bounds the kernel below the weight stream (the CUDA-core GEMV at 8 rows ran 34-46% slower
// than at 1 on the H200). Here one m16n8k16 mma takes 16 weight rows x 16 columns against up to 8
// tokens, so the instruction count per weight byte no longer grows with the tokens.
//
// A warp owns 16 rows (a row group); each lane streams 16-byte runs of two of them (rows g and
// g + 8, g = lane / 4) at columns 8c.. (c = lane % 4), 32 columns a step. Those 8 columns feed two
// mmas, whose k positions are the columns in a permuted order: the activation fragment is loaded
// with the same permutation (token g's 16 bytes at the same columns), and a dot product does not
// care in which order its k terms come. Row groups split their columns over S warps of a CTA
// (partial sums meet in shared memory) so that short matrices still put enough loads in flight;
// S depends only on the matrix shape, never on the token count, so every token's result is the
// same whether it ran with 2 or 8 others.
#include "backend/cuda/gate_activation.cuh"
#include "backend/cuda/gemv_common.cuh"
#include "backend/cuda/warp_mma.cuh"

namespace kvasir::cuda {
namespace {

using namespace gemv_detail;

constexpr int kGroupRows = 16;
constexpr int kTcStep = 32;    // columns of a row group one warp covers per step
// Two builds (KVASIR_GEMV_TC_VARIANT): U = 4 steps in flight per round, double-buffered, at two
// CTAs per SM (128 registers), or U = 2 at three CTAs per SM (85 registers). Without a bound the
// compiler took 130 registers: one CTA per SM, and 1-token GEMVs ran 16% slower than on CUDA cores.
struct TcShape {
  int unroll, min_blocks;
};
constexpr TcShape kTcShapes[2] = {{4, 2}, {2, 3}};

template <int U>
struct TcRound {
  uint4 lo[U], hi[U];  // rows g and g + 8
};

template <int U>
__device__ __forceinline__ void tc_load_round(const bf16* __restrict__ w0, int64_t k, int64_t ke, int64_t i, int c,
                                              TcRound<U>& f) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t col = i + u * kTcStep + 8 * c;
    if (col < ke) {
      f.lo[u] = load_stream(w0 + col);
      f.hi[u] = load_stream(w0 + 8 * k + col);
    } else {
      f.lo[u] = f.hi[u] = make_uint4(0, 0, 0, 0);
    }
  }
}

// acc (the m16n8 accumulator fragment) += w[16 rows, kb:ke] · x[tokens, kb:ke]^T, starting from a
// loaded first round f. w0 points at row g of the group; x rows are k apart.
template <int N, int U>
__device__ __forceinline__ void tc_group_dot(const bf16* __restrict__ x, const bf16* __restrict__ w0, int64_t k,
                                             int64_t kb, int64_t ke, int lane, TcRound<U>& f, float (&acc)[4]) {
  const int g = lane >> 2, c = lane & 3;
  acc[0] = acc[1] = acc[2] = acc[3] = 0.0f;
  const bf16* xg = x + (g < N ? g : 0) * k;
  for (int64_t i = kb; i < ke; i += U * kTcStep) {
    uint4 xv[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t col = i + u * kTcStep + 8 * c;
      xv[u] = g < N && col < ke ? *reinterpret_cast<const uint4*>(xg + col) : make_uint4(0, 0, 0, 0);
    }
    TcRound<U> cur = f;
    if (i + U * kTcStep < ke) tc_load_round<U>(w0, k, ke, i + U * kTcStep, c, f);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const uint32_t a0[4] = {cur.lo[u].x, cur.hi[u].x, cur.lo[u].y, cur.hi[u].y};
      mma_bf16(acc, a0, xv[u].x, xv[u].y);
      const uint32_t a1[4] = {cur.lo[u].z, cur.hi[u].z, cur.lo[u].w, cur.hi[u].w};
      mma_bf16(acc, a1, xv[u].z, xv[u].w);
    }
  }
}

// Columns [kb, ke) of split part `part` of S, in whole rounds of the wider build (so both builds
// split the columns alike).
template <int S>
__device__ __forceinline__ void tc_split_range(int64_t k, int part, int64_t& kb, int64_t& ke) {
  constexpr int64_t kRound = 4 * kTcStep;
  const int64_t per = ((k + kRound - 1) / kRound + S - 1) / S * kRound;
  kb = part * per;
  ke = kb + per < k ? kb + per : k;
}

// Sums the S warps' fragments of a row group into its first warp; every thread calls it.
template <int S, int V>
__device__ __forceinline__ bool tc_split_reduce(float (&acc)[V], int warp, int lane) {
  if constexpr (S == 1) {
    return true;
  } else {
    __shared__ float part_sums[kWarps][V][32];
#pragma unroll
    for (int j = 0; j < V; ++j) part_sums[warp][j][lane] = acc[j];
    __syncthreads();
    if (warp % S != 0) return false;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      float v = 0.0f;
#pragma unroll
      for (int p = 0; p < S; ++p) v += part_sums[warp + p][j][lane];
      acc[j] = v;
    }
    return true;
  }
}

template <int N, bool kNorm, int S, int V>
__global__ void __launch_bounds__(kWarps * 32, kTcShapes[V].min_blocks) gemv_tc_kernel(GemvInput in, Segments segs, int64_t groups, int64_t k,
                                                              bool f32_out) {
  pdl_launch_dependents();
  extern __shared__ __align__(16) unsigned char gemv_smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t group = int64_t{blockIdx.x} * (kWarps / S) + warp / S;
  const bool live = group < groups;
  int64_t r = group * kGroupRows;  // first row, in the concatenation of the segments
  static_assert(kGemvMaxOutputs == 3, "segment selection below is unrolled for three");
  GemvOut o = segs.seg[0];
  if (r >= o.m) {
    r -= o.m;
    o = segs.seg[1];
    if (segs.num >= 2 && r >= o.m) {
      r -= o.m;
      o = segs.seg[2];
    }
  }
  int64_t kb, ke;
  tc_split_range<S>(k, warp % S, kb, ke);
  const int g = lane >> 2, c = lane & 3;
  const bf16* w0 = static_cast<const bf16*>(o.w) + (r + g) * k;
  constexpr int U = kTcShapes[V].unroll;
  TcRound<U> f{};
  if (live && kb < ke) tc_load_round<U>(w0, k, ke, kb, c, f);  // weights: before the wait
  pdl_wait();
  const bf16* x = stage_input<N, kNorm>(in, k, reinterpret_cast<bf16*>(gemv_smem));
  if (S == 1 && !live) return;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if (live && kb < ke) tc_group_dot<N, U>(x, w0, k, kb, ke, lane, f, acc);
  if (!tc_split_reduce<S, 4>(acc, warp, lane) || !live) return;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int t = 2 * c + (j & 1);
    if (t >= N) continue;
    const int64_t row = r + g + (j >= 2 ? 8 : 0);
    const float v = acc[j] + (o.bias != nullptr ? o.bias[row] : 0.0f);
    if (o.residual != nullptr) {
      const bf16 b = __float2bfloat16_rn(v);
      if (o.y != nullptr) static_cast<bf16*>(o.y)[t * o.m + row] = b;
      bf16* res = static_cast<bf16*>(o.residual) + t * o.m + row;
      *res = __float2bfloat16_rn(__bfloat162float(*res) + __bfloat162float(b));
    } else if (f32_out) {
      static_cast<float*>(o.y)[t * o.m + row] = v;
    } else {
      static_cast<bf16*>(o.y)[t * o.m + row] = __float2bfloat16_rn(v);
    }
  }
}

template <int N, bool kNorm, int S, int V>
__global__ void __launch_bounds__(kWarps * 32, kTcShapes[V].min_blocks) gemv_tc_gated_kernel(GemvInput in, const bf16* __restrict__ wg,
                                                                    const bf16* __restrict__ wu, int64_t m, int64_t k,
                                                                    bool gelu_tanh, bf16* __restrict__ y,
                                                                    bf16* __restrict__ up_out) {
  pdl_launch_dependents();
  extern __shared__ __align__(16) unsigned char gemv_smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t r = (int64_t{blockIdx.x} * (kWarps / S) + warp / S) * kGroupRows;
  const bool live = r < m;
  int64_t kb, ke;
  tc_split_range<S>(k, warp % S, kb, ke);
  const int g = lane >> 2, c = lane & 3;
  constexpr int U = kTcShapes[V].unroll;
  TcRound<U> f{};
  if (live && kb < ke) tc_load_round<U>(wg + (r + g) * k, k, ke, kb, c, f);
  pdl_wait();
  const bf16* x = stage_input<N, kNorm>(in, k, reinterpret_cast<bf16*>(gemv_smem));
  if (S == 1 && !live) return;
  float gu[8] = {};
  if (live && kb < ke) {
    float a[4];
    tc_group_dot<N, U>(x, wg + (r + g) * k, k, kb, ke, lane, f, a);
#pragma unroll
    for (int j = 0; j < 4; ++j) gu[j] = a[j];
    tc_load_round<U>(wu + (r + g) * k, k, ke, kb, c, f);
    tc_group_dot<N, U>(x, wu + (r + g) * k, k, kb, ke, lane, f, a);
#pragma unroll
    for (int j = 0; j < 4; ++j) gu[4 + j] = a[j];
  }
  if (!tc_split_reduce<S, 8>(gu, warp, lane) || !live) return;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int t = 2 * c + (j & 1);
    if (t >= N) continue;
    const int64_t row = r + g + (j >= 2 ? 8 : 0);
    // Rounded like the unfused ops: gate and up are bf16 tensors there.
    const float gv = __bfloat162float(__float2bfloat16_rn(gu[j]));
    const float uv = __bfloat162float(__float2bfloat16_rn(gu[4 + j]));
    const float act = gate_activation(gv, gelu_tanh);
    if (up_out != nullptr) up_out[t * m + row] = __float2bfloat16_rn(uv);
    y[t * m + row] = __float2bfloat16_rn(act * uv);
  }
}

// Warps per row group: the fewest that fill every SM's CTA slots (132 SMs on the H200), from the
// shape alone (never from the token count).
int tc_split(int64_t groups) {
  const int64_t target = int64_t{132} * kTcShapes[1].min_blocks * kWarps;
  for (int s : {1, 2, 4}) {
    if (groups * s >= target) return s;
  }
  return 8;
}

int tc_variant() { return kernel_tuning().gemv_tc_variant; }

template <int N, int S, int V>
void launch_tc_v(const GemvInput& in, const Segments& segs, int64_t groups, int64_t k, Elem out, cudaStream_t s) {
  const unsigned blocks = static_cast<unsigned>((groups + kWarps / S - 1) / (kWarps / S));
  const bool norm = in.norm_w != nullptr;
  const size_t smem = norm ? static_cast<size_t>(N) * k * sizeof(bf16) : 0;
  if (norm) launch(gemv_tc_kernel<N, true, S, V>, blocks, kWarps * 32, smem, s, in, segs, groups, k, out == Elem::kF32);
  else launch(gemv_tc_kernel<N, false, S, V>, blocks, kWarps * 32, smem, s, in, segs, groups, k, out == Elem::kF32);
}
template <int N, int S>
void launch_tc(const GemvInput& in, const Segments& segs, int64_t groups, int64_t k, Elem out, cudaStream_t s) {
  if (tc_variant() == 1) launch_tc_v<N, S, 1>(in, segs, groups, k, out, s);
  else launch_tc_v<N, S, 0>(in, segs, groups, k, out, s);
}
template <int N>
void launch_tc_n(const GemvInput& in, const Segments& segs, int64_t groups, int64_t k, Elem out, cudaStream_t s) {
  switch (tc_split(groups)) {
    case 1: return launch_tc<N, 1>(in, segs, groups, k, out, s);
    case 2: return launch_tc<N, 2>(in, segs, groups, k, out, s);
    case 4: return launch_tc<N, 4>(in, segs, groups, k, out, s);
    default: return launch_tc<N, 8>(in, segs, groups, k, out, s);
  }
}

template <int N, int S, int V>
void launch_tc_gated_v(const GemvInput& in, const bf16* wg, const bf16* wu, int64_t m, int64_t k, bool gelu, bf16* y,
                       bf16* up_out, cudaStream_t s) {
  const int64_t groups = m / kGroupRows;
  const unsigned blocks = static_cast<unsigned>((groups + kWarps / S - 1) / (kWarps / S));
  const bool norm = in.norm_w != nullptr;
  const size_t smem = norm ? static_cast<size_t>(N) * k * sizeof(bf16) : 0;
  if (norm) launch(gemv_tc_gated_kernel<N, true, S, V>, blocks, kWarps * 32, smem, s, in, wg, wu, m, k, gelu, y, up_out);
  else launch(gemv_tc_gated_kernel<N, false, S, V>, blocks, kWarps * 32, smem, s, in, wg, wu, m, k, gelu, y, up_out);
}
template <int N, int S>
void launch_tc_gated(const GemvInput& in, const bf16* wg, const bf16* wu, int64_t m, int64_t k, bool gelu, bf16* y,
                     bf16* up_out, cudaStream_t s) {
  if (tc_variant() == 1) launch_tc_gated_v<N, S, 1>(in, wg, wu, m, k, gelu, y, up_out, s);
  else launch_tc_gated_v<N, S, 0>(in, wg, wu, m, k, gelu, y, up_out, s);
}
template <int N>
void launch_tc_gated_n(const GemvInput& in, const bf16* wg, const bf16* wu, int64_t m, int64_t k, bool gelu, bf16* y,
                       bf16* up_out, cudaStream_t s) {
  // Gate and up rows together count towards the warps in flight.
  switch (tc_split(2 * m / kGroupRows)) {
    case 1: return launch_tc_gated<N, 1>(in, wg, wu, m, k, gelu, y, up_out, s);
    case 2: return launch_tc_gated<N, 2>(in, wg, wu, m, k, gelu, y, up_out, s);
    case 4: return launch_tc_gated<N, 4>(in, wg, wu, m, k, gelu, y, up_out, s);
    default: return launch_tc_gated<N, 8>(in, wg, wu, m, k, gelu, y, up_out, s);
  }
}

template <int N, int S>
void init_tc_s() {
  const int smem = static_cast<int>(kGemvNormSmemMax);
  for (auto* f : {gemv_tc_kernel<N, true, S, 0>, gemv_tc_kernel<N, true, S, 1>}) {
    KVASIR_CUDA_CHECK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  }
  for (auto* f : {gemv_tc_gated_kernel<N, true, S, 0>, gemv_tc_gated_kernel<N, true, S, 1>}) {
    KVASIR_CUDA_CHECK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  }
}
template <int N>
void init_tc_n() {
  init_tc_s<N, 1>();
  init_tc_s<N, 2>();
  init_tc_s<N, 4>();
  init_tc_s<N, 8>();
}

}  // namespace

void init_gemv_tc_kernels() {
  init_tc_n<1>();
  init_tc_n<2>();
  init_tc_n<3>();
  init_tc_n<4>();
  init_tc_n<5>();
  init_tc_n<6>();
  init_tc_n<7>();
  init_tc_n<8>();
}

bool gemv_tc_applies(int64_t n, const GemvOut* outs, int num) {
  if (n < kernel_tuning().gemv_tc_min_rows || n > kGemvMaxRows) return false;
  for (int i = 0; i < num; ++i) {
    if (outs[i].m % kGroupRows != 0) return false;
  }
  return true;
}

void launch_gemv_tc_multi(const GemvInput& in, const GemvOut* outs, int num, int n, int64_t k, Elem out,
                          cudaStream_t s) {
  Segments segs{};
  int64_t rows = 0;
  for (int i = 0; i < num; ++i) {
    segs.seg[i] = outs[i];
    rows += outs[i].m;
  }
  segs.num = num;
  const int64_t groups = rows / kGroupRows;
  with_token_count(n, [&](auto t) { launch_tc_n<decltype(t)::value>(in, segs, groups, k, out, s); });
}

void launch_gemv_tc_gated(const GemvInput& in, const void* w_gate, const void* w_up, int n, int64_t m, int64_t k,
                          bool gelu_tanh, void* y, void* up_out, cudaStream_t s) {
  const auto* wg = static_cast<const bf16*>(w_gate);
  const auto* wu = static_cast<const bf16*>(w_up);
  auto* out = static_cast<bf16*>(y);
  auto* up = static_cast<bf16*>(up_out);
  with_token_count(n, [&](auto t) { launch_tc_gated_n<decltype(t)::value>(in, wg, wu, m, k, gelu_tanh, out, up, s); });
}

}  // namespace kvasir::cuda
