#include "backend/cpu/quant/dequantize.h"

#include "backend/cpu/quant/kernels.h"
#include "common/check.h"
#include "quant/dequantize.h"

namespace kvasir::cpu {

const KernelSet& kernel_set(CpuIsa isa) {
  // AMX adds tiles for batched matmuls (matmul.cpp) on top of the AVX-512 set.
  if ((isa == CpuIsa::kAvx512 || isa == CpuIsa::kAmx) && cpu_supports(CpuIsa::kAvx512)) return avx512::kernels();
  return avx2::kernels();
}

void dequantize_row(CpuIsa isa, DType t, const void* src, float* dst, int64_t k) {
  KVASIR_CHECK_MSG(quant::dequantize_supported(t), "dequantize_row: unsupported dtype");
  if (DequantFn f = kernel_set(isa).dequant(t)) {
    f(src, dst, k);
  } else {
    quant::dequantize_row(t, src, dst, k);
  }
}

void dequantize_row(DType t, const void* src, float* dst, int64_t k) { dequantize_row(active_isa(), t, src, dst, k); }

}  // namespace kvasir::cpu
