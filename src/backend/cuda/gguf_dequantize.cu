// GGUF block rows to bf16 / float32 on the device: the GEMM path's weight scratch (rows dequantized
// to bf16 for cuBLASLt), embedding lookups in a quantized token table, and float32 rows for the
// tests that hold the decoders to quant::dequantize_row bit for bit. One thread per 8-element chunk
// (gguf_blocks.cuh), 16-byte stores.
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/gguf_blocks.cuh"
#include "backend/cuda/gguf_kernels.h"

namespace kvasir::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ void store_chunk(void* out, int64_t elem_off, bool f32, const float (&v)[8]) {
  if (f32) {
    auto* o = reinterpret_cast<float4*>(static_cast<float*>(out) + elem_off);
    o[0] = make_float4(v[0], v[1], v[2], v[3]);
    o[1] = make_float4(v[4], v[5], v[6], v[7]);
  } else {
    store8(static_cast<bf16*>(out) + elem_off, v);
  }
}

// Chunk i of rows [row0, row0 + rows): row i / (k / 8), chunk i % (k / 8).
template <class F>
__global__ void __launch_bounds__(kThreads) gguf_dequantize_kernel(const uint8_t* __restrict__ w, int64_t row0,
                                                                  int64_t rows, int64_t k, int64_t row_bytes,
                                                                  void* out, int f32) {
  pdl_begin();
  const int64_t per_row = k / 8, total = rows * per_row;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t r = i / per_row, c = i - r * per_row;
    float v[8];
    F::chunk(w + (row0 + r) * row_bytes, c, v);
    store_chunk(out, i * 8, f32 != 0, v);
  }
}

// One CTA per token; out rows bf16(scale * value), as the bf16 table's embedding kernel.
template <class F>
__global__ void __launch_bounds__(kThreads) gguf_embedding_kernel(const uint8_t* __restrict__ table,
                                                                 const int32_t* __restrict__ ids,
                                                                 const int32_t* __restrict__ sources,
                                                                 const int32_t* __restrict__ fed, int64_t d,
                                                                 int64_t vocab, int64_t row_bytes, float scale,
                                                                 bf16* __restrict__ out) {
  pdl_begin();
  const int64_t t = blockIdx.x;
  const int32_t from = sources != nullptr ? sources[t] : -1;
  int64_t id = from >= 0 ? fed[from] : ids[t];
  if (id < 0 || id >= vocab) id = 0;  // the backend checked the ids; never read outside the table
  const uint8_t* src = table + id * row_bytes;
  for (int64_t c = threadIdx.x; c < d / 8; c += kThreads) {
    float v[8];
    F::chunk(src, c, v);
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = __fmul_rn(v[i], scale);
    store8(out + t * d + c * 8, v);
  }
}

size_t checked_row_bytes(DType t, int64_t k) {
  const auto rb = row_bytes(t, k);
  KVASIR_CHECK_MSG(gguf_kernel_type(t) && rb.has_value() && k % 8 == 0, "GGUF kernels: rows of whole blocks");
  return *rb;
}

}  // namespace

void launch_gguf_dequantize(const void* w, DType t, int64_t row0, int64_t rows, int64_t k, void* out, Elem elem,
                            cudaStream_t s) {
  const size_t rb = checked_row_bytes(t, k);
  KVASIR_CHECK_MSG(aligned16(w) && aligned16(out), "GGUF dequantize: 16-byte aligned weight and output");
  if (rows <= 0) return;
  const int64_t total = rows * (k / 8);
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((total + kThreads - 1) / kThreads, 132 * 16));
  gguf::with_format(t, [&](auto f) {
    launch(gguf_dequantize_kernel<decltype(f)>, blocks, kThreads, 0, s, static_cast<const uint8_t*>(w), row0, rows, k,
           static_cast<int64_t>(rb), out, elem == Elem::kF32 ? 1 : 0);
  });
  KVASIR_CUDA_LAUNCH_CHECK();
}

void launch_gguf_embedding(const void* table, DType t, const int32_t* ids, const int32_t* sources, const int32_t* fed,
                           int n, int64_t d, int64_t vocab, float scale, void* out, cudaStream_t s) {
  const size_t rb = checked_row_bytes(t, d);
  KVASIR_CHECK_MSG(aligned16(table) && aligned16(out), "GGUF embedding: 16-byte aligned table and output");
  if (n <= 0) return;
  gguf::with_format(t, [&](auto f) {
    launch(gguf_embedding_kernel<decltype(f)>, static_cast<unsigned>(n), kThreads, 0, s,
           static_cast<const uint8_t*>(table), ids, sources, fed, d, vocab, static_cast<int64_t>(rb), scale,
           static_cast<bf16*>(out));
  });
  KVASIR_CUDA_LAUNCH_CHECK();
}

}  // namespace kvasir::cuda
