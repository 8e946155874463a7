// The W4A16 GEMM on Hopper's wgmma for batched decode and short prefills (the design: the main
// loop's header, w4a16_wgmma_mainloop.cuh): the kernel that splits K across the CTAs of a cluster,
// the choice between it and the stream-K kernel (w4a16_wgmma_stream.cu), and the launch.
// Up to one row tile (64 tokens), K is split across the CTAs of a cluster when the tiles cannot
// fill the SMs, and the cluster adds the float32 tiles through distributed shared memory
// (w4a16_gemm_tile.cuh's sum_split_tiles); from two row tiles (KVASIR_W4A16_WGMMA_STREAM) the
// stream-K kernel deals the work out over every SM.
#include <algorithm>
#include <array>
#include <string>

#include "backend/cuda/w4a16_kernels.h"
#include "backend/cuda/w4a16_wgmma_mainloop.cuh"
#include "common/log.h"

namespace kvasir::cuda {
namespace {

// Grid: (column tiles of every projection, row tiles of 64 tokens, K slices); with slices,
// clusters of (1, 1, slices) that add their tiles through distributed shared memory. Four
// warpgroups, one 64-feature A tile each (four warps a scheduler to hide the dequantization's
// latencies).
template <int kType, bool kZeros, int kAhead>
__global__ void __launch_bounds__(kWgThreads, 1) w4a16_wgmma_kernel(W4a16GemmArgs a) {
  // 1,024-byte aligned (the 128-byte swizzle's atom; no static shared memory here to offset it).
  extern __shared__ __align__(1024) uint8_t smem[];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, t = lane & 3, g = lane >> 2;
  int64_t n0 = 0;
  const W4a16Projection p = tile_projection<kWgBN>(a, static_cast<int>(blockIdx.x), &n0);
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kBM;
  const int chunks = static_cast<int>(a.k / 64);
  const int kb = static_cast<int>(blockIdx.z) * a.kc_per_split;
  const int ke = min(chunks, kb + a.kc_per_split);
  float acc[32];
#pragma unroll
  for (int v = 0; v < 32; ++v) acc[v] = 0.0f;
  pdl_launch_dependents();
  tile_mainloop<kType, kZeros, kAhead>(a, p, m0, n0, kb, ke, kb + ((ke - kb + 1) & ~1), smem, acc);
  if (gridDim.z > 1) {
    constexpr int kStride = kWgBN + 8;
    const int f0 = warp * 16 + g;
    float* red = reinterpret_cast<float*>(smem);
    __syncthreads();  // every warpgroup is done with the stages
#pragma unroll
    for (int b = 0; b < 8; ++b) {
#pragma unroll
      for (int c = 0; c < 4; ++c) red[(8 * b + 2 * t + (c & 1)) * kStride + f0 + 8 * (c >> 1)] = acc[4 * b + c];
    }
    sum_split_tiles<kBM, kWgBN, kWgThreads>(a, p, m0, n0, red);
    return;
  }
  store_tile(a, p, m0, n0, acc);
}

// How many clusters of s CTAs of this kernel (one CTA an SM) the GPU holds at once, s = 1..8, as
// the runtime reports it: a GPC holds whole clusters, so the SMs over s overstate it (on an H100,
// splits capped at 8 picked clusters of 5, 7 and 8 for a batch-64 Llama-8B step, 8.28 ms, against
// 5.82 ms with the cap at 4; BENCHMARKS.md 2026-12-06). Asked once; 0 where the query fails.
const int* wgmma_cluster_capacity() {
  static const std::array<int, kMaxSplits + 1> capacity = [] {
    std::array<int, kMaxSplits + 1> c{};
    // Every depth takes one CTA an SM (512 threads, over 100 registers each), so the clusters
    // resident depend on the cluster size alone; asked of the deepest.
    auto* kernel = w4a16_wgmma_kernel<kW4a16ScaleF16, true, 8>;
    constexpr size_t kWgSmem = wg_smem(8);
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kWgSmem)) !=
        cudaSuccess) {
      (void)cudaGetLastError();
      return c;
    }
    std::string line;
    for (int s = 1; s <= kMaxSplits; ++s) {
      cudaLaunchAttribute attr{};
      attr.id = cudaLaunchAttributeClusterDimension;
      attr.val.clusterDim.x = 1;
      attr.val.clusterDim.y = 1;
      attr.val.clusterDim.z = static_cast<unsigned>(s);
      cudaLaunchConfig_t cfg{};
      cfg.gridDim = dim3(1, 1, static_cast<unsigned>(s));
      cfg.blockDim = dim3(kWgThreads);
      cfg.dynamicSmemBytes = kWgSmem;
      cfg.attrs = &attr;
      cfg.numAttrs = 1;
      int n = 0;
      if (cudaOccupancyMaxActiveClusters(&n, kernel, &cfg) != cudaSuccess) {
        (void)cudaGetLastError();
        n = 0;
      }
      c[static_cast<size_t>(s)] = n;
      line += " " + std::to_string(s) + ":" + std::to_string(n);
    }
    KVASIR_LOG_INFO("W4A16 wgmma GEMM: clusters resident at once, by cluster size:%s", line.c_str());
    return c;
  }();
  return capacity.data();
}

}  // namespace

bool wgmma_device() {
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  return major == 9 && minor == 0;
}

int w4a16_wgmma_splits(int64_t n, int64_t m, int64_t k, int num_sms) {
  return w4a16_splits_for((m + kWgBN - 1) / kWgBN * ((n + kBM - 1) / kBM), k / 64, num_sms, 1,
                          wgmma_cluster_capacity());
}

bool w4a16_wgmma_takes(const W4a16Projection* proj, int num_proj) {
  // One kernel variant per launch: with or without zero points for every projection.
  for (int i = 1; i < num_proj; ++i) {
    if ((proj[i].zeros != nullptr) != (proj[0].zeros != nullptr)) return false;
  }
  return true;
}

void launch_w4a16_wgmma(const void* x, const W4a16Projection* proj, int num_proj, int64_t n, int64_t k, Elem out,
                        int num_sms, const W4a16StreamWorkspace* ws, cudaStream_t s) {
  int64_t tiles = 0;
  W4a16GemmArgs a = w4a16_gemm_args(x, proj, num_proj, n, k, out, kWgBN, &tiles);
  const int64_t row_tiles = (n + kBM - 1) / kBM, chunks = k / 64;
  const int64_t all_tiles = tiles * row_tiles, pairs = (chunks + 1) / 2;
  const int stream_rows = kernel_tuning().w4a16_wgmma_stream_rows;
  // (The kernel counts pairs in int: U < 2^30 keeps them there.)
  if (ws != nullptr && ws->base != nullptr && stream_rows > 0 && n >= stream_rows &&
      all_tiles <= kW4a16StreamTickets && all_tiles * pairs < (int64_t{1} << 30)) {
    W4a16StreamSplit sk{};
    sk.tickets = static_cast<int32_t*>(ws->base);
    sk.partials = reinterpret_cast<float*>(static_cast<int32_t*>(ws->base) + kW4a16StreamTickets);
    sk.tiles = static_cast<int32_t>(all_tiles);
    sk.column_tiles = static_cast<int32_t>(tiles);
    sk.pairs_per_tile = static_cast<int32_t>(pairs);
    const int64_t ctas = std::min<int64_t>({num_sms, ws->max_ctas, all_tiles * pairs});
    launch_w4a16_wgmma_stream(a, sk, static_cast<int>(ctas), s);
  } else {
    // Even slices where the splits allow (the loop pads an odd one with a zero chunk).
    const dim3 grid =
        w4a16_gemm_grid(a, tiles, w4a16_splits_for(all_tiles, chunks, num_sms, 1, wgmma_cluster_capacity()), true);
    with_wgmma_variant(a, [&]<int kType, bool kZeros, int kAhead>() {
      constexpr size_t smem = wg_smem(kAhead);
      auto kernel = w4a16_wgmma_kernel<kType, kZeros, kAhead>;
      KVASIR_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
      launch_clustered(kernel, grid, kWgThreads, dim3(1, 1, grid.z), smem, s, a);
    });
  }
  KVASIR_CUDA_LAUNCH_CHECK();
}

}  // namespace kvasir::cuda
