// moe_route on the device: one warp per token scores its experts (softmax or sigmoid), adds the
// correction bias for choosing, keeps the best groups, picks top_k by repeated warp arg-max and
// writes their unbiased scores, renormalized and scaled. The same arithmetic in the same order as
// CpuBackend::moe_route wherever the order is visible (group scores, the weight sum), and the same
// tie rule: the larger value wins, equal values go to the lower expert (group) index.
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/moe_kernels.h"

namespace kvasir::cuda {
namespace {

constexpr int kWarpsPerCta = 4;

// Bytes of one warp's scratch: scores, choice, group scores and the chosen weights (float), then
// eligibility masks. The weights are summed and scaled from here, not from their global copy: a
// read-back of each just-written weight cost a global round trip apiece (7 us a call for top-8).
__host__ __device__ inline int route_scratch_bytes(int e, int g, int k) {
  return ((2 * e + g + k) * 4 + e + g + 15) / 16 * 16;
}

// Index of the best allowed v[i], i < n (ties: lower index; NaN ranks below every number but is
// still returned when nothing else is allowed); the same on every lane. -1 when none is allowed.
__device__ int warp_argmax(const float* v, const uint8_t* allowed, int n, int lane) {
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

__global__ void __launch_bounds__(kWarpsPerCta * 32) moe_route_kernel(MoeRouteArgs a) {
  pdl_begin();
  extern __shared__ __align__(16) unsigned char route_smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int t = blockIdx.x * kWarpsPerCta + warp;
  if (t >= a.num_tokens) return;
  const int E = a.num_experts, G = a.num_groups;
  unsigned char* base = route_smem + warp * route_scratch_bytes(E, G, a.top_k);
  float* scores = reinterpret_cast<float*>(base);
  float* choice = scores + E;
  float* gscore = choice + E;
  float* chosen = gscore + G;
  uint8_t* eligible = reinterpret_cast<uint8_t*>(chosen + a.top_k);
  uint8_t* gopen = eligible + E;
  const float* l = a.logits + static_cast<int64_t>(t) * E;

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
  int32_t* ids = a.ids + static_cast<int64_t>(t) * a.top_k;
  float* w = a.weights + static_cast<int64_t>(t) * a.top_k;
  for (int j = 0; j < a.top_k; ++j) {
    const int e = warp_argmax(choice, eligible, E, lane);
    if (lane == 0) {
      eligible[e] = 0;
      ids[j] = e;
      chosen[j] = scores[e];
    }
    __syncwarp();
  }
  float sum = 0.0f;  // in slot order on every lane, as on the CPU
  for (int j = 0; j < a.top_k; ++j) sum += chosen[j];
  // DeepSeek's epsilon, as on the CPU.
  const float denom = sum + 1e-20f;
  for (int j = lane; j < a.top_k; j += 32) {
    float v = chosen[j];
    if (a.renormalize) v /= denom;
    if (a.scale != 1.0f) v *= a.scale;
    w[j] = v;
  }
}

}  // namespace

void launch_moe_route(const MoeRouteArgs& a, cudaStream_t s) {
  if (a.num_tokens <= 0) return;
  KVASIR_CHECK_MSG(a.num_experts >= 1 && a.num_experts <= kMoeRouteMaxExperts && a.num_groups >= 1 &&
                       a.num_experts % a.num_groups == 0 && a.top_k >= 1 && a.top_k <= a.num_experts,
                   "moe_route: unsupported routing shape");
  const size_t smem = static_cast<size_t>(route_scratch_bytes(a.num_experts, a.num_groups, a.top_k)) * kWarpsPerCta;
  const unsigned blocks = static_cast<unsigned>((a.num_tokens + kWarpsPerCta - 1) / kWarpsPerCta);
  if (smem > 48 * 1024) {
    // Only for hundreds of experts with a large top_k; set once per process, before any capture.
    static const cudaError_t raised = cudaFuncSetAttribute(moe_route_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                           static_cast<int>(route_scratch_bytes(kMoeRouteMaxExperts, kMoeRouteMaxExperts, kMoeRouteMaxExperts)) * kWarpsPerCta);
    KVASIR_CUDA_CHECK(raised);
  }
  launch(moe_route_kernel, blocks, kWarpsPerCta * 32, smem, s, a);
  KVASIR_CUDA_LAUNCH_CHECK();
}

}  // namespace kvasir::cuda
