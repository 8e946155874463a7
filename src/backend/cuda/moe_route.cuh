// One token's routing by one warp, shared by moe_route_kernel (moe_route.cu) and the decode GEMV
// that routes for itself (moe_gemv.cu): scores its experts (softmax or sigmoid), adds the
// correction bias for choosing, keeps the best groups, picks top_k by repeated warp arg-max and
// leaves their unbiased scores, renormalized and scaled, in the warp's scratch. The same
// arithmetic in the same order as CpuBackend::moe_route wherever the order is visible (group
// scores, the weight sum), and the same tie rule: the larger value wins, equal values go to the
// lower expert (group) index. Both callers run this very code, so they agree to the bit.
#pragma once

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/moe_kernels.h"

namespace kvasir::cuda {

// Bytes of one warp's scratch: scores, choice, group scores, the chosen weights (float) and ids
// (int32), then eligibility masks. The weights are summed and scaled from here, not from a
// global copy: a read-back of each just-written weight costs a global round trip apiece.
__host__ __device__ inline int route_scratch_bytes(int e, int g, int k) {
  return ((2 * e + g + 2 * k) * 4 + e + g + 15) / 16 * 16;
}

// Index of the best allowed v[i], i < n (ties: lower index; NaN ranks below every number but is
// still returned when nothing else is allowed); the same on every lane. -1 when none is allowed.
__device__ inline int warp_argmax(const float* v, const uint8_t* allowed, int n, int lane) {
  float best = 0.0f;
  int bi = -1;
  for (int i = lane; i < n; i += 32) {
    if (!allowed[i]) continue;
    float x = v[i];
    if (x != x) x = -INFINITY;
    if (bi < 0 || x > best) {
      best = x;
      bi = i;
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ob = __shfl_xor_sync(0xffffffffu, best, o);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (oi >= 0 && (bi < 0 || ob > best || (ob == best && oi < bi))) {
      best = ob;
      bi = oi;
    }
  }
  return bi;
}

// Where route_token leaves token t's choice in a warp's scratch.
struct RouteResult {
  const int32_t* ids;   // [top_k]
  const float* weights; // [top_k], final (renormalized, scaled)
};

// The whole warp calls it (every lane); `scratch` is the warp's route_scratch_bytes. The result
// is visible to the warp on return (after __syncwarp); other warps need a barrier.
__device__ inline RouteResult route_token(const MoeRouteArgs& a, int64_t t, unsigned char* scratch, int lane) {
  const int E = a.num_experts, G = a.num_groups, K = a.top_k;
  float* scores = reinterpret_cast<float*>(scratch);
  float* choice = scores + E;
  float* gscore = choice + E;
  float* chosen = gscore + G;
  int32_t* chosen_ids = reinterpret_cast<int32_t*>(chosen + K);
  uint8_t* eligible = reinterpret_cast<uint8_t*>(chosen_ids + K);
  uint8_t* gopen = eligible + E;
  const float* l = a.logits + t * E;

  if (!a.sigmoid) {
    float mx = -INFINITY;
    for (int e = lane; e < E; e += 32) mx = fmaxf(mx, l[e]);
    mx = warp_max(mx);
    float sum = 0.0f;
    for (int e = lane; e < E; e += 32) {
      scores[e] = expf(l[e] - mx);
      sum += scores[e];
    }
    sum = warp_sum(sum);
    for (int e = lane; e < E; e += 32) scores[e] = scores[e] / sum;
  } else {
    for (int e = lane; e < E; e += 32) scores[e] = 1.0f / (1.0f + expf(-l[e]));
  }
  for (int e = lane; e < E; e += 32) {
    choice[e] = a.bias != nullptr ? scores[e] + a.bias[e] : scores[e];
    eligible[e] = 1;
  }
  __syncwarp();
  if (G > 1) {
    const int gs = E / G;
    for (int g = lane; g < G; g += 32) {
      // Best and second best of the group, scanned in order as the CPU does.
      const float* c = choice + g * gs;
      float first = c[0], second = -INFINITY;
      for (int i = 1; i < gs; ++i) {
        if (c[i] > first) {
          second = first;
          first = c[i];
        } else if (c[i] > second) {
          second = c[i];
        }
      }
      gscore[g] = a.group_top2 ? first + second : first;
      gopen[g] = 1;
    }
    __syncwarp();
    for (int n = 0; n < a.topk_groups; ++n) {
      const int g = warp_argmax(gscore, gopen, G, lane);
      if (lane == 0) gopen[g] = 0;  // kept groups are the closed ones
      __syncwarp();
    }
    for (int e = lane; e < E; e += 32) eligible[e] = gopen[e / gs] ? 0 : 1;
    __syncwarp();
  }
  for (int j = 0; j < K; ++j) {
    const int e = warp_argmax(choice, eligible, E, lane);
    if (lane == 0) {
      eligible[e] = 0;
      chosen_ids[j] = e;
      chosen[j] = scores[e];
    }
    __syncwarp();
  }
  float sum = 0.0f;  // in slot order on every lane, as on the CPU
  for (int j = 0; j < K; ++j) sum += chosen[j];
  // DeepSeek's epsilon, as on the CPU.
  const float denom = sum + 1e-20f;
  __syncwarp();
  for (int j = lane; j < K; j += 32) {
    float v = chosen[j];
    if (a.renormalize) v /= denom;
    if (a.scale != 1.0f) v *= a.scale;
    chosen[j] = v;
  }
  __syncwarp();
  return {chosen_ids, chosen};
}

// Token t's routing to the op's outputs (ids, weights), lanes in parallel.
__device__ inline void store_route(const MoeRouteArgs& a, int64_t t, const RouteResult& r, int lane) {
  for (int j = lane; j < a.top_k; j += 32) {
    a.ids[t * a.top_k + j] = r.ids[j];
    a.weights[t * a.top_k + j] = r.weights[j];
  }
}

}  // namespace kvasir::cuda
