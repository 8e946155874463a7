// GEMMs through cuBLASLt: out[n, m] = x[n, k] · w[m, k]^T with bf16 inputs, float32 accumulation
// and a bf16 or float32 output (logits). The heuristic's choice is cached per (shape, output type,
// alignment), so steady-state steps make no heuristic queries and CUDA-graph capture sees none.
// Must not know about models; the caller owns the stream.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <unordered_map>

#include "backend/cuda/kernels.h"
#include "common/status.h"

namespace kvasir::cuda {

// The largest power of two (up to 256) that p is aligned to: cuBLASLt's plan preference for
// operand alignment (its heuristics pick kernels by it).
int pointer_alignment(const void* p);

class GemmRunner {
 public:
  GemmRunner() = default;
  ~GemmRunner();
  GemmRunner(const GemmRunner&) = delete;
  GemmRunner& operator=(const GemmRunner&) = delete;

  Status init(size_t workspace_bytes);
  void run(const void* x, const void* w, void* out, int64_t n, int64_t m, int64_t k, Elem out_type, cudaStream_t s);

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

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::unordered_map<Key, Plan, KeyHash> plans_;
};

}  // namespace kvasir::cuda
