// GEMMs through cuBLASLt: out[n, m] = x[n, k] · w[m, k]^T with bf16 inputs, float32 accumulation
// and a bf16 or float32 output (logits). The heuristic's choice is cached per (shape, output type,
// alignment), so steady-state steps make no heuristic queries and CUDA-graph capture sees none.
// Must not know about models; the caller owns the stream.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <unordered_map>

#include "backend/cuda/kernels.h"
#include "common/status.h"

namespace kvasir::cuda {

// The largest power of two (up to 256) that p is aligned to: cuBLASLt's plan preference for
// operand alignment (its heuristics pick kernels by it).
int pointer_alignment(const void* p);

// bf16 elements of a weight dequantized for cuBLASLt at a time (128 MiB): every projection of an
// 8B model fits whole (ffn 14336 x 4096 = 58.7M); larger ones (a 128k-vocabulary lm_head) go in
// slices of whole multiples of 128 output features (cuBLASLt's tiles), at least one.
inline constexpr int64_t kDequantSliceElems = int64_t{64} << 20;
// Output features per slice of an [m, k] weight (m: it fits whole).
int64_t dequant_slice_rows(int64_t m, int64_t k);

class GemmRunner {
 public:
  GemmRunner() = default;
  ~GemmRunner();
  GemmRunner(const GemmRunner&) = delete;
  GemmRunner& operator=(const GemmRunner&) = delete;

  Status init(size_t workspace_bytes);
  void run(const void* x, const void* w, void* out, int64_t n, int64_t m, int64_t k, Elem out_type, cudaStream_t s);
  // out[n, m] = x · W^T for a weight that exists in bf16 one slice at a time (a quantized store):
  // dequantize(r0, rows) writes rows [r0, r0 + rows) of W into w_slice, then that slice's GEMM
  // runs; with slice < m each slice's product goes through out_tmp ([n, slice]) into its columns.
  template <typename Dequantize>
  void run_sliced(const void* x, void* w_slice, void* out_tmp, void* out, int64_t n, int64_t m, int64_t k,
                  int64_t slice, Elem out_type, cudaStream_t s, Dequantize&& dequantize) {
    for (int64_t r0 = 0; r0 < m; r0 += slice) {
      const int64_t rows = std::min(slice, m - r0);
      dequantize(r0, rows);
      if (slice >= m) {
        run(x, w_slice, out, n, rows, k, out_type, s);
        continue;
      }
      run(x, w_slice, out_tmp, n, rows, k, out_type, s);
      copy_columns(out_tmp, out, n, rows, m, r0, out_type, s);
    }
  }

 private:
  struct Key {
    int64_t n, m, k;
    int out;
    int align;  // smallest alignment (bytes, up to 256) of the three pointers
    bool operator==(const Key& o) const {
      return n == o.n && m == o.m && k == o.k && out == o.out && align == o.align;
    }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      uint64_t h = static_cast<uint64_t>(k.n) * 0x9E3779B97F4A7C15ull;
      h ^= static_cast<uint64_t>(k.m) + 0x632BE59BD9B4E019ull + (h << 6) + (h >> 2);
      h ^= static_cast<uint64_t>(k.k) + 0x8CB92BA72F3D8DD7ull + (h << 6) + (h >> 2);
      h ^= static_cast<uint64_t>(k.out * 512 + k.align) + (h << 6) + (h >> 2);
      return static_cast<size_t>(h);
    }
  };
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  const Plan& plan_for(const Key& key);
  // out[:, c0, c0 + cols) of an [n, m] matrix from tmp [n, cols].
  static void copy_columns(const void* tmp, void* out, int64_t n, int64_t cols, int64_t m, int64_t c0, Elem type,
                           cudaStream_t s);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::unordered_map<Key, Plan, KeyHash> plans_;
};

}  // namespace kvasir::cuda
