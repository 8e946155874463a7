// The W4A16 kernels' helpers: act-order's input-column gather (x[:, perm], so the GEMV and GEMM
// read groups contiguously) and dummy weights for --load-format dummy.
#include "backend/cuda/w4a16_common.cuh"

namespace kvasir::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void permute_columns_kernel(const bf16* __restrict__ x, const int32_t* __restrict__ perm, bf16* __restrict__ out,
                                       int64_t rows, int64_t cols) {
  pdl_begin();
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    out[i] = x[r * cols + perm[c]];
  }
}

// splitmix64 of (seed, i): deterministic per index, independent of the launch shape.
__device__ __forceinline__ uint64_t mix(uint64_t seed, uint64_t i) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (i + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

__global__ void fill_random_w4a16_kernel(uint32_t* codes, uint16_t* scales, int64_t words, int64_t num_scales,
                                         uint64_t seed, float scale) {
  pdl_begin();
  const uint16_t h = __half_as_ushort(__float2half_rn(scale));
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < words; i += stride) {
    codes[i] = static_cast<uint32_t>(mix(seed, static_cast<uint64_t>(i)));
  }
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < num_scales; i += stride) {
    scales[i] = h;
  }
}

unsigned blocks_for(int64_t n) { return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, 8192))); }

}  // namespace

void launch_w4a16_permute_columns(const void* x, const int32_t* perm, void* out, int64_t rows, int64_t cols,
                                  cudaStream_t s) {
  if (rows <= 0) return;
  launch(permute_columns_kernel, blocks_for(rows * cols), kThreads, 0, s, static_cast<const bf16*>(x), perm,
         static_cast<bf16*>(out), rows, cols);
  KVASIR_CUDA_LAUNCH_CHECK();
}

void launch_fill_random_w4a16(void* codes, void* scales_f16, int64_t code_words, int64_t num_scales, uint64_t seed,
                              float scale, cudaStream_t s) {
  launch(fill_random_w4a16_kernel, blocks_for(std::max(code_words, num_scales)), kThreads, 0, s,
         static_cast<uint32_t*>(codes), static_cast<uint16_t*>(scales_f16), code_words, num_scales, seed, scale);
  KVASIR_CUDA_LAUNCH_CHECK();
}

}  // namespace kvasir::cuda
