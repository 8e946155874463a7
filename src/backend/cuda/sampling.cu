// On-device sampling, the twin of steps 5-10 of sample/sampler.h: one 1024-thread CTA per row.
// Greedy rows take the argmax (ties -> lowest id, NaN never wins). Otherwise: the k-th largest
// logit by a 4-pass radix select, e = exp((x - x_max) / T) kept by top-k and min-p, the top-p
// cut by a 4-pass radix descent over the bits of e weighted by mass, and the inverse-CDF draw in
// ascending id order with the request's Philox number. Sums are in double like the host's.
#include <cfloat>
#include <climits>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/kernels.h"

namespace kvasir::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;

__device__ __forceinline__ uint32_t order_key(float f) {
  const uint32_t b = __float_as_uint(f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ __forceinline__ float from_order_key(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

__device__ double philox_uniform(uint64_t key, uint64_t position, uint32_t stream) {
  uint32_t c0 = static_cast<uint32_t>(position), c1 = static_cast<uint32_t>(position >> 32), c2 = stream, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
    const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n1 = static_cast<uint32_t>(p1);
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    const uint32_t n3 = static_cast<uint32_t>(p0);
    c0 = n0, c1 = n1, c2 = n2, c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  const uint64_t bits = ((static_cast<uint64_t>(c1) << 32) | c0) >> 11;
  return static_cast<double>(bits) * 0x1.0p-53;
}

struct Shared {
  float red_v[kWarps];
  int red_i[kWarps];
  double red_d[kWarps];
  unsigned int hist[256];
  double hist_mass[256];
  uint32_t prefix;
  int remaining;
  double above;
  int found;
  int chosen;
  int last_kept;
};

__device__ double block_sum_d(double v, Shared& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (lane == 0) sh.red_d[warp] = v;
  __syncthreads();
  double r = lane < kWarps ? sh.red_d[lane] : 0.0;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) r += __shfl_xor_sync(0xffffffffu, r, o);
  __syncthreads();
  return r;
}

// Exclusive prefix sum over threads in thread order.
__device__ double block_exclusive_scan_d(double v, Shared& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  double incl = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const double n = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += n;
  }
  if (lane == 31) sh.red_d[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    double w = sh.red_d[lane];
    double winc = w;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const double n = __shfl_up_sync(0xffffffffu, winc, o);
      if (lane >= o) winc += n;
    }
    sh.red_d[lane] = winc - w;  // exclusive prefix of warp totals
  }
  __syncthreads();
  const double r = sh.red_d[warp] + incl - v;
  __syncthreads();
  return r;
}

__global__ void __launch_bounds__(kThreads) sample_kernel(const float* __restrict__ logits, int64_t vocab,
                                                          const SamplingRowParams* __restrict__ params,
                                                          int32_t* __restrict__ out) {
  pdl_begin();
  __shared__ Shared sh;
  const int row = blockIdx.x;
  const float* x = logits + static_cast<int64_t>(row) * vocab;
  const SamplingRowParams p = params[row];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int V = static_cast<int>(vocab);

  // 1. argmax: strict > within a thread's ascending ids; across threads larger value, then lower id.
  float bv = -INFINITY;
  int bi = INT_MAX;
  for (int i = tid; i < V; i += kThreads) {
    const float v = x[i];
    if (v > bv) {
      bv = v;
      bi = i;
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (ov > bv || (ov == bv && oi < bi)) {
      bv = ov;
      bi = oi;
    }
  }
  if (lane == 0) {
    sh.red_v[warp] = bv;
    sh.red_i[warp] = bi;
  }
  __syncthreads();
  if (warp == 0) {
    bv = sh.red_v[lane];
    bi = sh.red_i[lane];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (ov > bv || (ov == bv && oi < bi)) {
        bv = ov;
        bi = oi;
      }
    }
    if (lane == 0) {
      sh.red_v[0] = bv;
      sh.red_i[0] = bi == INT_MAX ? 0 : bi;
    }
  }
  __syncthreads();
  const float x_max = sh.red_v[0];
  const int best = sh.red_i[0];
  if (p.temperature == 0.0f || !isfinite(x_max)) {
    if (tid == 0) out[row] = best;
    return;
  }

  // 2. top-k threshold: the k-th largest logit (counting duplicates).
  const bool use_top_k = p.top_k >= 1 && p.top_k < V;
  float kth = -INFINITY;
  if (use_top_k) {
    if (tid == 0) {
      sh.prefix = 0;
      sh.remaining = p.top_k;
    }
    uint32_t mask = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int i = tid; i < 256; i += kThreads) sh.hist[i] = 0;
      __syncthreads();
      const uint32_t prefix = sh.prefix;
      for (int i = tid; i < V; i += kThreads) {
        const uint32_t k = order_key(x[i]);
        if ((k & mask) == prefix) atomicAdd(&sh.hist[(k >> shift) & 255u], 1u);
      }
      __syncthreads();
      if (tid == 0) {
        int above = 0, d = 255;
        for (; d > 0; --d) {
          if (above + static_cast<int>(sh.hist[d]) >= sh.remaining) break;
          above += static_cast<int>(sh.hist[d]);
        }
        sh.remaining -= above;
        sh.prefix = prefix | (static_cast<uint32_t>(d) << shift);
      }
      mask |= 255u << shift;
      __syncthreads();
    }
    kth = from_order_key(sh.prefix);
  }
  const float min_cut = p.min_p > 0.0f ? p.min_p : 0.0f;
  const float temp = p.temperature;
  auto e_of = [&](int i, float* e) -> bool {  // e and whether the token survives top-k and min-p
    const float v = x[i];
    *e = expf((v - x_max) / temp);
    return (!use_top_k || v >= kth) && *e >= min_cut && *e > 0.0f;
  };

  // 3. kept mass.
  double mass = 0.0;
  for (int i = tid; i < V; i += kThreads) {
    float e;
    if (e_of(i, &e)) mass += e;
  }
  mass = block_sum_d(mass, sh);

  // 4. top-p: the largest e value c with mass(e >= c) >= top_p * mass; ties stay.
  float cut = min_cut;
  double kept_mass = mass;
  if (p.top_p < 1.0f) {
    const double target = static_cast<double>(p.top_p) * mass;
    if (tid == 0) {
      sh.prefix = 0;
      sh.above = 0.0;
      sh.found = 1;
    }
    uint32_t mask = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int i = tid; i < 256; i += kThreads) sh.hist_mass[i] = 0.0;
      __syncthreads();
      const uint32_t prefix = sh.prefix;
      if (sh.found) {
        for (int i = tid; i < V; i += kThreads) {
          float e;
          if (!e_of(i, &e)) continue;
          const uint32_t b = __float_as_uint(e);
          if ((b & mask) == prefix) atomicAdd(&sh.hist_mass[(b >> shift) & 255u], static_cast<double>(e));
        }
      }
      __syncthreads();
      if (tid == 0 && sh.found) {
        double above = sh.above;
        int d = 255;
        for (; d >= 0; --d) {
          if (above + sh.hist_mass[d] >= target) break;
          above += sh.hist_mass[d];
        }
        if (d < 0) {
          sh.found = 0;  // rounding kept the walk from the target: keep everything
        } else {
          sh.above = above;
          sh.prefix = prefix | (static_cast<uint32_t>(d) << shift);
          if (shift == 0) sh.above = above + sh.hist_mass[d];  // the cut's ties stay
        }
      }
      mask |= 255u << shift;
      __syncthreads();
    }
    if (sh.found) {
      cut = __uint_as_float(sh.prefix);
      kept_mass = sh.above;
    }
  }

  // 5. draw: first id (ascending) whose running kept sum exceeds u * kept_mass.
  const double target = philox_uniform(p.rng_key, p.position, 0) * kept_mass;
  const int chunk = (V + kThreads - 1) / kThreads;
  const int b0 = tid * chunk, b1 = min(V, b0 + chunk);
  double local = 0.0;
  int last_local = -1;
  for (int i = b0; i < b1; ++i) {
    float e;
    if (e_of(i, &e) && e >= cut) {
      local += e;
      last_local = i;
    }
  }
  if (tid == 0) {
    sh.chosen = INT_MAX;
    sh.last_kept = -1;
  }
  __syncthreads();
  const double before = block_exclusive_scan_d(local, sh);
  if (last_local >= 0) atomicMax(&sh.last_kept, last_local);
  if (before <= target && before + local > target) {
    double acc = before;
    for (int i = b0; i < b1; ++i) {
      float e;
      if (!(e_of(i, &e) && e >= cut)) continue;
      acc += e;
      if (acc > target) {
        atomicMin(&sh.chosen, i);
        break;
      }
    }
  }
  __syncthreads();
  if (tid == 0) {
    int tok = sh.chosen != INT_MAX ? sh.chosen : sh.last_kept;
    out[row] = tok >= 0 ? tok : best;
  }
}

}  // namespace

void launch_sample(const float* logits, int num_rows, int64_t vocab, const SamplingRowParams* params,
                   int32_t* out_tokens, cudaStream_t s) {
  if (num_rows <= 0) return;
  launch(sample_kernel, num_rows, kThreads, 0, s, logits, vocab, params, out_tokens);
  KVASIR_CUDA_LAUNCH_CHECK();
}

}  // namespace kvasir::cuda
