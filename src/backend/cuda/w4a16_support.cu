// The W4A16 kernels' helpers: act-order's input-column gather (x[:, perm], so the GEMV and GEMM
// read groups contiguously), dummy weights for --load-format dummy, and the dequantization to bf16
// for long prefills' cuBLASLt GEMMs.
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

// One CTA per 16 x 64 layout tile (grid: K / 64 chunks, rows / 16 tiles from r0 / 16): thread w
// decodes word w of the tile (lane w / 4, word w % 4 of its uint4: layout in quant/w4a16_layout.h)
// into a shared-memory copy of the tile, then every thread writes 16 bytes of it (row w / 8).
constexpr int kDequantPitch = 64 + 8;  // bf16 per shared row: rows 16 bytes apart in banks
__global__ void __launch_bounds__(128) dequantize_kernel(W4a16Projection p, W4a16Groups groups, int64_t r0, int64_t k,
                                                         bf16* __restrict__ out) {
  __shared__ __align__(16) bf16 tile[16][kDequantPitch];
  pdl_begin();
  const int w = threadIdx.x;
  const int64_t kc = blockIdx.x, nt = r0 / 16 + blockIdx.y, N = p.out_features;
  const uint32_t word = static_cast<const uint32_t*>(p.codes)[(nt * (k / 64) + kc) * 128 + w];
  const int l = w >> 2, i = w & 3, g = l >> 2, t = l & 3, h = i >> 1, j = i & 1;
  const int row = 8 * h + g;
  const int64_t n = nt * 16 + row;
  const uint32_t grp = w4a16_group_of(2 * static_cast<uint32_t>(kc) + j, groups.magic);
  const float scale = w4a16_scale(p.scales, static_cast<int64_t>(grp) * N + n, p.scale_type);
  const int zero = p.zeros != nullptr ? p.zeros[static_cast<int64_t>(grp) * N + n] : 8;
#pragma unroll
  for (int q = 0; q < 8; ++q) {
    const int pair = q % 4, high = q / 4;
    const int col = 16 * (2 * j + pair / 2) + 2 * t + 8 * (pair % 2) + high;
    const int code = static_cast<int>((word >> (4 * q)) & 0xFu);
    tile[row][col] = __float2bfloat16_rn(static_cast<float>(code - zero) * scale);
  }
  __syncthreads();
  const int orow = w >> 3, seg = w & 7;
  *reinterpret_cast<uint4*>(out + (static_cast<int64_t>(blockIdx.y) * 16 + orow) * k + kc * 64 + seg * 8) =
      *reinterpret_cast<const uint4*>(&tile[orow][seg * 8]);
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

void launch_w4a16_dequantize(const W4a16Projection& p, int64_t r0, int64_t rows, int64_t k, void* out, cudaStream_t s) {
  KVASIR_CHECK_MSG(r0 % 16 == 0 && rows % 16 == 0 && r0 >= 0 && r0 + rows <= p.out_features && k % 64 == 0 &&
                       rows / 16 < 65536 && aligned16(out),
                   "W4A16 dequantize: whole 16-row tiles of the weight, 16-byte aligned output");
  if (rows == 0) return;
  launch(dequantize_kernel, dim3(static_cast<unsigned>(k / 64), static_cast<unsigned>(rows / 16)), 128, 0, s, p,
         w4a16_groups(p.group_size), r0, k, static_cast<bf16*>(out));
  KVASIR_CUDA_LAUNCH_CHECK();
}

void launch_fill_random_w4a16(void* codes, void* scales_f16, int64_t code_words, int64_t num_scales, uint64_t seed,
                              float scale, cudaStream_t s) {
  launch(fill_random_w4a16_kernel, blocks_for(std::max(code_words, num_scales)), kThreads, 0, s,
         static_cast<uint32_t*>(codes), static_cast<uint16_t*>(scales_f16), code_words, num_scales, seed, scale);
  KVASIR_CUDA_LAUNCH_CHECK();
}

}  // namespace kvasir::cuda
