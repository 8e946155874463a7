// Device code shared by the mixture-of-experts kernels (moe_gemv.cu, moe_gemm.cu): the gated
// activations of moe_params.h in float32, as the CPU backend computes them. Header-only.
#pragma once

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/gate_activation.cuh"
#include "backend/cuda/moe_kernels.h"

namespace kvasir::cuda {

__device__ __forceinline__ float moe_activate(MoeActivation act, float g, float u, float alpha, float limit) {
  switch (act) {
    case MoeActivation::kGeluTanh:
      return gate_activation(g, true) * u;
    case MoeActivation::kSwigluOai: {
      // GPT-OSS: the gate clamped from above, up into [-limit, limit].
      const float x = fminf(g, limit);
      const float y = fminf(fmaxf(u, -limit), limit);
      return (y + 1.0f) * (x / (1.0f + expf(-alpha * x)));
    }
    default:
      return gate_activation(g, false) * u;
  }
}

}  // namespace kvasir::cuda
