// Which x86 kernel set runs: the AVX2+FMA+F16C baseline, or AVX-512 (F/BW/VL/VNNI) chosen at
// run time from cpuid. KVASIR_CPU_ISA=avx2 in the environment pins the baseline (read once), so
// both paths can be exercised on one machine; tests and benchmarks may also name an ISA directly.
// Must not be used to change kernels mid-run: the choice is made once per process.
#pragma once

#include <string_view>

namespace kvasir::cpu {

enum class CpuIsa { kAvx2, kAvx512 };

// True when this CPU and OS can run kernels built for `isa`.
bool cpu_supports(CpuIsa isa);

// The ISA used by calls that name none: the best supported one, unless KVASIR_CPU_ISA pins one.
CpuIsa active_isa();

std::string_view isa_name(CpuIsa isa);

}  // namespace kvasir::cpu
