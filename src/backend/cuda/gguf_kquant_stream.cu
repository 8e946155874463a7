// One token's Q4_K / Q6_K GEMV on a ring of shared-memory stages fed by the bulk-copy engine.
// The per-tile kernel (gguf_kquant_gemv.cu) gives each CTA one 16-row tile and keeps a warp's next
// super-block in registers: its CTAs start together, all request their bytes, all wait, then all
// sum while the memory system idles, and the next CTAs start cold (one token's projections read a
// Q4_K_M 8B at ~1.5 TB/s of an H100's 3.35, ncu). Here a CTA lives for the whole launch and walks
// its tiles (blockIdx.x, + gridDim.x, ...) as a stream of stages, each stage 8 super-blocks of
// the tile's 16 rows (and, gated, of up's 16 rows): one bulk copy per row lands a stage and
// completes on its mbarrier, and the stages after it are already in flight while the warps sum it.
// - Sums: warp w takes the stage's super-block w, i.e. the tile's w, w + 8, ... in order, with the
//   formats' own decode and MMA code (gguf_kquant_formats.cuh, bytes read from shared memory), and
//   the warps' tile sums meet in a fixed order: the per-tile kernel's arithmetic in its order, so
//   the outputs equal it bit for bit (CudaGguf.StreamedOneTokenGemvEqualsTheTileKernelBitForBit).
// - Shared rows are padded so a quarter-warp's reads of rows g = 0..7 fall in distinct banks: a
//   Q4_K stage row (1,152 bytes, 0 mod 128) by 32 bytes; Q6_K's 1,680 bytes are already 16 mod 128.
// - Weights are never written by an earlier kernel: the first stages are requested before the PDL
//   wait; x (the previous kernel's output) is staged after it.
#include <algorithm>

#include "backend/cuda/bulk_copy.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/gguf_kquant_formats.cuh"
#include "backend/cuda/gguf_kquant_rows.cuh"
#include "backend/cuda/gguf_kquant_stream.h"

namespace kvasir::cuda {
namespace {

using kquant::XSource;

constexpr int kWarps = kquant::kGemvWarps;
constexpr int kThreads = kquant::kGemvThreads;
constexpr int kStageBlocks = kWarps;  // super-blocks of each row in a stage: one per warp
using kquant::kFactorBytes;
using kquant::kFactorsBytes;
constexpr int kMaxStages = 6;
constexpr int64_t kMaxStagedX = 16384;  // x in shared memory up to this k (32 KB), else from L1

template <class F>
struct Ring {
  static constexpr int kRowBytes = kStageBlocks * F::kBlockBytes;
  static constexpr int kStride = kRowBytes % 128 == 0 ? kRowBytes + 32 : kRowBytes;
  static_assert(kStride % 16 == 0 && (kStride / 4) % 32 != 0, "stage rows: 16-byte units, off the 128-byte period");
};

struct StreamArgs : kquant::ProjectionRows {
  const bf16* x;
  int64_t tiles;  // kquant::work_tiles
  int32_t chunks, stages;
};

extern __shared__ __align__(128) uint8_t stream_smem[];

template <class F, bool kGated, bool kStageX, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks) kquant_stream_kernel(StreamArgs a) {
  constexpr int kProj = kGated ? 2 : 1;
  constexpr int kStride = Ring<F>::kStride;
  constexpr int kStageBytes = kProj * 16 * kStride;
  __shared__ float red[kWarps][kProj][16];
  __shared__ __align__(8) uint64_t full[kMaxStages];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  uint8_t* ring = stream_smem;
  float* fbuf = reinterpret_cast<float*>(ring + static_cast<size_t>(a.stages) * kStageBytes) +
                warp * 2 * (kFactorBytes / 4);
  bf16* xrow = reinterpret_cast<bf16*>(ring + static_cast<size_t>(a.stages) * kStageBytes + kFactorsBytes);
  // The CTA's stream: item i is chunk i % chunks of its tile i / chunks (an int: the plan caps
  // tiles x chunks).
  const int my_tiles = a.tiles > blockIdx.x ? static_cast<int>((a.tiles - 1 - blockIdx.x) / gridDim.x) + 1 : 0;
  const int items = my_tiles * a.chunks;

  // The projection and first row of a work tile.
  const auto locate = [&](int64_t tile, int& p, int64_t& row0) {
    p = 0;
    if constexpr (!kGated) {
      while (p + 1 < a.num_proj && tile >= a.tile_end[p]) ++p;
    }
    row0 = (tile - (p == 0 ? 0 : a.tile_end[p - 1])) * 16;
  };
  // Warp 0 requests stream item i (its tile's chunk i % chunks) into slot i % stages: lane 0 arms
  // the barrier with the stage's bytes, then lane r copies row r (r < 16; gated, up's rows 16..31).
  const auto request = [&](int i) {
    const int64_t tile = blockIdx.x + static_cast<int64_t>(i / a.chunks) * gridDim.x;
    const int chunk = i % a.chunks;
    const int blocks = min(kStageBlocks, a.super_blocks - chunk * kStageBlocks);
    const unsigned bytes = static_cast<unsigned>(blocks * F::kBlockBytes);
    const int slot = i % a.stages;
    uint64_t* bar = &full[slot];
    int p;
    int64_t row0;
    locate(tile, p, row0);
    if (lane == 0) mbar_expect_tx(bar, kProj * 16 * bytes);
    __syncwarp();
    if (lane < kProj * 16) {
      const int q = lane >> 4, r = lane & 15;
      const GgufProjection& pr = a.proj[kGated ? q : p];
      const int64_t row = min(row0 + r, pr.out_features - 1);  // rows past m repeat the last
      bulk_copy(ring + static_cast<size_t>(slot) * kStageBytes + lane * kStride,
                static_cast<const uint8_t*>(pr.w) + row * a.row_bytes +
                    static_cast<int64_t>(chunk) * kStageBlocks * F::kBlockBytes,
                bytes, bar);
    }
  };

  if (threadIdx.x == 0) {
    for (int i = 0; i < a.stages; ++i) mbar_init(&full[i], 1);
    mbar_init_fence();
  }
  __syncthreads();
  pdl_launch_dependents();
  if (warp == 0) {
    for (int i = 0; i < a.stages && i < items; ++i) request(i);
  }
  pdl_wait();  // x is the previous kernel's output
  XSource<1> xs;
  if constexpr (kStageX) {
    const int chunks16 = static_cast<int>(a.k / 8);
    for (int c = threadIdx.x; c < chunks16; c += kThreads) {
      reinterpret_cast<uint4*>(xrow)[c] = __ldg(reinterpret_cast<const uint4*>(a.x) + c);
    }
    xs.row[0] = xrow;
    __syncthreads();
  } else {
    xs.row[0] = a.x;
  }

  float acc[kProj][1][4];
#pragma unroll
  for (int q = 0; q < kProj; ++q) acc[q][0][0] = acc[q][0][1] = acc[q][0][2] = acc[q][0][3] = 0.0f;
  for (int i = 0; i < items; ++i) {
    const int slot = i % a.stages;
    const int chunk = i % a.chunks;
    const int sb = chunk * kStageBlocks + warp;
    mbar_wait(&full[slot], static_cast<unsigned>((i / a.stages) & 1));
    if (sb < a.super_blocks) {
      const uint8_t* base = ring + static_cast<size_t>(slot) * kStageBytes + warp * F::kBlockBytes;
#pragma unroll
      for (int q = 0; q < kProj; ++q) {
        const uint8_t* rows = base + q * 16 * kStride;
        typename F::Block b;
        // A Q6_K super-block's parity within the stage is its parity in the row (chunks are even).
        if (F::kAligned || (warp & 1) == 0) {
          F::template load<false, kquant::SharedBytes>(rows + g * kStride, rows + (g + 8) * kStride,
                                                       rows + (lane & 15) * kStride, t, b);
        } else {
          F::template load<true, kquant::SharedBytes>(rows + g * kStride, rows + (g + 8) * kStride,
                                                      rows + (lane & 15) * kStride, t, b);
        }
        float* fb = fbuf + q * (kFactorBytes / 4);
        F::decode_factors(b, lane, fb);
        __syncwarp();
        F::template sum<1, kStageX, true>(b, static_cast<int64_t>(sb) * 256, fb + F::kFactorFloats * g, xs, t,
                                          acc[q]);
      }
    }
    if (chunk == a.chunks - 1) {  // the tile's last stage: its sums meet, warps in order
      const int64_t tile = blockIdx.x + static_cast<int64_t>(i / a.chunks) * gridDim.x;
      if (t == 0) {
#pragma unroll
        for (int q = 0; q < kProj; ++q) {
          red[warp][q][g] = acc[q][0][0];
          red[warp][q][g + 8] = acc[q][0][2];
        }
      }
#pragma unroll
      for (int q = 0; q < kProj; ++q) acc[q][0][0] = acc[q][0][1] = acc[q][0][2] = acc[q][0][3] = 0.0f;
      __syncthreads();
      int p;
      int64_t row0;
      locate(tile, p, row0);
      const GgufProjection& pr = a.proj[p];
      const int64_t r = row0 + threadIdx.x;
      if (threadIdx.x < 16 && r < pr.out_features) {
        float v[kProj];
#pragma unroll
        for (int q = 0; q < kProj; ++q) {
          v[q] = 0.0f;
#pragma unroll
          for (int w8 = 0; w8 < kWarps; ++w8) v[q] += red[w8][q][threadIdx.x];
        }
        kquant::store_row<kGated>(a, pr, r, r, v);
      }
    }
    __syncthreads();  // every warp is done with the slot (and with red)
    if (warp == 0 && i + a.stages < items) request(i + a.stages);
  }
}

template <class F, bool kGated, bool kStageX, int kMinBlocks>
void launch_kernel(const StreamArgs& a, const KquantStreamPlan& plan, cudaStream_t s) {
  auto* kernel = kquant_stream_kernel<F, kGated, kStageX, kMinBlocks>;
  KVASIR_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(plan.smem)));
  // The plan counts on the SM's whole shared memory for its residency (only x beyond 32 KB is read
  // through L1).
  KVASIR_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                         cudaSharedmemCarveoutMaxShared));
  launch(kernel, static_cast<unsigned>(plan.ctas), kThreads, plan.smem, s, a);
  KVASIR_CUDA_LAUNCH_CHECK();
}

template <class F, bool kGated, bool kStageX>
void launch_residency(const StreamArgs& a, const KquantStreamPlan& plan, cudaStream_t s) {
  if (plan.ctas_per_sm >= 3) launch_kernel<F, kGated, kStageX, 3>(a, plan, s);
  else if (plan.ctas_per_sm == 2) launch_kernel<F, kGated, kStageX, 2>(a, plan, s);
  else launch_kernel<F, kGated, kStageX, 1>(a, plan, s);
}

template <class F>
void launch_format(const StreamArgs& a, const KquantStreamPlan& plan, cudaStream_t s) {
  if (a.gated != kGateNone) {
    if (plan.stage_x) launch_residency<F, true, true>(a, plan, s);
    else launch_residency<F, true, false>(a, plan, s);
  } else {
    if (plan.stage_x) launch_residency<F, false, true>(a, plan, s);
    else launch_residency<F, false, false>(a, plan, s);
  }
}

struct DeviceLimits {
  int sms = 0;
  size_t smem_per_sm = 0, smem_per_block = 0;
};
DeviceLimits device_limits() {
  int dev = 0, sms = 0, per_sm = 0, per_block = 0;
  KVASIR_CUDA_CHECK(cudaGetDevice(&dev));
  KVASIR_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  KVASIR_CUDA_CHECK(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
  KVASIR_CUDA_CHECK(cudaDeviceGetAttribute(&per_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  return {sms, static_cast<size_t>(per_sm), static_cast<size_t>(per_block)};
}

}  // namespace

KquantStreamPlan plan_gguf_kquant_stream(DType t, int64_t k, int64_t tiles, bool gated, int ctas_per_sm, int num_sms,
                                         size_t smem_per_sm, size_t smem_per_block) {
  if (ctas_per_sm == kKquantStreamAuto) {
    // Whole tiles per CTA: the launch lasts as many tile rounds as its busiest CTA has.
    const auto two = plan_gguf_kquant_stream(t, k, tiles, gated, 2, num_sms, smem_per_sm, smem_per_block);
    const auto three = plan_gguf_kquant_stream(t, k, tiles, gated, 3, num_sms, smem_per_sm, smem_per_block);
    const auto rounds = [&](const KquantStreamPlan& p) { return (tiles + p.ctas - 1) / p.ctas; };
    return three.ctas_per_sm == 3 && two.ctas > 0 && rounds(three) < rounds(two) ? three : two;
  }
  KquantStreamPlan plan;
  if (k <= 0 || k % 256 != 0 || k > (int64_t{1} << 24) || tiles <= 0 || tiles > (int64_t{1} << 24) || num_sms <= 0) {
    return plan;
  }
  const int64_t super_blocks = k / 256;
  if (tiles * ((super_blocks + kStageBlocks - 1) / kStageBlocks) >= (int64_t{1} << 30)) return plan;  // int items
  int stride = 0;
  if (t == DType::kQ4_K) stride = Ring<kquant::Q4K>::kStride;
  else if (t == DType::kQ6_K && super_blocks % kStageBlocks == 0) stride = Ring<kquant::Q6K>::kStride;
  else return plan;
  const size_t stage_bytes = static_cast<size_t>(gated ? 2 : 1) * 16 * stride;
  const bool stage_x = k <= kMaxStagedX;
  const size_t fixed = kFactorsBytes + (stage_x ? static_cast<size_t>(k) * 2 : 0);
  // Per CTA beside the dynamic bytes: the static red + barriers and the 1 KB the runtime reserves.
  const size_t per_cta_extra = sizeof(float) * kWarps * 2 * 16 + 64 + 1024;
  for (int n = std::clamp(ctas_per_sm, 1, 3); n >= 1; --n) {
    const size_t budget = std::min(smem_per_sm / n - per_cta_extra, smem_per_block - per_cta_extra + 1024);
    if (budget <= fixed) continue;
    const int stages = static_cast<int>(std::min<size_t>(kMaxStages, (budget - fixed) / stage_bytes));
    if (stages < 2) continue;
    plan.ctas = static_cast<int>(std::min<int64_t>(tiles, static_cast<int64_t>(n) * num_sms));
    plan.stages = stages;
    plan.smem = fixed + stages * stage_bytes;
    plan.cta_smem = plan.smem + per_cta_extra;
    plan.stage_x = stage_x;
    plan.ctas_per_sm = n;
    return plan;
  }
  return plan;
}

bool launch_gguf_kquant_stream(const void* x, const GgufProjection* proj, int num_proj, DType t, int64_t k, Elem out,
                               cudaStream_t s, GateAct gated, int ctas_per_sm) {
  if (!aligned16(x) || num_proj < 1 || num_proj > kGgufMaxProjections) return false;
  StreamArgs a{};
  a.x = static_cast<const bf16*>(x);
  if (!kquant::set_projection_rows(a, proj, num_proj, t, k, out, gated)) return false;
  a.chunks = (a.super_blocks + kStageBlocks - 1) / kStageBlocks;
  a.tiles = kquant::work_tiles(a);
  static const DeviceLimits lim = device_limits();
  const KquantStreamPlan plan = plan_gguf_kquant_stream(t, k, a.tiles, gated != kGateNone, ctas_per_sm, lim.sms,
                                                        lim.smem_per_sm, lim.smem_per_block);
  if (plan.ctas == 0) return false;
  a.stages = plan.stages;
  if (t == DType::kQ4_K) launch_format<kquant::Q4K>(a, plan, s);
  else launch_format<kquant::Q6K>(a, plan, s);
  return true;
}

}  // namespace kvasir::cuda
