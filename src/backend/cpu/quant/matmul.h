// matmul: y = x · W^T for GGUF weights read in place (row-major W [m, k], rows of row_bytes(wtype, k)
// bytes) and f32 activations, parallel over output rows on a ThreadPool. The kernels behind it are
// picked per weight type and ISA; activations are quantized once per call in the fast mode.
// Must not allocate on the hot path: buffers live in a caller-owned MatmulScratch that only grows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "backend/cpu/quant/cpu_isa.h"
#include "backend/cpu/thread_pool.h"
#include "common/status.h"
#include "core/dtype.h"

namespace kvasir::cpu {

class PackedQ32;

enum class ActQuant {
  // Exact: equals the f32 matmul of the dequantized weights up to summation order.
  kF32,
  // Fast: activations quantized to int8 (32-element blocks for Q4_0/Q4_1/Q5_0/Q5_1/Q8_0, 256 for
  // the K-quants), int8 dot products. Relative error ~1e-3..1e-2. F32/F16 weights, and types
  // without an int8 kernel (Q2_K, Q3_K), take the exact path in both modes; BF16 weights on a CPU
  // with AVX-512 BF16 run bf16 activations (rounded to nearest even) through vdpbf16ps with float32
  // accumulation, as vLLM's CPU backend does (relative error ~2^-9 per activation).
  kQ8,
  // Fast, 16-bit: activations quantized to int16 per block (|q| <= 32639), run as two int8 planes
  // through the same int8 kernels (kernels.h). About 256x less activation error than kQ8 (relative
  // ~1e-5), close to kF32 in model outputs, at ~1.2-1.5x kQ8's kernel time. Same fallbacks as kQ8,
  // except that BF16 weights keep float32 activations here.
  kQ16,
};

// A growing, 64-byte aligned buffer reused across calls; one per calling thread.
class MatmulScratch {
 public:
  MatmulScratch() = default;
  // Pre-sizes the buffer so the first calls do not allocate (see matmul_scratch_bytes).
  void reserve(size_t bytes);
  size_t capacity() const { return capacity_; }
  // At least `bytes` bytes, 64-byte aligned; reallocates (contents lost) only when growing.
  void* get(size_t bytes);

 private:
  struct Free {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, Free> buf_;
  size_t capacity_ = 0;
};
using Scratch = MatmulScratch;

// Ok when matmul supports `wtype` with rows of k elements (k a multiple of the block size; F32,
// F16, BF16 take any k > 0). Call once at load time: matmul itself only KVASIR_CHECKs.
Status matmul_supported(DType wtype, int64_t k);

// Bytes of scratch a call with these arguments uses (callers may reserve() it up front).
size_t matmul_scratch_bytes(DType wtype, int64_t k, int64_t n, int num_threads, ActQuant mode);

// y[j, r] = sum_i x[j, i] * W[r, i]  for r < m, j < n.      x [n, k], y [n, m] (f32, no alignment
// needed; y must not alias x or w). Runs on all of `pool`'s threads; call from one thread at a time.
// Batch-invariant: row j of y is bit-identical whatever n, the other rows of x and the thread count
// are (a request decodes the same tokens alone or batched).
// `packed`, if given, is W repacked (packed_q32.h): batches then run on its panels where the
// kernels have a packed tile (AVX-512 without AMX, fast modes); y is the same either way.
void matmul(const void* w, DType wtype, int64_t m, int64_t k, const float* x, int64_t n, float* y,
            ThreadPool& pool, ActQuant mode, MatmulScratch& scratch, const PackedQ32* packed = nullptr);
// The same on a named ISA's kernels (tests, benchmarks); falls back to AVX2 where unsupported.
void matmul(CpuIsa isa, const void* w, DType wtype, int64_t m, int64_t k, const float* x, int64_t n, float* y,
            ThreadPool& pool, ActQuant mode, MatmulScratch& scratch, const PackedQ32* packed = nullptr);

// One weight against its own activation rows, as one of several products matmul_grouped runs.
struct MatmulProblem {
  const void* w = nullptr;  // [m, k] rows of the group's weight type
  int64_t m = 0;
  const float* x = nullptr;  // [n, k]
  int64_t n = 0;
  float* y = nullptr;  // [n, m]
  const PackedQ32* packed = nullptr;  // optional: W's packed panels (see matmul)
};

// Bytes of scratch matmul_grouped uses for these problems.
size_t matmul_grouped_scratch_bytes(const MatmulProblem* problems, int num_problems, DType wtype, int64_t k,
                                    int num_threads, ActQuant mode);

// matmul for each problem (all of one weight type and k) in a single parallel region whose row
// tiles span every problem, so many small products (the experts of a MoE layer, each with a few
// tokens) keep every thread busy. A problem with the same x and n as the one before it (a layer's
// q / k / v) reuses that problem's quantized activations. Each y is bit-identical to matmul's for
// the same problem.
void matmul_grouped(const MatmulProblem* problems, int num_problems, DType wtype, int64_t k, ThreadPool& pool,
                    ActQuant mode, MatmulScratch& scratch);
void matmul_grouped(CpuIsa isa, const MatmulProblem* problems, int num_problems, DType wtype, int64_t k,
                    ThreadPool& pool, ActQuant mode, MatmulScratch& scratch);

}  // namespace kvasir::cpu
