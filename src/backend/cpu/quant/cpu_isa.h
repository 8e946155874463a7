// Which x86 kernel set runs: the AVX2+FMA+F16C baseline, AVX-512 (F/BW/VL/VNNI), or AVX-512 plus
// AMX-INT8 tiles for batched int8 matmuls, chosen at run time from cpuid (AMX also needs the
// kernel's per-process permission for tile data, asked for once). KVASIR_CPU_ISA=avx2|avx512|amx
// in the environment pins one (read once), so every path can be exercised on one machine; tests
// and benchmarks may also name an ISA directly.
// Must not be used to change kernels mid-run: the choice is made once per process.
#pragma once

#include <string_view>

namespace kvasir::cpu {

// kAmx computes exactly what kAvx512 does (same y bits); it is only faster on large batches.
enum class CpuIsa { kAvx2, kAvx512, kAmx };

// True when this CPU and OS can run kernels built for `isa`.
bool cpu_supports(CpuIsa isa);

// The ISA used by calls that name none: the best supported one, unless KVASIR_CPU_ISA pins one.
CpuIsa active_isa();

std::string_view isa_name(CpuIsa isa);

// AVX-512 BF16 (vdpbf16ps) beside kAvx512: the fast mode's BF16-weight tile needs it.
bool cpu_has_avx512_bf16();

}  // namespace kvasir::cpu
