// FP8 GEMMs through cuBLASLt: out[n, m] = xq[n, k] · w[m, k]^T with e4m3 codes on both sides,
// float32 accumulation and a bf16 output. run_scaled() applies the per-channel weight scales and
// per-token activation scales inside the GEMM (cuBLASLt's outer-vector scaling) where this
// cuBLASLt offers it for the shape, checked once against the unscaled product on a small problem;
// otherwise run() gives the unscaled product for the caller's epilogue (fp8_kernels.h). Plans are
// cached per shape and alignment as in gemm.h, so CUDA-graph capture sees no heuristic queries.
// Must not know about models or quantization schemes; the caller owns the stream.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "common/status.h"

namespace kvasir::cuda {

class Fp8GemmRunner {
 public:
  Fp8GemmRunner() = default;
  ~Fp8GemmRunner();
  Fp8GemmRunner(const Fp8GemmRunner&) = delete;
  Fp8GemmRunner& operator=(const Fp8GemmRunner&) = delete;

  // Made on first use: a bf16 model never pays for the handle or the workspace.
  void run(const void* xq, const void* w, void* out, int64_t n, int64_t m, int64_t k, cudaStream_t s);
  // out = (xq · w^T) * x_scales[row] * w_scales[col]; false (nothing launched) where outer-vector
  // scaling is unavailable or failed its check: the caller then uses run() and its epilogue.
  bool run_scaled(const void* xq, const void* w, const float* x_scales, const float* w_scales, void* out, int64_t n,
                  int64_t m, int64_t k, cudaStream_t s);

 private:
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool ok = false;  // the heuristic found an algorithm
  };
  using Key = std::tuple<int64_t, int64_t, int64_t, int, bool>;  // n, m, k, alignment, outer-vector scaled
  const Plan& plan_for(const Key& key);
  cublasStatus_t launch_scaled(const Plan& p, const void* xq, const void* w, const float* x_scales,
                               const float* w_scales, void* out, cudaStream_t s);
  void ensure_handle();
  // Outer-vector scaling against the unscaled product times the scales, once (synchronous).
  bool outer_vec_scaling_works(cudaStream_t s);
  int outer_vec_ = -1;  // -1 unknown, 0 no, 1 yes

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<Key, Plan> plans_;
};

}  // namespace kvasir::cuda
