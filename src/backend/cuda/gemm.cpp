#include "backend/cuda/gemm.h"

#include <string>

#include "backend/cuda/cuda_check.h"

namespace kvasir::cuda {

int pointer_alignment(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  int a = 256;
  while (a > 1 && (v % static_cast<uintptr_t>(a)) != 0) a >>= 1;
  return a;
}

GemmRunner::~GemmRunner() {
  for (auto& [key, p] : plans_) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.c);
    cublasLtMatmulDescDestroy(p.op);
  }
  if (workspace_ != nullptr) cudaFree(workspace_);
  if (handle_ != nullptr) cublasLtDestroy(handle_);
}

Status GemmRunner::init(size_t workspace_bytes) {
  if (cublasLtCreate(&handle_) != CUBLAS_STATUS_SUCCESS) return internal_error("cublasLtCreate failed");
  KVASIR_CUDA_RETURN_IF_ERROR(cudaMalloc(&workspace_, workspace_bytes));
  workspace_bytes_ = workspace_bytes;
  return Status();
}

const GemmRunner::Plan& GemmRunner::plan_for(const Key& key) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  Plan p;
  // Row-major out[n, m] = x[n, k] w[m, k]^T is column-major out^T[m, n] = w^T... : A = w stored
  // [k, m] (ld k) transposed, B = x stored [k, n] (ld k), C = out stored [m, n] (ld m).
  KVASIR_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  KVASIR_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  KVASIR_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  const cudaDataType_t out_type = key.out == static_cast<int>(Elem::kF32) ? CUDA_R_32F : CUDA_R_16BF;
  KVASIR_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, static_cast<uint64_t>(key.k), static_cast<uint64_t>(key.m), key.k));
  KVASIR_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, static_cast<uint64_t>(key.k), static_cast<uint64_t>(key.n), key.k));
  KVASIR_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, out_type, static_cast<uint64_t>(key.m), static_cast<uint64_t>(key.n), key.m));
  cublasLtMatmulPreference_t pref = nullptr;
  KVASIR_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = workspace_bytes_;
  KVASIR_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  const uint32_t align = static_cast<uint32_t>(key.align);
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    KVASIR_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align)));
  }
  cublasLtMatmulHeuristicResult_t result{};
  int count = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle_, p.op, p.a, p.b, p.c, p.c, pref, 1, &result, &count);
  cublasLtMatmulPreferenceDestroy(pref);
  KVASIR_CHECK_MSG(st == CUBLAS_STATUS_SUCCESS && count > 0, "cuBLASLt found no algorithm for a GEMM shape");
  p.algo = result.algo;
  return plans_.emplace(key, p).first->second;
}

void GemmRunner::run(const void* x, const void* w, void* out, int64_t n, int64_t m, int64_t k, Elem out_type,
                     cudaStream_t s) {
  if (n <= 0 || m <= 0) return;
  int align = pointer_alignment(x);
  if (pointer_alignment(w) < align) align = pointer_alignment(w);
  if (pointer_alignment(out) < align) align = pointer_alignment(out);
  const Plan& p = plan_for(Key{n, m, k, static_cast<int>(out_type), align});
  const float alpha = 1.0f, beta = 0.0f;
  KVASIR_CUBLAS_CHECK(cublasLtMatmul(handle_, p.op, &alpha, w, p.a, x, p.b, &beta, out, p.c, out, p.c, &p.algo,
                                     workspace_, workspace_bytes_, s));
}

int64_t dequant_slice_rows(int64_t m, int64_t k) {
  if (m * k <= kDequantSliceElems) return m;
  return std::min(m, std::max<int64_t>(128, kDequantSliceElems / k / 128 * 128));
}

void GemmRunner::copy_columns(const void* tmp, void* out, int64_t n, int64_t cols, int64_t m, int64_t c0, Elem type,
                              cudaStream_t s) {
  const size_t es = type == Elem::kF32 ? 4 : 2;
  KVASIR_CUDA_CHECK(cudaMemcpy2DAsync(static_cast<uint8_t*>(out) + static_cast<size_t>(c0) * es,
                                      static_cast<size_t>(m) * es, tmp, static_cast<size_t>(cols) * es,
                                      static_cast<size_t>(cols) * es, static_cast<size_t>(n), cudaMemcpyDeviceToDevice, s));
}

}  // namespace kvasir::cuda
