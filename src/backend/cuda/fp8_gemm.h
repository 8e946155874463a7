// FP8 GEMMs through cuBLASLt: out[n, m] = xq[n, k] · w[m, k]^T with e4m3 codes on both sides,
// float32 accumulation and a bf16 output, unscaled (the caller's epilogue applies the per-token
// activation and per-channel weight scales: fp8_kernels.h). Plans are cached per shape and
// alignment as in gemm.h, so CUDA-graph capture sees no heuristic queries.
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

 private:
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  using Key = std::tuple<int64_t, int64_t, int64_t, int>;  // n, m, k, alignment
  const Plan& plan_for(const Key& key);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<Key, Plan> plans_;
};

}  // namespace kvasir::cuda
