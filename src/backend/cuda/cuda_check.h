// Error checks for CUDA runtime and cuBLASLt calls in host code. A failing call inside an op is a
// broken invariant (bad pointer, launch failure) and aborts with the call and its message;
// set-up code turns failures into a Status instead (KVASIR_CUDA_RETURN_IF_ERROR).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <string>

#include "common/check.h"
#include "common/status.h"

#define KVASIR_CUDA_CHECK(expr)                                                                  \
  do {                                                                                           \
    const cudaError_t kvasir_cuda_err_ = (expr);                                                 \
    KVASIR_CHECK_MSG(kvasir_cuda_err_ == cudaSuccess, cudaGetErrorString(kvasir_cuda_err_)); \
  } while (0)

#define KVASIR_CUBLAS_CHECK(expr)                                                                \
  do {                                                                                           \
    const cublasStatus_t kvasir_cublas_st_ = (expr);                                             \
    KVASIR_CHECK_MSG(kvasir_cublas_st_ == CUBLAS_STATUS_SUCCESS, cublasLtGetStatusString(kvasir_cublas_st_)); \
  } while (0)

#define KVASIR_CUDA_RETURN_IF_ERROR(expr)                                                        \
  do {                                                                                           \
    const cudaError_t kvasir_cuda_err_ = (expr);                                                 \
    if (kvasir_cuda_err_ != cudaSuccess) {                                                       \
      return ::kvasir::internal_error(std::string(#expr) + ": " + cudaGetErrorString(kvasir_cuda_err_)); \
    }                                                                                            \
  } while (0)
