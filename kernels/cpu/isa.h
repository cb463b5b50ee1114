// The instruction sets the CPU kernels have paths for, chosen at run time: every path is built
// into every binary (per-function target attributes), and a path runs only where the CPU
// reports the features it needs, so one build runs everywhere.
#pragma once

namespace pagedserve::kernels {

enum class Isa { kPortable, kAvx2, kAvx512 };

const char* isa_name(Isa isa);
bool isa_supported(Isa isa);  // by this CPU (AVX2 needs FMA and F16C; AVX-512 needs F, BW, VL)
// The fastest supported ISA, or the one named by the PAGEDSERVE_CPU_ISA environment variable
// (portable, avx2, avx512) when that is supported; decided once per process.
Isa best_isa();

}  // namespace pagedserve::kernels
