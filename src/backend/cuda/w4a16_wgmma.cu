// W4A16 GEMM on Hopper's warpgroup MMA (wgmma), for the token counts of batched decode: the same
// tiles, stages, projections and cluster split as the mma.sync kernel (w4a16_gemm.cu), with the
// product turned around. Weights are the wgmma A operand from registers: a warp's 16 layout bytes
// per lane are exactly its m16n8k16-shaped A fragments (rows g and g + 8), which is what wgmma
// takes from each warp of a warpgroup for its 16 of 64 rows; so each code is dequantized once (the
// mma.sync kernel's two row-tile warps both decode it) and a warpgroup covers 64 output features x
// 64 tokens with one m64n64k16 per k16 step (32 mma.sync of the other kernel). The activations are
// the B operand, read by the tensor cores straight from the stage's 128-byte-swizzled rows (the
// canonical K-major layout with 128-byte swizzle: no ldmatrix).
// Groups: a group's steps accumulate into `part` (the first step of a group overwrites it), and
// at the group's end the warpgroup waits for its wgmmas and folds part times the rows' scales into
// the float32 sums, as the other kernels do: weights stay exact integers code - zero.
// CTA: two warpgroups (features 0-63 and 64-127 of the tile). Each chunk's wgmmas are waited for
// within the chunk (registers of A stay untouched until then); the other warpgroups on the SM
// (two CTAs fit) keep the tensor cores busy meanwhile.
#include "backend/cuda/w4a16_gemm_tile.cuh"

namespace kvasir::cuda {
namespace {

constexpr int kWgStages = 4;
constexpr int kWgStageBytes = (kStageUsedBytes + 1023) / 1024 * 1024;  // activations 1024-aligned
constexpr size_t kWgSmem = static_cast<size_t>(kWgStages) * kWgStageBytes;
static_assert(kWgStages * kWgStageBytes >= kBM * kRedStride * 4, "the split tile fits the stages");

// The shared-memory matrix descriptor of a K-major bf16 operand with 128-byte swizzle: rows of 64
// values (128 bytes), atoms of 8 rows (1,024 bytes apart: the stride byte offset), the leading
// byte offset unused (1 by convention); start address in 16-byte units; swizzle mode 1 (bits 62-63).
__device__ __forceinline__ uint64_t sw128_desc(uint32_t smem_byte_addr) {
  return (uint64_t{1} << 62) | (uint64_t{1024 >> 4} << 32) | (uint64_t{1} << 16) |
         static_cast<uint64_t>((smem_byte_addr & 0x3FFFFu) >> 4);
}

// wgmma exists only in sm_90a machine code; the build's compute_90 PTX (for later GPUs, which
// never take this kernel: launch_w4a16_wgmma's caller checks for 9.0) gets traps instead.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KVASIR_WGMMA(...) asm volatile(__VA_ARGS__)
#else
#define KVASIR_WGMMA(...) __trap()
#endif

__device__ __forceinline__ void wgmma_fence() { KVASIR_WGMMA("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { KVASIR_WGMMA("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { KVASIR_WGMMA("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// cp.async fills shared memory through the generic proxy and wgmma reads it through the async
// proxy: each thread fences its landed copies before the barrier that hands the stage over.
__device__ __forceinline__ void fence_async_shared() { KVASIR_WGMMA("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Keeps the compiler from moving reads or writes of v across the asynchronous wgmma (which reads
// A and reads/writes the accumulators behind its back).
__device__ __forceinline__ void fence_operand(float& v) { asm volatile("" : "+f"(v)::"memory"); }
__device__ __forceinline__ void fence_operand(uint32_t& v) { asm volatile("" : "+r"(v)::"memory"); }

// d (64 x 64 float32 over the warpgroup, 32 per thread) = (accumulate ? d : 0) + A (64 x 16 bf16,
// four registers per thread in mma.sync's A fragment order) x B (16 x 64 bf16 in shared memory).
__device__ __forceinline__ void wgmma_m64n64k16(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b,
                                                int accumulate) {
  KVASIR_WGMMA(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate)
      : "memory");
}

// Whether 32-column half hh of K begins / ends a run of halves folded together: a group's halves
// within this CTA's slice of K [2 kb, 2 ke).
__device__ __forceinline__ bool starts_run(const W4a16Groups& gr, uint32_t hh, uint32_t first) {
  return hh == first || w4a16_group_of(hh, gr.magic) != w4a16_group_of(hh - 1, gr.magic);
}
__device__ __forceinline__ bool ends_run(const W4a16Groups& gr, uint32_t hh, uint32_t last) {
  return hh == last || w4a16_group_of(hh, gr.magic) != w4a16_group_of(hh + 1, gr.magic);
}

// Grid and clusters as w4a16_gemm_kernel's. Thread (warpgroup wg, warp wq in it, lane = 4 g + t)
// owns output features f = 64 wg + 16 wq + g and f + 8 of the tile and, for n8 block i, tokens
// 8 i + 2 t and + 1: acc[4 i + 0..1] (feature f), acc[4 i + 2..3] (feature f + 8).
template <int kType>
__global__ void __launch_bounds__(kThreads, 2) w4a16_wgmma_kernel(W4a16GemmArgs a) {
  // 1,024-byte aligned (the 128-byte swizzle's atom; no static shared memory here to offset it).
  extern __shared__ __align__(1024) uint8_t smem[];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const TileWork work = tile_work(a);
  const W4a16Projection& p = work.p;
  const int64_t n0 = work.n0, m0 = work.m0;
  const int kb = work.kb, ke = work.ke;
  const uint32_t first_half = 2 * static_cast<uint32_t>(kb), last_half = 2 * static_cast<uint32_t>(ke) - 1;
  const int feature = warp * 16 + g;  // this lane's A row g in the tile (warp w's layout tile is w)
  const StageCopies copies = stage_copies<kType>(a, p, m0, n0, tid);
  float acc[32], part[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) acc[i] = part[i] = 0.0f;
  pdl_begin();
#pragma unroll
  for (int s = 0; s < kWgStages - 1; ++s) {
    if (kb + s < ke) load_stage(smem + s * kWgStageBytes, copies, a.groups, kb + s);
    cp_async_commit();
  }
  int read = 0, write = kWgStages - 1;
  for (int kc = kb; kc < ke; ++kc) {
    cp_async_wait<kWgStages - 2>();
    fence_async_shared();
    __syncthreads();  // this chunk's stage is in; every warpgroup's wgmmas of the last chunk are done
    if (kc + kWgStages - 1 < ke) load_stage(smem + write * kWgStageBytes, copies, a.groups, kc + kWgStages - 1);
    cp_async_commit();
    const uint8_t* st = smem + read * kWgStageBytes;
    const uint8_t* S = st + kABytes + kBBytes;
    const uint8_t* Z = S + kSBytes;
    const uint4 codes = *reinterpret_cast<const uint4*>(st + kABytes + warp * 512 + lane * 16);
    const bool two_groups = a.groups.split_chunks &&
                            w4a16_group_of(2 * static_cast<uint32_t>(kc), a.groups.magic) !=
                                w4a16_group_of(2 * static_cast<uint32_t>(kc) + 1, a.groups.magic);
    // A fragments of the four k16 steps: step s = 2 j + (s % 2) reads words j (row g) and 2 + j
    // (row g + 8), pairs 2 (s % 2) (columns 2t, 2t + 1) and 2 (s % 2) + 1 (columns 2t + 8, + 9).
    uint32_t frag[4][4];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int slot = two_groups ? j : 0;
      const uint32_t z_lo = w4a16_zero_pair(p.zeros != nullptr ? Z[slot * kBN + feature] : 8u);
      const uint32_t z_hi = w4a16_zero_pair(p.zeros != nullptr ? Z[slot * kBN + feature + 8] : 8u);
      const uint32_t w_lo = word_of(codes, j), w_hi = word_of(codes, 2 + j);
#pragma unroll
      for (int odd = 0; odd < 2; ++odd) {
        uint32_t(&f)[4] = frag[2 * j + odd];
        f[0] = w4a16_pair(w_lo, 2 * odd, z_lo);
        f[1] = w4a16_pair(w_hi, 2 * odd, z_hi);
        f[2] = w4a16_pair(w_lo, 2 * odd + 1, z_lo);
        f[3] = w4a16_pair(w_hi, 2 * odd + 1, z_hi);
      }
    }
    const uint32_t x_addr = smem_addr(st);
    wgmma_fence();
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      const uint32_t hh = 2 * static_cast<uint32_t>(kc) + s / 2;
      const bool fresh = s % 2 == 0 && starts_run(a.groups, hh, first_half);
      wgmma_m64n64k16(part, frag[s], sw128_desc(x_addr + 32 * s), fresh ? 0 : 1);
      if (s % 2 == 1 && ends_run(a.groups, hh, last_half)) {
        wgmma_commit();
        wgmma_wait_all();
#pragma unroll
        for (int i = 0; i < 32; ++i) fence_operand(part[i]);
        const int slot = two_groups ? s / 2 : 0;
        const float s_lo = w4a16_scale_as<kType>(S + slot * kBN * 4, feature);
        const float s_hi = w4a16_scale_as<kType>(S + slot * kBN * 4, feature + 8);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          acc[4 * i + 0] = fmaf(part[4 * i + 0], s_lo, acc[4 * i + 0]);
          acc[4 * i + 1] = fmaf(part[4 * i + 1], s_lo, acc[4 * i + 1]);
          acc[4 * i + 2] = fmaf(part[4 * i + 2], s_hi, acc[4 * i + 2]);
          acc[4 * i + 3] = fmaf(part[4 * i + 3], s_hi, acc[4 * i + 3]);
        }
        wgmma_fence();
      }
    }
    // The chunk's A registers and its stage stay untouched until its wgmmas are done.
    wgmma_commit();
    wgmma_wait_all();
#pragma unroll
    for (int s = 0; s < 4; ++s) {
#pragma unroll
      for (int r = 0; r < 4; ++r) fence_operand(frag[s][r]);
    }
#pragma unroll
    for (int i = 0; i < 32; ++i) fence_operand(part[i]);
    read = read == kWgStages - 1 ? 0 : read + 1;
    write = write == kWgStages - 1 ? 0 : write + 1;
  }
  cp_async_wait<0>();
  const int64_t N = p.out_features;
  if (gridDim.z > 1) {
    float* red = reinterpret_cast<float*>(smem);
    __syncthreads();  // every warpgroup is done with the stages
#pragma unroll
    for (int i = 0; i < 8; ++i) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int token = 8 * i + 2 * t + (c & 1), f = feature + 8 * (c >> 1);
        red[token * kRedStride + f] = acc[4 * i + c];
      }
    }
    sum_split_tiles(a, p, m0, n0, red);
    return;
  }
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    const int64_t col = n0 + feature + 8 * (c >> 1);
    if (col >= N) continue;
    const float bias = p.bias != nullptr ? p.bias[col] : 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int64_t row = m0 + 8 * i + 2 * t + (c & 1);
      if (row >= a.rows) continue;
      const float v = acc[4 * i + c] + bias;
      if (a.f32_out) static_cast<float*>(p.y)[row * N + col] = v;
      else static_cast<bf16*>(p.y)[row * N + col] = __float2bfloat16_rn(v);
    }
  }
}

template <int kType>
void launch_type(const W4a16GemmArgs& a, dim3 grid, cudaStream_t s) {
  auto kernel = w4a16_wgmma_kernel<kType>;
  KVASIR_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kWgSmem)));
  launch_clustered(kernel, grid, kThreads, dim3(1, 1, grid.z), kWgSmem, s, a);
}

}  // namespace

bool wgmma_device() {
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  return major == 9 && minor == 0;
}

void launch_w4a16_wgmma(const W4a16GemmArgs& a, dim3 grid, cudaStream_t s) {
  switch (a.p[0].scale_type) {
    case kW4a16ScaleF32: launch_type<kW4a16ScaleF32>(a, grid, s); break;
    case kW4a16ScaleBf16: launch_type<kW4a16ScaleBf16>(a, grid, s); break;
    default: launch_type<kW4a16ScaleF16>(a, grid, s); break;
  }
  KVASIR_CUDA_LAUNCH_CHECK();
}

}  // namespace kvasir::cuda
