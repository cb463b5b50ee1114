// Instruction-set detection for the CPU kernels; see isa.h.
#include "kernels/cpu/isa.h"

#include <cstdlib>
#include <string>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

namespace pagedserve::kernels {

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kPortable:
      break;
  }
  return "portable";
}

#if defined(__x86_64__) && defined(__GNUC__)
namespace {
// CPUID leaf 1, ECX bit 29: clang (14) has no "f16c" name for __builtin_cpu_supports.
bool cpu_supports_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}
}  // namespace
#endif

namespace {

bool detect_isa_supported(Isa isa) {
#if defined(__x86_64__) && defined(__GNUC__)
  switch (isa) {
    case Isa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma") &&
             cpu_supports_f16c();
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_supports_f16c();
    case Isa::kPortable:
      return true;
  }
  return false;
#else
  return isa == Isa::kPortable;
#endif
}

}  // namespace

// Detected once: the kernels assert it on every call in Debug builds, and CPUID traps to the
// hypervisor on a VM (it was 14% of a sanitizer build's engine test).
bool isa_supported(Isa isa) {
  static const bool supported[] = {detect_isa_supported(Isa::kPortable),
                                   detect_isa_supported(Isa::kAvx2),
                                   detect_isa_supported(Isa::kAvx512)};
  switch (isa) {
    case Isa::kPortable:
      return supported[0];
    case Isa::kAvx2:
      return supported[1];
    case Isa::kAvx512:
      return supported[2];
  }
  return false;
}

namespace {

Isa detect_best_isa() {
  if (const char* forced = std::getenv("PAGEDSERVE_CPU_ISA")) {
    for (Isa isa : {Isa::kPortable, Isa::kAvx2, Isa::kAvx512}) {
      if (std::string(forced) == isa_name(isa) && isa_supported(isa)) return isa;
    }
  }
  for (Isa isa : {Isa::kAvx512, Isa::kAvx2}) {
    if (isa_supported(isa)) return isa;
  }
  return Isa::kPortable;
}

}  // namespace

Isa best_isa() {
  static const Isa isa = detect_best_isa();
  return isa;
}

}  // namespace pagedserve::kernels
