// moe_route on the device: one warp per token runs route_token (moe_route.cuh) and stores its
// choice. At decode sizes the backend usually folds this op into the expert GEMV, which routes
// for itself (cuda_moe_ops.cpp); this kernel serves the grouped-GEMM path and unfused steps.
#include "backend/cuda/moe_route.cuh"

namespace kvasir::cuda {
namespace {

constexpr int kWarpsPerCta = 4;

__global__ void __launch_bounds__(kWarpsPerCta * 32) moe_route_kernel(MoeRouteArgs a) {
  pdl_begin();
  extern __shared__ __align__(16) unsigned char route_smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int t = blockIdx.x * kWarpsPerCta + warp;
  if (t >= a.num_tokens) return;
  unsigned char* scratch = route_smem + warp * route_scratch_bytes(a.num_experts, a.num_groups, a.top_k);
  store_route(a, t, route_token(a, t, scratch, lane), lane);
}

}  // namespace

void launch_moe_route(const MoeRouteArgs& a, cudaStream_t s) {
  if (a.num_tokens <= 0) return;
  KVASIR_CHECK_MSG(a.num_experts >= 1 && a.num_experts <= kMoeRouteMaxExperts && a.num_groups >= 1 &&
                       a.num_experts % a.num_groups == 0 && a.top_k >= 1 && a.top_k <= a.num_experts,
                   "moe_route: unsupported routing shape");
  const size_t smem = static_cast<size_t>(route_scratch_bytes(a.num_experts, a.num_groups, a.top_k)) * kWarpsPerCta;
  if (smem > 48 * 1024) {
    // Only for hundreds of experts with a large top_k; raised once per process, to the largest
    // scratch any routing this backend accepts can need.
    static const cudaError_t raised = cudaFuncSetAttribute(
        moe_route_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
        route_scratch_bytes(kMoeRouteMaxExperts, kMoeRouteMaxExperts, kMoeRouteMaxExperts) * kWarpsPerCta);
    KVASIR_CUDA_CHECK(raised);
  }
  const unsigned blocks = static_cast<unsigned>((a.num_tokens + kWarpsPerCta - 1) / kWarpsPerCta);
  launch(moe_route_kernel, blocks, kWarpsPerCta * 32, smem, s, a);
  KVASIR_CUDA_LAUNCH_CHECK();
}

}  // namespace kvasir::cuda
