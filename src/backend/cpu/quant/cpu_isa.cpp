#include "backend/cpu/quant/cpu_isa.h"

#include <cstdlib>
#include <cstring>

#include "common/log.h"

namespace kvasir::cpu {
namespace {

bool detect_avx512() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  // __builtin_cpu_supports also checks that the OS saves the zmm/k registers (XCR0).
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
         __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

CpuIsa choose_isa() {
  const bool avx512 = detect_avx512();
  const char* env = std::getenv("KVASIR_CPU_ISA");
  if (env != nullptr && *env != '\0') {
    if (std::strcmp(env, "avx2") == 0) return CpuIsa::kAvx2;
    if (std::strcmp(env, "avx512") == 0) {
      if (avx512) return CpuIsa::kAvx512;
      KVASIR_LOG_WARN("KVASIR_CPU_ISA=avx512 but this CPU lacks AVX-512 VNNI; using avx2");
      return CpuIsa::kAvx2;
    }
    KVASIR_LOG_WARN("KVASIR_CPU_ISA=%s not understood (avx2|avx512); ignoring it", env);
  }
  return avx512 ? CpuIsa::kAvx512 : CpuIsa::kAvx2;
}

}  // namespace

bool cpu_supports(CpuIsa isa) {
  static const bool avx512 = detect_avx512();
  return isa == CpuIsa::kAvx2 || avx512;
}

CpuIsa active_isa() {
  static const CpuIsa isa = choose_isa();
  return isa;
}

std::string_view isa_name(CpuIsa isa) { return isa == CpuIsa::kAvx512 ? "avx512" : "avx2"; }

}  // namespace kvasir::cpu
