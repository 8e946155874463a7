// HeadGemm: one product per attention head in a single cuBLASLt strided-batched GEMM,
//   out(t, h, m) = sum_k x(t, h, k) * w[h, m, k]      t < n, h < heads, m < M, k < K
// where x and out are per-token rows holding every head side by side (x(t, h, k) at
// x + t * x_ts + h * x_hs), so MLA's W_UK^T and W_UV products read the query / latent output in
// place and write straight into their destinations. bf16 inputs, float32 accumulation, bf16 or
// float32 output; plans are cached per shape (no heuristic query once a shape was seen, so graph
// capture sees none). Must not know about MLA beyond that shape; the caller owns the stream.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "backend/cuda/kernels.h"
#include "common/status.h"

namespace kvasir::cuda {

struct HeadGemmShape {
  int64_t n, heads, M, K;
  int64_t x_ts, x_hs;  // x strides in elements (token, head)
  int64_t o_ts, o_hs;  // out strides in elements
  Elem out;
};

class HeadGemm {
 public:
  HeadGemm() = default;
  ~HeadGemm();
  HeadGemm(const HeadGemm&) = delete;
  HeadGemm& operator=(const HeadGemm&) = delete;

  Status init(size_t workspace_bytes);
  bool ready() const { return handle_ != nullptr; }
  // False (nothing launched) when cuBLASLt has no algorithm for the shape and alignment (odd
  // strides): the caller runs its own kernel instead. Decided once per shape.
  bool run(const void* x, const void* w, void* out, const HeadGemmShape& shape, cudaStream_t s);

 private:
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int>;
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool ok = false;
  };
  const Plan& plan_for(const HeadGemmShape& shape, int align);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<Key, Plan> plans_;
};

}  // namespace kvasir::cuda
