#include "backend/cpu/quant/cpu_isa.h"

#include <cstdlib>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

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

// AMX-TILE and AMX-INT8 in cpuid, tile state enabled by the OS (XCR0 bits 17, 18), and Linux's
// permission to use tile data (arch_prctl ARCH_REQ_XCOMP_PERM; process-wide, so asking once from
// any thread covers the thread pool's threads too).
bool detect_amx() {
#if defined(__x86_64__) && defined(__linux__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
  if (((d >> 24) & 1u) == 0 || ((d >> 25) & 1u) == 0) return false;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0 || ((c >> 27) & 1u) == 0) return false;  // OSXSAVE
  unsigned xcr0_lo = 0, xcr0_hi = 0;
  __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  if ((xcr0_lo & 0x60000u) != 0x60000u) return false;
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

bool detect_avx512_bf16() {
#if defined(__x86_64__) || defined(__i386__)
  return detect_avx512() && __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

bool amx_usable() {
  static const bool ok = detect_avx512() && detect_amx();
  return ok;
}

CpuIsa choose_isa() {
  const bool avx512 = detect_avx512();
  const char* env = std::getenv("KVASIR_CPU_ISA");
  if (env != nullptr && *env != '\0') {
    if (std::strcmp(env, "avx2") == 0) return CpuIsa::kAvx2;
    if (std::strcmp(env, "avx512") == 0 || std::strcmp(env, "amx") == 0) {
      const bool amx = std::strcmp(env, "amx") == 0;
      if (amx && amx_usable()) return CpuIsa::kAmx;
      if (amx) KVASIR_LOG_WARN("KVASIR_CPU_ISA=amx but AMX-INT8 is not usable here; trying avx512");
      if (avx512) return CpuIsa::kAvx512;
      KVASIR_LOG_WARN("KVASIR_CPU_ISA=%s but this CPU lacks AVX-512 VNNI; using avx2", env);
      return CpuIsa::kAvx2;
    }
    KVASIR_LOG_WARN("KVASIR_CPU_ISA=%s not understood (avx2|avx512|amx); ignoring it", env);
  }
  if (avx512 && amx_usable()) return CpuIsa::kAmx;
  return avx512 ? CpuIsa::kAvx512 : CpuIsa::kAvx2;
}

}  // namespace

bool cpu_supports(CpuIsa isa) {
  static const bool avx512 = detect_avx512();
  if (isa == CpuIsa::kAmx) return amx_usable();
  return isa == CpuIsa::kAvx2 || avx512;
}

CpuIsa active_isa() {
  static const CpuIsa isa = choose_isa();
  return isa;
}

std::string_view isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx512: return "avx512";
    case CpuIsa::kAmx: return "amx";
    default: return "avx2";
  }
}

bool cpu_has_avx512_bf16() {
  static const bool ok = detect_avx512_bf16();
  return ok;
}

}  // namespace kvasir::cpu
