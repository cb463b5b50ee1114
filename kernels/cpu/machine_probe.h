// Machine probes for the benchmarks' rooflines: the read bandwidth the CPU executor can hope
// for (a STREAM-style sum over a buffer far larger than the caches) and the fp32 FMA peak (a
// loop of independent FMAs, no memory). Both run on a ThreadPool, so they use the same threads
// as the kernels they are compared with, and the same ISA path.
#pragma once

#include <cstddef>

#include "kernels/cpu/isa.h"

namespace pagedserve::kernels {

class ThreadPool;

// Best-of-`repeats` read bandwidth in GB/s (1e9 bytes/s) summing a `buffer_bytes` buffer split
// across the pool's threads.
double measure_read_bandwidth_gbps(ThreadPool* pool, size_t buffer_bytes = size_t{1} << 30,
                                   int repeats = 5, Isa isa = best_isa());

// Best-of-`repeats` fp32 FLOP/s (an FMA counts 2) of independent FMA chains on every thread of
// the pool, in GFLOP/s.
double measure_fma_peak_gflops(ThreadPool* pool, int repeats = 5, Isa isa = best_isa());

}  // namespace pagedserve::kernels
