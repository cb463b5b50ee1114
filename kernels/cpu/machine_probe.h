// Machine probes for the benchmarks' rooflines: the read bandwidth the CPU executor can hope
// for (a STREAM-style sum over a buffer far larger than the caches) and the fp32 FMA peak (a
// loop of independent FMAs, no memory). Both run on a ThreadPool, so they use the same threads
// as the kernels they are compared with, and the same ISA path.
#pragma once

#include <cstddef>
#include <vector>

#include "kernels/cpu/isa.h"

namespace pagedserve::kernels {

class ThreadPool;

// Best-of-`repeats` read bandwidth in GB/s (1e9 bytes/s) summing a `buffer_bytes` buffer split
// across the pool's threads.
double measure_read_bandwidth_gbps(ThreadPool* pool, size_t buffer_bytes = size_t{1} << 30,
                                   int repeats = 5, Isa isa = best_isa());

// A read-bandwidth probe to interleave with the steps a benchmark times. On a shared machine
// (a VM whose neighbours use the same memory controllers) the bandwidth available moves by
// tens of percent from one minute to the next, so a roofline measured once, before the run,
// flatters or wrongs every step after it. Each read(bytes) sums the next `bytes` of a ring
// buffer larger than the last-level cache (so every read streams from memory, as the
// weights of a step do, and evicts them, so the next step streams them too), split over the
// pool's threads as contiguous shares, and returns its GB/s.
class ReadProbe {
 public:
  explicit ReadProbe(size_t buffer_bytes = size_t{1} << 30, Isa isa = best_isa());
  ~ReadProbe();
  ReadProbe(const ReadProbe&) = delete;
  ReadProbe& operator=(const ReadProbe&) = delete;

  double read_gbps(ThreadPool* pool, size_t bytes);

 private:
  float* data_ = nullptr;
  size_t floats_ = 0;
  size_t next_ = 0;  // where the next read starts, in floats
  Isa isa_;
};

// Steps timed between probes of their own size: start() reads one before the first step,
// after_step() one after each; a step's fraction is its GB/s over the mean of the probes just
// before and just after it.
class InterleavedRoofline {
 public:
  void start(ThreadPool* pool, size_t bytes);
  void after_step(ThreadPool* pool, size_t bytes, double step_gbps);
  const std::vector<double>& probe_gbps() const { return probe_gbps_; }
  const std::vector<double>& fractions() const { return fractions_; }

 private:
  ReadProbe probe_;
  std::vector<double> probe_gbps_;
  std::vector<double> fractions_;
};

// Best-of-`repeats` fp32 FLOP/s (an FMA counts 2) of independent FMA chains on every thread of
// the pool, in GFLOP/s.
double measure_fma_peak_gflops(ThreadPool* pool, int repeats = 5, Isa isa = best_isa());

}  // namespace pagedserve::kernels
