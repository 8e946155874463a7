// The custom all-reduce's kernels (see custom_all_reduce.h for the algorithm). A block meets the
// same block of every other rank at each barrier, so each rank must launch the same grid for the
// same call: the grid and the element-to-thread mapping depend only on the message size and the
// world size, never on a rank's own pointers (an output pointer that is not 16-byte aligned is
// written element by element, with the same mapping).
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>

#include "dist/custom_all_reduce_kernels.h"

namespace kvasir::dist::car {
namespace {

__device__ __forceinline__ void store_release(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%1], %0;" ::"r"(v), "l"(p) : "memory");
}
__device__ __forceinline__ uint32_t load_acquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// This call's flag number for the block: one more than the block's last.
__device__ uint32_t begin_call(const RankBuffers& b) {
  __shared__ uint32_t flag;
  if (threadIdx.x == 0) flag = b.signals[b.rank]->blocks[blockIdx.x].counter + 1;
  __syncthreads();
  return flag;
}
__device__ void end_call(const RankBuffers& b, uint32_t flag) {
  if (threadIdx.x == 0) b.signals[b.rank]->blocks[blockIdx.x].counter = flag;
}

// Tells the same block of every rank that this block reached `phase` (after all of the block's
// earlier writes: bar.sync, then a release at system scope), then waits until each of them has.
__device__ void barrier(const RankBuffers& b, int phase, uint32_t flag) {
  __syncthreads();
  if (threadIdx.x < b.world_size) {
    const int peer = static_cast<int>(threadIdx.x);
    store_release(&b.signals[peer]->blocks[blockIdx.x].flags[phase][b.rank], flag);
    const uint32_t* mine = &b.signals[b.rank]->blocks[blockIdx.x].flags[phase][peer];
    const uint64_t start = b.timeout_ns != 0 ? global_ns() : 0;
    while (load_acquire(mine) != flag) {
      if (b.timeout_ns != 0 && global_ns() - start > b.timeout_ns) {
        printf("kvasir custom all-reduce: rank %d, block %d waited over %llu s for rank %d: a peer is gone; "
               "failing the kernel\n",
               b.rank, static_cast<int>(blockIdx.x), static_cast<unsigned long long>(b.timeout_ns / 1000000000ull), peer);
        __trap();
      }
    }
  }
  __syncthreads();
}

template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

// Loads that skip L1: a peer's buffer changes between calls, and L1 is not coherent with it.
template <typename P>
__device__ __forceinline__ P load_cg(const P* p) {
  P r;
  if constexpr (sizeof(P) == 16) {
    const uint4 u = __ldcg(reinterpret_cast<const uint4*>(p));
    memcpy(&r, &u, 16);
  } else if constexpr (sizeof(P) == 4) {
    const unsigned u = __ldcg(reinterpret_cast<const unsigned*>(p));
    memcpy(&r, &u, 4);
  } else if constexpr (sizeof(P) == 2) {
    const unsigned short u = __ldcg(reinterpret_cast<const unsigned short*>(p));
    memcpy(&r, &u, 2);
  } else {
    static_assert(sizeof(P) == 1, "loads of 1, 2, 4 or 16 bytes");
    const unsigned char u = __ldcg(reinterpret_cast<const unsigned char*>(p));
    memcpy(&r, &u, 1);
  }
  return r;
}

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ void from_float(float x, float& out) { out = x; }
__device__ __forceinline__ void from_float(float x, __nv_bfloat16& out) { out = __float2bfloat16_rn(x); }

// Pack i summed over every rank's staging, in float32, in rank order 0..n-1, rounded once.
template <typename T, int N>
__device__ Pack<T, N> rank_sum(const RankBuffers& b, size_t i) {
  using P = Pack<T, N>;
  float acc[N];
  P p = load_cg(reinterpret_cast<const P*>(b.staging[0]) + i);
#pragma unroll
  for (int k = 0; k < N; ++k) acc[k] = to_float(p.v[k]);
  for (int r = 1; r < b.world_size; ++r) {
    p = load_cg(reinterpret_cast<const P*>(b.staging[r]) + i);
#pragma unroll
    for (int k = 0; k < N; ++k) acc[k] += to_float(p.v[k]);
  }
  P out;
#pragma unroll
  for (int k = 0; k < N; ++k) from_float(acc[k], out.v[k]);
  return out;
}

template <typename T, int N>
__device__ __forceinline__ void store_out(T* out, size_t i, const Pack<T, N>& p, bool aligned) {
  if (aligned) {
    reinterpret_cast<Pack<T, N>*>(out)[i] = p;
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) out[i * N + k] = p.v[k];
  }
}

template <typename T, int N>
__global__ void __launch_bounds__(kThreads) one_shot_kernel(RankBuffers b, T* out, size_t packs, bool aligned) {
  const uint32_t flag = begin_call(b);
  barrier(b, kStart, flag);
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < packs; i += stride)
    store_out(out, i, rank_sum<T, N>(b, i), aligned);
  barrier(b, kEnd, flag);
  end_call(b, flag);
}

// Rank r reduces packs [r * part, (r + 1) * part) into its results region; after the middle
// barrier every rank copies each rank's part. Block k of rank q reads exactly the packs block k of
// rank r wrote (same mapping), which is what block k's middle barrier waited for.
template <typename T, int N>
__global__ void __launch_bounds__(kThreads) two_shot_kernel(RankBuffers b, T* out, size_t packs, bool aligned) {
  using P = Pack<T, N>;
  const uint32_t flag = begin_call(b);
  barrier(b, kStart, flag);
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t part = (packs + b.world_size - 1) / b.world_size;
  {
    const size_t begin = part * b.rank, end = min(packs, begin + part);
    P* mine = reinterpret_cast<P*>(b.results[b.rank]);
    for (size_t i = begin + tid; i < end; i += stride) mine[i] = rank_sum<T, N>(b, i);
  }
  barrier(b, kMid, flag);
  for (int r = 0; r < b.world_size; ++r) {
    const size_t begin = part * r, end = min(packs, begin + part);
    const P* theirs = reinterpret_cast<const P*>(b.results[r]);
    for (size_t i = begin + tid; i < end; i += stride) store_out(out, i, load_cg(theirs + i), aligned);
  }
  barrier(b, kEnd, flag);
  end_call(b, flag);
}

template <int N>
__global__ void __launch_bounds__(kThreads) gather_kernel(RankBuffers b, uint8_t* recv, size_t packs, bool aligned) {
  using P = Pack<uint8_t, N>;
  const uint32_t flag = begin_call(b);
  barrier(b, kStart, flag);
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (int r = 0; r < b.world_size; ++r) {
    const P* src = reinterpret_cast<const P*>(b.staging[r]);
    for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < packs; i += stride)
      store_out(recv + static_cast<size_t>(r) * packs * N, i, load_cg(src + i), aligned);
  }
  barrier(b, kEnd, flag);
  end_call(b, flag);
}

// Blocks for `work` units of one thread each: the same on every rank for the same call.
unsigned grid_for(size_t work) {
  const size_t blocks = (work + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::clamp<size_t>(blocks, 1, kMaxBlocks));
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <typename T, bool kTwoShot>
void launch_reduce(const RankBuffers& b, void* out, size_t count, cudaStream_t s) {
  constexpr int kPack = 16 / sizeof(T);
  T* o = static_cast<T*>(out);
  // Packs of 16 bytes when the message is a whole number of them (staging is always 16-aligned).
  if (count % kPack == 0) {
    const size_t packs = count / kPack;
    const unsigned grid = grid_for(kTwoShot ? (packs + b.world_size - 1) / b.world_size : packs);
    const bool al = aligned16(out);
    if constexpr (kTwoShot) two_shot_kernel<T, kPack><<<grid, kThreads, 0, s>>>(b, o, packs, al);
    else one_shot_kernel<T, kPack><<<grid, kThreads, 0, s>>>(b, o, packs, al);
  } else {
    const unsigned grid = grid_for(kTwoShot ? (count + b.world_size - 1) / b.world_size : count);
    if constexpr (kTwoShot) two_shot_kernel<T, 1><<<grid, kThreads, 0, s>>>(b, o, count, true);
    else one_shot_kernel<T, 1><<<grid, kThreads, 0, s>>>(b, o, count, true);
  }
}

}  // namespace

void launch_one_shot(const RankBuffers& b, Elem elem, void* out, size_t count, cudaStream_t s) {
  if (elem == Elem::kF32) launch_reduce<float, false>(b, out, count, s);
  else launch_reduce<__nv_bfloat16, false>(b, out, count, s);
}

void launch_two_shot(const RankBuffers& b, Elem elem, void* out, size_t count, cudaStream_t s) {
  if (elem == Elem::kF32) launch_reduce<float, true>(b, out, count, s);
  else launch_reduce<__nv_bfloat16, true>(b, out, count, s);
}

void launch_gather(const RankBuffers& b, void* recv, size_t bytes, cudaStream_t s) {
  auto* r = static_cast<uint8_t*>(recv);
  if (bytes % 16 == 0) {
    const size_t packs = bytes / 16;
    // Each rank's block starts at r * bytes: 16-aligned when recv is.
    gather_kernel<16><<<grid_for(packs), kThreads, 0, s>>>(b, r, packs, aligned16(recv));
  } else {
    gather_kernel<1><<<grid_for(bytes), kThreads, 0, s>>>(b, r, bytes, true);
  }
}

}  // namespace kvasir::dist::car
