// The AVX-512 kernel set (F, BW, VL, VNNI): VNNI dot products on 256-bit vectors, chosen at run
// time (cpu_isa.h); built with extra -m flags for this file only. The kernel bodies
// are shared with kernels_avx2.cpp through textual inclusion inside this file's own namespace,
// so the two compilations (different -m flags) never share a symbol.
#include <immintrin.h>

#include "backend/cpu/quant/kernels.h"

// GCC 12 reports the _mm512_undefined_* idiom inside its own AVX-512 intrinsics (casts, cvtph)
// as maybe-uninitialized; the warning is about the compiler's headers, not this code.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace kvasir::cpu::avx512 {

constexpr CpuIsa kIsa = CpuIsa::kAvx512;
#define KVASIR_AVX512 1
// NOLINTBEGIN(bugprone-suspicious-include)
#include "backend/cpu/quant/simd.inc"
#include "backend/cpu/quant/kern_q32.inc"
#include "backend/cpu/quant/kern_kquant.inc"
#include "backend/cpu/quant/kern_f32.inc"
#include "backend/cpu/quant/kernel_set.inc"
// NOLINTEND(bugprone-suspicious-include)

}  // namespace kvasir::cpu::avx512
