// GEMM over Q4_K and Q6_K blocks for decode-sized batches past the K-quant GEMV's 16 tokens (the
// batched decode steps of a Q4_K_M model), so they read the blocks once instead of dequantizing
// every weight to bf16 for cuBLASLt each step (a write and a read of 15 GiB for an 8B).
// - The GEMV's A operand (gguf_kquant_formats.cuh: a warp's 16 rows, each lane's fetched quant
//   bytes are its fragments), turned into the weights rounded to bf16 in registers (sum_rounded:
//   two bf16x2 FMAs a fragment register, shared by the 64 tokens), so the MMAs add straight into
//   the tile. (The GEMV's exact scheme, scales applied in float32 per sub-block and octet, with the
//   sums of x from a kernel before: 141 us for an 8B's gate/up at 64 tokens on an H100, ~1,900
//   instructions a warp and super-block, issue-bound.) Dequantize + cuBLASLt rounds the same way.
// - A CTA is 8 warps of 16 rows (a 128-row tile) over 64 tokens (8 octets of the B operand; 32
//   for batches of up to 32), walking the super-blocks together: each super-block's 64 x 256 slice
//   of x is staged in shared memory by cp.async (two stages) and read by all eight warps.
// - Where the tiles cannot fill the GPU (q/k/v, o, down of an 8B), K is split over CTAs (the split
//   count depends only on the tiles and K, never on the batch: a token's result does not depend on
//   the tokens around it); the splits' float32 tiles go to a workspace and a second kernel adds
//   them in split order (deterministic) with the bias.
// - A warp's next two super-blocks of weights are in flight in registers while it sums the
//   current one (the first two requested before the PDL wait).
#include <algorithm>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/gguf_kernels.h"
#include "backend/cuda/gguf_kquant_formats.cuh"
#include "backend/cuda/warp_mma.cuh"

namespace kvasir::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kTileRows = kWarps * 16;
// A CTA's tokens: kOct octets, 8 (64 tokens) or, for batches of up to 32, 4 (half the MMAs and
// x reads where the other half would be padding).
template <int kOct>
constexpr int kTokens = kOct * 8;
constexpr int kXStride = 256 + 32;  // bf16 per staged row (576 bytes: a quarter-warp's 16-byte
                                    // loads, two rows x four lanes, fall in distinct banks)
template <int kOct>
constexpr int kStageBytes = kTokens<kOct> * kXStride * 2;
using kquant::kFactorBytes;
template <int kOct>
constexpr size_t kSmemBytes = 2 * kStageBytes<kOct> + kWarps * 2 * kFactorBytes;
constexpr int kMaxSplits = 8;

struct KquantGemmArgs {
  const bf16* x;
  float* partial;  // [splits][n][m_total] where splits > 1
  GgufProjection proj[kGgufMaxProjections];
  int64_t tile_end[kGgufMaxProjections];  // prefix sums of the projections' 128-row tiles
  int64_t col_base[kGgufMaxProjections];  // a projection's first column in a partial row
  int64_t k, row_bytes, m_total;
  int32_t n, f32_out, num_proj, super_blocks, splits, token_groups;
};

// The GEMM's x source for the format's sum_rounded(): a stage's tokens x 256 columns.
struct XTile {
  const bf16* row;  // the lane's token of the first octet (those of the others follow, 8 rows apart)

  __device__ __forceinline__ uint4 x16(int o, int col, int t) const {
    return *reinterpret_cast<const uint4*>(row + o * 8 * kXStride + col + 8 * t);
  }
  __device__ __forceinline__ uint2 x8(int o, int col, int t) const {
    return *reinterpret_cast<const uint2*>(row + o * 8 * kXStride + col + 4 * t);
  }
};

// Stage super-block sb's x slice (kTokens rows x 256 columns; rows past n zero) into st.
// Thread i copies 16-byte chunk i % 32 of rows i / 32, i / 32 + 8, ...
template <int kOct>
__device__ __forceinline__ void stage_tile(const KquantGemmArgs& a, int sb, int tok0, uint8_t* st) {
  constexpr int kRowsPerPass = kThreads / 32;
  const int r0 = threadIdx.x >> 5, ch = threadIdx.x & 31;
  bf16* dst = reinterpret_cast<bf16*>(st) + r0 * kXStride + ch * 8;
  const bf16* src = a.x + static_cast<int64_t>(tok0 + r0) * a.k + sb * 256 + ch * 8;
#pragma unroll
  for (int j = 0; j < kTokens<kOct> / kRowsPerPass; ++j) {
    const bool valid = tok0 + r0 + j * kRowsPerPass < a.n;
    cp_async16(dst + j * kRowsPerPass * kXStride, valid ? src + j * kRowsPerPass * a.k : a.x, valid);
  }
}

template <class F, int kOct>
__global__ void __launch_bounds__(kThreads, 2) kquant_gemm_kernel(KquantGemmArgs a) {
  extern __shared__ __align__(16) uint8_t gemm_smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int64_t tile = blockIdx.x / a.token_groups;
  const int tok0 = static_cast<int>(blockIdx.x % a.token_groups) * kTokens<kOct>;
  int p = 0;
  while (p + 1 < a.num_proj && tile >= a.tile_end[p]) ++p;
  const GgufProjection& pr = a.proj[p];
  const int64_t m = pr.out_features;
  const int64_t row0 = (tile - (p == 0 ? 0 : a.tile_end[p - 1])) * kTileRows + warp * 16;
  const kquant::TileRows tr = kquant::tile_rows(pr.w, m, a.row_bytes, row0, lane);
  const int split = static_cast<int>(blockIdx.y);
  const int sb0 = split * a.super_blocks / a.splits, sb1 = (split + 1) * a.super_blocks / a.splits;
  const auto load = [&](int sb, typename F::Block& b) { kquant::load_super_block<F>(tr, sb, t, b); };
  pdl_launch_dependents();
  typename F::Block ba, bb;
  if (sb0 < sb1) load(sb0, ba);
  if (sb0 + 1 < sb1) load(sb0 + 1, bb);
  pdl_wait();  // x is the previous kernel's output
  uint8_t* stage[2] = {gemm_smem, gemm_smem + kStageBytes<kOct>};
  if (sb0 < sb1) stage_tile<kOct>(a, sb0, tok0, stage[0]);
  cp_async_commit();
  if (sb0 + 1 < sb1) stage_tile<kOct>(a, sb0 + 1, tok0, stage[1]);
  cp_async_commit();
  const XTile xt[2] = {{reinterpret_cast<const bf16*>(stage[0]) + g * kXStride},
                       {reinterpret_cast<const bf16*>(stage[1]) + g * kXStride}};
  uint32_t* fbuf = reinterpret_cast<uint32_t*>(gemm_smem + 2 * kStageBytes<kOct> + warp * 2 * kFactorBytes);
  constexpr int kBufWords = kFactorBytes / 4;
  float acc[kOct][4];
#pragma unroll
  for (int o = 0; o < kOct; ++o) acc[o][0] = acc[o][1] = acc[o][2] = acc[o][3] = 0.0f;
  // Stage buf holds super-block sb; its weights are in b. After the sums, b takes sb + 2's bytes and,
  // once every warp is past this stage, the stage takes sb + 2's x.
  const auto step = [&](typename F::Block& b, int sb, int buf) {
    cp_async_wait<1>();
    __syncthreads();
    F::decode_factors_bf16(b, lane, fbuf + buf * kBufWords);
    __syncwarp();
    F::template sum_rounded<kOct>(b, fbuf + buf * kBufWords + F::kFactorFloats * g, xt[buf], t, acc);
    if (sb + 2 < sb1) load(sb + 2, b);
    __syncthreads();
    if (sb + 2 < sb1) stage_tile<kOct>(a, sb + 2, tok0, stage[buf]);
    cp_async_commit();
  };
  for (int sb = sb0; sb < sb1; sb += 2) {
    step(ba, sb, 0);
    if (sb + 1 >= sb1) break;
    step(bb, sb + 1, 1);
  }
  // C fragment: acc[o][j] is row g (j < 2) or g + 8, token o * 8 + 2t + (j & 1).
#pragma unroll
  for (int o = 0; o < kOct; ++o) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int tok = tok0 + o * 8 + 2 * t + (j & 1);
      const int64_t r = row0 + g + (j < 2 ? 0 : 8);
      if (tok >= a.n || r >= m) continue;
      float v = acc[o][j];
      if (a.splits > 1) {
        a.partial[(static_cast<int64_t>(split) * a.n + tok) * a.m_total + a.col_base[p] + r] = v;
        continue;
      }
      if (pr.bias != nullptr) v += pr.bias[r];
      if (a.f32_out) static_cast<float*>(pr.y)[tok * m + r] = v;
      else static_cast<bf16*>(pr.y)[tok * m + r] = __float2bfloat16(v);
    }
  }
}

// y = the splits' partials added in split order (+ bias).
__global__ void __launch_bounds__(256) kquant_gemm_reduce_kernel(KquantGemmArgs a) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * 256 + threadIdx.x;
  if (i >= a.n * a.m_total) return;
  const int64_t tok = i / a.m_total, c = i % a.m_total;
  int p = 0;
  while (p + 1 < a.num_proj && c >= a.col_base[p + 1]) ++p;
  const GgufProjection& pr = a.proj[p];
  const int64_t r = c - a.col_base[p];
  float v = 0.0f;
  for (int s = 0; s < a.splits; ++s) v += a.partial[(static_cast<int64_t>(s) * a.n + tok) * a.m_total + c];
  if (pr.bias != nullptr) v += pr.bias[r];
  const int64_t at = tok * pr.out_features + r;
  if (a.f32_out) static_cast<float*>(pr.y)[at] = v;
  else static_cast<bf16*>(pr.y)[at] = __float2bfloat16(v);
}

template <class F, int kOct>
void launch_gemm(const KquantGemmArgs& a, dim3 grid, cudaStream_t s) {
  auto* kernel = kquant_gemm_kernel<F, kOct>;
  KVASIR_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes<kOct>));
  launch(kernel, grid, kThreads, kSmemBytes<kOct>, s, a);
  KVASIR_CUDA_LAUNCH_CHECK();
}

int64_t tiles_of(const GgufProjection* proj, int num_proj) {
  int64_t tiles = 0;
  for (int p = 0; p < num_proj; ++p) tiles += (proj[p].out_features + kTileRows - 1) / kTileRows;
  return tiles;
}

}  // namespace

bool gguf_kquant_gemm_supported(DType t, int64_t k) { return gguf_kquant_gemv_supported(t, k); }

KquantGemmPlan plan_gguf_kquant_gemm(const GgufProjection* proj, int num_proj, int n, int64_t k, int num_sms) {
  KquantGemmPlan plan;
  const int64_t tiles = std::max<int64_t>(1, tiles_of(proj, num_proj));
  const int64_t super_blocks = k / 256;
  // About one wave of two CTAs an SM; at least two super-blocks a split (the weights of two in
  // flight per warp).
  int64_t splits = (2 * static_cast<int64_t>(num_sms) + tiles / 2) / tiles;
  splits = std::min<int64_t>({splits, kMaxSplits, super_blocks / 2});
  plan.splits = static_cast<int>(std::max<int64_t>(1, splits));
  int64_t m_total = 0;
  for (int p = 0; p < num_proj; ++p) m_total += proj[p].out_features;
  plan.partial_floats = plan.splits > 1 ? static_cast<size_t>(plan.splits) * n * m_total : 0;
  return plan;
}

void launch_gguf_kquant_gemm(const void* x, const GgufProjection* proj, int num_proj, DType t, int n, int64_t k,
                             Elem out, float* partial, int num_sms, cudaStream_t s) {
  KVASIR_CHECK_MSG(n >= 1 && gguf_kquant_gemm_supported(t, k) && aligned16(x) && num_proj >= 1 &&
                       num_proj <= kGgufMaxProjections,
                   "K-quant GEMM: Q4_K or Q6_K rows of whole (Q6_K: an even number of) super-blocks, a 16-byte "
                   "aligned input, 1..3 projections");
  const KquantGemmPlan plan = plan_gguf_kquant_gemm(proj, num_proj, n, k, num_sms);
  KVASIR_CHECK_MSG(plan.splits == 1 || partial != nullptr, "K-quant GEMM: a split K needs its workspace");
  KquantGemmArgs a{};
  a.x = static_cast<const bf16*>(x);
  a.partial = partial;
  a.k = k;
  a.super_blocks = static_cast<int32_t>(k / 256);
  a.row_bytes = a.super_blocks * static_cast<int64_t>(t == DType::kQ4_K ? kquant::Q4K::kBlockBytes
                                                                         : kquant::Q6K::kBlockBytes);
  a.n = n;
  a.f32_out = out == Elem::kF32 ? 1 : 0;
  a.num_proj = num_proj;
  a.splits = plan.splits;
  const bool half = n <= kTokens<4>;
  a.token_groups = half ? 1 : (n + kTokens<8> - 1) / kTokens<8>;
  int64_t tiles = 0;
  for (int p = 0; p < num_proj; ++p) {
    KVASIR_CHECK_MSG(aligned16(proj[p].w) && proj[p].out_features > 0, "K-quant GEMM: 16-byte aligned, non-empty weights");
    a.proj[p] = proj[p];
    a.col_base[p] = a.m_total;
    a.m_total += proj[p].out_features;
    tiles += (proj[p].out_features + kTileRows - 1) / kTileRows;
    a.tile_end[p] = tiles;
  }
  const dim3 grid(static_cast<unsigned>(tiles * a.token_groups), static_cast<unsigned>(a.splits));
  if (t == DType::kQ4_K) {
    if (half) launch_gemm<kquant::Q4K, 4>(a, grid, s);
    else launch_gemm<kquant::Q4K, 8>(a, grid, s);
  } else {
    if (half) launch_gemm<kquant::Q6K, 4>(a, grid, s);
    else launch_gemm<kquant::Q6K, 8>(a, grid, s);
  }
  if (a.splits > 1) {
    launch(kquant_gemm_reduce_kernel, static_cast<unsigned>((n * a.m_total + 255) / 256), 256, 0, s, a);
    KVASIR_CUDA_LAUNCH_CHECK();
  }
}

}  // namespace kvasir::cuda
