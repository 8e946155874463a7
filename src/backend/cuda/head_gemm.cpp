#include "backend/cuda/head_gemm.h"

#include <algorithm>

#include "backend/cuda/cuda_check.h"

namespace kvasir::cuda {
namespace {

int alignment_of(uint64_t v) {
  int a = 256;
  while (a > 1 && (v % static_cast<uint64_t>(a)) != 0) a >>= 1;
  return a;
}

void set_batch(cublasLtMatrixLayout_t l, int32_t count, int64_t stride) {
  KVASIR_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
  KVASIR_CUBLAS_CHECK(
      cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
}

}  // namespace

HeadGemm::~HeadGemm() {
  for (auto& [key, p] : plans_) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.c);
    cublasLtMatmulDescDestroy(p.op);
  }
  if (workspace_ != nullptr) cudaFree(workspace_);
  if (handle_ != nullptr) cublasLtDestroy(handle_);
}

Status HeadGemm::init(size_t workspace_bytes) {
  if (cublasLtCreate(&handle_) != CUBLAS_STATUS_SUCCESS) return internal_error("cublasLtCreate failed");
  KVASIR_CUDA_RETURN_IF_ERROR(cudaMalloc(&workspace_, workspace_bytes));
  workspace_bytes_ = workspace_bytes;
  return Status();
}

const HeadGemm::Plan& HeadGemm::plan_for(const HeadGemmShape& sh, int align) {
  const Key key{sh.n, sh.heads, sh.M, sh.K, sh.x_ts, sh.x_hs, sh.o_ts, sh.o_hs, static_cast<int>(sh.out), align};
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  // Column-major, per head h: C[M, n] (ld o_ts) = A^T B with A = w[h] stored [K, M] (ld K) and
  // B = x(., h, .) stored [K, n] (ld x_ts); the heads are the batch (strides M*K, x_hs, o_hs).
  Plan p;
  KVASIR_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  KVASIR_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  KVASIR_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  const cudaDataType_t out_type = sh.out == Elem::kF32 ? CUDA_R_32F : CUDA_R_16BF;
  auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  KVASIR_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, u(sh.K), u(sh.M), sh.K));
  KVASIR_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, u(sh.K), u(sh.n), sh.x_ts));
  KVASIR_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, out_type, u(sh.M), u(sh.n), sh.o_ts));
  const int32_t heads = static_cast<int32_t>(sh.heads);
  set_batch(p.a, heads, sh.M * sh.K);
  set_batch(p.b, heads, sh.x_hs);
  set_batch(p.c, heads, sh.o_hs);
  cublasLtMatmulPreference_t pref = nullptr;
  KVASIR_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = workspace_bytes_;
  KVASIR_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  const uint32_t al = static_cast<uint32_t>(align);
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    KVASIR_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &al, sizeof(al)));
  }
  cublasLtMatmulHeuristicResult_t result{};
  int count = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle_, p.op, p.a, p.b, p.c, p.c, pref, 1, &result, &count);
  cublasLtMatmulPreferenceDestroy(pref);
  p.ok = st == CUBLAS_STATUS_SUCCESS && count > 0;
  p.algo = result.algo;
  return plans_.emplace(key, p).first->second;
}

bool HeadGemm::run(const void* x, const void* w, void* out, const HeadGemmShape& sh, cudaStream_t s) {
  if (sh.n <= 0 || sh.M <= 0 || sh.heads <= 0) return true;
  // Every head's matrices start at base + h * stride: the alignment promised holds for all of them.
  const uint64_t out_size = sh.out == Elem::kF32 ? 4 : 2;
  int align = alignment_of(reinterpret_cast<uintptr_t>(x));
  for (uint64_t v : {static_cast<uint64_t>(reinterpret_cast<uintptr_t>(w)), static_cast<uint64_t>(reinterpret_cast<uintptr_t>(out)),
                     static_cast<uint64_t>(sh.x_hs) * 2, static_cast<uint64_t>(sh.M * sh.K) * 2,
                     static_cast<uint64_t>(sh.o_hs) * out_size}) {
    align = std::min(align, alignment_of(v));
  }
  const Plan& p = plan_for(sh, align);
  if (!p.ok) return false;
  const float alpha = 1.0f, beta = 0.0f;
  KVASIR_CUBLAS_CHECK(cublasLtMatmul(handle_, p.op, &alpha, w, p.a, x, p.b, &beta, out, p.c, out, p.c, &p.algo,
                                     workspace_, workspace_bytes_, s));
  return true;
}

}  // namespace kvasir::cuda
