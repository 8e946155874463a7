// The AVX2+FMA+F16C kernel set: the baseline every supported x86-64 CPU runs. The kernel bodies
// are shared with kernels_avx512.cpp through textual inclusion inside this file's own namespace,
// so the two compilations (different -m flags) never share a symbol.
#include <immintrin.h>

#include "backend/cpu/quant/kernels.h"

namespace kvasir::cpu::avx2 {

constexpr CpuIsa kIsa = CpuIsa::kAvx2;
#define KVASIR_AVX512 0
// NOLINTBEGIN(bugprone-suspicious-include)
#include "backend/cpu/quant/simd.inc"
#include "backend/cpu/quant/kern_q32.inc"
#include "backend/cpu/quant/kern_kquant.inc"
#include "backend/cpu/quant/kern_f32.inc"
#include "backend/cpu/quant/kernel_set.inc"
// NOLINTEND(bugprone-suspicious-include)

}  // namespace kvasir::cpu::avx2
