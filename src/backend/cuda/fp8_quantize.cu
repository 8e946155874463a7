// FP8 conversions around the FP8 linear: weights to e4m3 codes at load (and dummy codes), the
// per-token (or static per-tensor) activation quantizer in front of the FP8 GEMM, and the GEMM's
// epilogue that applies the activation and weight scales. Conversions saturate at +-448 and round
// to nearest even (__NV_SATFINITE), the rounding quant/fp8.h's reference uses.
#include <cuda_fp8.h>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/fp8_kernels.h"

namespace kvasir::cuda {
namespace {

constexpr int kThreads = 256;
constexpr float kE4m3Max = 448.0f;

__device__ __forceinline__ void load_g8(const float* g, float (&v)[8]) {
  const float4 a = *reinterpret_cast<const float4*>(g);
  const float4 b = *reinterpret_cast<const float4*>(g + 4);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

__device__ __forceinline__ uint8_t to_e4m3(float v) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
}

__global__ void f32_to_fp8_rows_kernel(const float* src, const float* scales, uint8_t* dst, int64_t rows,
                                       int64_t cols) {
  pdl_begin();
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float s = scales[i / cols];
    dst[i] = s == 0.0f ? 0 : to_e4m3(src[i] / s);
  }
}

__device__ __forceinline__ float hash_uniform_fp8(uint64_t seed, uint64_t i) {
  uint64_t x = seed ^ (i * 0x9E3779B97F4A7C15ull);
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  return static_cast<float>(x >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f;  // [-1, 1)
}

__global__ void fill_random_fp8_kernel(uint8_t* codes, float* scales, int64_t rows, int64_t cols, uint64_t seed,
                                       float scale) {
  pdl_begin();
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    codes[i] = to_e4m3(hash_uniform_fp8(seed, static_cast<uint64_t>(i)) * kE4m3Max);
    if (i < rows) scales[i] = scale;
  }
}

// One CTA per row: the row's max |x| (dynamic), then the codes.
__global__ void quantize_fp8_rows_kernel(const bf16* x, int64_t cols, float static_scale, uint8_t* q,
                                         float* q_scales) {
  __shared__ float red[32];
  pdl_begin();
  const bf16* xr = x + blockIdx.x * cols;
  uint8_t* qr = q + blockIdx.x * cols;
  float scale = static_scale;
  if (scale == 0.0f) {
    float m = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, fabsf(__bfloat162float(xr[c])));
    m = warp_max(m);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) red[warp] = m;
    __syncthreads();
    m = lane < static_cast<int>(blockDim.x >> 5) ? red[lane] : 0.0f;
    scale = warp_max(m) / kE4m3Max;
  }
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    qr[c] = scale == 0.0f ? 0 : to_e4m3(__bfloat162float(xr[c]) / scale);
  }
  if (threadIdx.x == 0) q_scales[blockIdx.x] = scale;
}

// A row per blockIdx.y step, 8 columns per thread (cols % 8 == 0: FP8 weights have out % 16).
__global__ void scale_rows_cols_kernel(bf16* y, const float* xs, const float* ws, const float* bias, int64_t rows,
                                       int64_t cols) {
  pdl_begin();
  const int64_t c = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 8;
  if (c >= cols) return;
  float wv[8], bv[8];
  load_g8(ws + c, wv);
#pragma unroll
  for (int e = 0; e < 8; ++e) bv[e] = bias != nullptr ? bias[c + e] : 0.0f;  // a bias may be any view
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    float v[8];
    load8(y + r * cols + c, v);
    const float x = xs[r];
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = v[e] * x * wv[e] + bv[e];
    store8(y + r * cols + c, v);
  }
}

}  // namespace

void launch_f32_to_fp8_rows(const float* src, const float* row_scales, void* dst, int64_t rows, int64_t cols,
                            cudaStream_t s) {
  if (rows <= 0 || cols <= 0) return;
  launch(f32_to_fp8_rows_kernel, grid_for(rows * cols, kThreads), kThreads, 0, s, src, row_scales,
         static_cast<uint8_t*>(dst), rows, cols);
  KVASIR_CUDA_LAUNCH_CHECK();
}

void launch_fill_random_fp8(void* codes, float* row_scales, int64_t rows, int64_t cols, uint64_t seed, float scale,
                            cudaStream_t s) {
  if (rows <= 0 || cols <= 0) return;
  launch(fill_random_fp8_kernel, grid_for(rows * cols, kThreads), kThreads, 0, s, static_cast<uint8_t*>(codes),
         row_scales, rows, cols, seed, scale);
  KVASIR_CUDA_LAUNCH_CHECK();
}

void launch_quantize_fp8_rows(const void* x, int64_t rows, int64_t cols, float static_scale, void* q, float* q_scales,
                              cudaStream_t s) {
  if (rows <= 0) return;
  launch(quantize_fp8_rows_kernel, static_cast<unsigned>(rows), kThreads, 0, s, static_cast<const bf16*>(x), cols,
         static_scale, static_cast<uint8_t*>(q), q_scales);
  KVASIR_CUDA_LAUNCH_CHECK();
}

void launch_fp8_scale_rows_cols(void* y, const float* x_scales, const float* w_scales, const float* bias, int64_t rows,
                                int64_t cols, cudaStream_t s) {
  if (rows <= 0 || cols <= 0) return;
  KVASIR_CHECK(cols % 8 == 0 && aligned16(y) && aligned16(w_scales));
  const dim3 grid(static_cast<unsigned>((cols / 8 + kThreads - 1) / kThreads),
                  static_cast<unsigned>(rows < 65535 ? rows : 65535));
  launch(scale_rows_cols_kernel, grid, kThreads, 0, s, static_cast<bf16*>(y), x_scales, w_scales, bias, rows, cols);
  KVASIR_CUDA_LAUNCH_CHECK();
}

}  // namespace kvasir::cuda
