// Device helpers shared by the backend's kernels: bf16 vectors of 8 (16-byte accesses), warp and
// block reductions, launch-error checks. Header-only device code; must not hold kernels.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <utility>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_tuning.h"

namespace kvasir::cuda {

using bf16 = __nv_bfloat16;

// Every launch is followed by this: a bad configuration must fail where it happens.
#define KVASIR_CUDA_LAUNCH_CHECK() KVASIR_CUDA_CHECK(cudaGetLastError())

// Programmatic dependent launch (Hopper): every kernel opens with pdl_begin(), which waits for the
// previous kernel's memory before anything is read and lets the next kernel's CTAs be scheduled
// early (they wait in their own pdl_begin), hiding the launch gap between small kernels.
// The trigger comes first: a dependent's own wait still covers this grid's completion (and so,
// transitively, every earlier grid's), and kernels further down the chain can start staging what
// they read that no earlier kernel writes (weights, host-staged metadata).
__device__ __forceinline__ void pdl_begin() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// The two halves of pdl_begin(), for kernels that first touch memory no earlier kernel writes
// (weights): pdl_launch_dependents(), that read, then pdl_wait() before any activation is read.
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// 16 bytes a kernel reads once (weights streamed past): not kept in L1.
__device__ __forceinline__ uint4 load_stream(const void* p) {
  uint4 r;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(p));
  return r;
}

// Pulls [p, p + bytes) towards L2, one 128-byte line per lane per step (no registers tied up).
__device__ __forceinline__ void prefetch_l2_warp(const void* p, int64_t bytes, int lane) {
  const char* c = static_cast<const char*>(p);
  for (int64_t o = static_cast<int64_t>(lane) * 128; o < bytes; o += 32 * 128) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(c + o));
  }
}

// KVASIR_CUDA_PDL=0 turns dependent launches off (for A/B timing).
inline bool pdl_enabled() { return kernel_tuning().pdl; }

// launch() for CTAs grouped in thread-block clusters of `cluster` (sm_90: they share distributed
// shared memory and cluster barriers); the grid is a multiple of it. (1, 1, 1): no clusters.
template <typename... KArgs, typename... Args>
void launch_clustered(void (*kernel)(KArgs...), dim3 grid, dim3 block, dim3 cluster, size_t smem, cudaStream_t s,
                      Args&&... args) {
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  if (cluster.x * cluster.y * cluster.z > 1) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = cluster.x;
    attr[n].val.clusterDim.y = cluster.y;
    attr[n].val.clusterDim.z = cluster.z;
    ++n;
  }
  if (pdl_enabled()) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cfg.attrs = attr;
  cfg.numAttrs = n;
  KVASIR_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

template <typename... KArgs, typename... Args>
void launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, Args&&... args) {
  launch_clustered(kernel, grid, block, dim3(1, 1, 1), smem, s, std::forward<Args>(args)...);
}

__device__ __forceinline__ void load8(const bf16* p, float (&v)[8]) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    v[2 * i] = f.x;
    v[2 * i + 1] = f.y;
  }
}

__device__ __forceinline__ void store8(bf16* p, const float (&v)[8]) {
  uint4 u;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
  *reinterpret_cast<uint4*>(p) = u;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `scratch` holds 32 floats; the call ends with the scratch free for reuse.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = lane < nwarps ? scratch[lane] : 0.0f;
  r = warp_sum(r);
  __syncthreads();
  return r;
}

// Cache slot of position j of a sequence through its block table.
__device__ __forceinline__ int64_t slot_of(const int32_t* table, int j, int block_size) {
  return static_cast<int64_t>(table[j / block_size]) * block_size + j % block_size;
}

inline unsigned grid_for(int64_t n, int threads, int64_t max_blocks = 65535LL * 16) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > max_blocks) b = max_blocks;
  return static_cast<unsigned>(b);
}

}  // namespace kvasir::cuda
