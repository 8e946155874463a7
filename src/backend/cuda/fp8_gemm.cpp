#include "backend/cuda/fp8_gemm.h"

#include "backend/cuda/cuda_check.h"

namespace kvasir::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

int alignment_of(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  int a = 256;
  while (a > 1 && (v % static_cast<uintptr_t>(a)) != 0) a >>= 1;
  return a;
}

}  // namespace

Fp8GemmRunner::~Fp8GemmRunner() {
  for (auto& [key, p] : plans_) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.c);
    cublasLtMatrixLayoutDestroy(p.d);
    cublasLtMatmulDescDestroy(p.op);
  }
  if (workspace_ != nullptr) cudaFree(workspace_);
  if (handle_ != nullptr) cublasLtDestroy(handle_);
}

const Fp8GemmRunner::Plan& Fp8GemmRunner::plan_for(const Key& key) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  if (handle_ == nullptr) {
    KVASIR_CUBLAS_CHECK(cublasLtCreate(&handle_));
    KVASIR_CUDA_CHECK(cudaMalloc(&workspace_, kWorkspaceBytes));
    workspace_bytes_ = kWorkspaceBytes;
  }
  const auto [n, m, k, align_bytes] = key;
  Plan p;
  // As gemm.cpp: column-major out^T[m, n] = w (stored [k, m], transposed) x xq (stored [k, n]).
  // FP8 on Hopper needs exactly this "TN" form: A transposed, B not.
  KVASIR_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  KVASIR_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  KVASIR_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  KVASIR_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_8F_E4M3, static_cast<uint64_t>(k), static_cast<uint64_t>(m), k));
  KVASIR_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_8F_E4M3, static_cast<uint64_t>(k), static_cast<uint64_t>(n), k));
  KVASIR_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, CUDA_R_16BF, static_cast<uint64_t>(m), static_cast<uint64_t>(n), m));
  KVASIR_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.d, CUDA_R_16BF, static_cast<uint64_t>(m), static_cast<uint64_t>(n), m));
  cublasLtMatmulPreference_t pref = nullptr;
  KVASIR_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = workspace_bytes_;
  KVASIR_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  const uint32_t align = static_cast<uint32_t>(align_bytes);
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    KVASIR_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align)));
  }
  cublasLtMatmulHeuristicResult_t result{};
  int count = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle_, p.op, p.a, p.b, p.c, p.d, pref, 1, &result, &count);
  cublasLtMatmulPreferenceDestroy(pref);
  KVASIR_CHECK_MSG(st == CUBLAS_STATUS_SUCCESS && count > 0, "cuBLASLt found no algorithm for an FP8 GEMM shape");
  p.algo = result.algo;
  return plans_.emplace(key, p).first->second;
}

void Fp8GemmRunner::run(const void* xq, const void* w, void* out, int64_t n, int64_t m, int64_t k, cudaStream_t s) {
  if (n <= 0 || m <= 0) return;
  int align = alignment_of(xq);
  if (alignment_of(w) < align) align = alignment_of(w);
  if (alignment_of(out) < align) align = alignment_of(out);
  const Plan& p = plan_for(Key{n, m, k, align});
  const float alpha = 1.0f, beta = 0.0f;
  KVASIR_CUBLAS_CHECK(cublasLtMatmul(handle_, p.op, &alpha, w, p.a, xq, p.b, &beta, out, p.c, out, p.d, &p.algo,
                                     workspace_, workspace_bytes_, s));
}

}  // namespace kvasir::cuda
