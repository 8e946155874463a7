// The gated MLP's activation of its gate value (SiLU, or GELU's tanh approximation), one definition
// for the elementwise op, the MoE kernels and the GEMVs that fold it into their epilogue, so that
// the fused and the unfused paths agree bit for bit.
#pragma once

namespace kvasir::cuda {

__device__ __forceinline__ float gate_activation(float g, bool gelu_tanh) {
  if (gelu_tanh) {
    const float kAlpha = 0.7978845608028654f;
    return 0.5f * g * (1.0f + tanhf(kAlpha * (g + 0.044715f * g * g * g)));
  }
  return g / (1.0f + expf(-g));
}

}  // namespace kvasir::cuda
