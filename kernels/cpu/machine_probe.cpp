// measure_read_bandwidth_gbps and measure_fma_peak_gflops; the SIMD loops are marked with
// target attributes and run only where isa_supported says so.
#include "kernels/cpu/machine_probe.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <new>
#include <vector>

#include "kernels/cpu/huge_page_allocator.h"
#include "kernels/cpu/thread_pool.h"

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*, a -Wmaybe-uninitialized false
// positive once inlined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace pagedserve::kernels {
namespace {

using Clock = std::chrono::steady_clock;

__attribute__((target("avx512f"))) float sum_avx512(const float* p, size_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 64 <= n; i += 64) {
    a0 = _mm512_add_ps(a0, _mm512_load_ps(p + i));
    a1 = _mm512_add_ps(a1, _mm512_load_ps(p + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_load_ps(p + i + 32));
    a3 = _mm512_add_ps(a3, _mm512_load_ps(p + i + 48));
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

__attribute__((target("avx2"))) float sum_avx2(const float* p, size_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  float s = 0;
  for (float v : lanes) s += v;
  return s;
}

float sum_portable(const float* p, size_t n) {
  float lanes[16] = {};
  for (size_t i = 0; i + 16 <= n; i += 16) {
    for (int l = 0; l < 16; ++l) lanes[l] += p[i + l];
  }
  float s = 0;
  for (float v : lanes) s += v;
  return s;
}

constexpr long kFmaIterations = 1 << 20;

// 16 independent accumulators hide the FMA latency on every current core.
__attribute__((target("avx512f"))) float fma_loop_avx512(float seed) {
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_ps(seed + i);
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (long it = 0; it < kFmaIterations; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, acc[i]);
  return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma"))) float fma_loop_avx2(float seed) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(seed + i);
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (long it = 0; it < kFmaIterations; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  }
  alignas(32) float lanes[8];
  __m256 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, acc[i]);
  _mm256_store_ps(lanes, s);
  float t = 0;
  for (float v : lanes) t += v;
  return t;
}

float fma_loop_portable(float seed) {
  float acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = seed + i;
  for (long it = 0; it < kFmaIterations / 16; ++it) {
    for (int i = 0; i < 16; ++i) acc[i] = acc[i] * 0.999999f + 1e-7f;
  }
  float s = 0;
  for (float v : acc) s += v;
  return s;
}

double fma_loop_flops(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return 2.0 * 16 * 16 * kFmaIterations;
    case Isa::kAvx2:
      return 2.0 * 12 * 8 * kFmaIterations;
    case Isa::kPortable:
      break;
  }
  return 2.0 * 16 * (kFmaIterations / 16);
}

float sum_floats(Isa isa, const float* p, size_t n) {
  return isa == Isa::kAvx512 ? sum_avx512(p, n)
         : isa == Isa::kAvx2 ? sum_avx2(p, n)
                             : sum_portable(p, n);
}

}  // namespace

ReadProbe::ReadProbe(size_t buffer_bytes, Isa isa)
    : floats_(std::max<size_t>(buffer_bytes / sizeof(float), 1 << 20) & ~size_t{63}), isa_(isa) {
  data_ = static_cast<float*>(allocate_huge_aligned(floats_ * sizeof(float), 64));
  std::memset(data_, 0, floats_ * sizeof(float));  // every page touched before timing
}

ReadProbe::~ReadProbe() { free_huge_aligned(data_, floats_ * sizeof(float), 64); }

double ReadProbe::read_gbps(ThreadPool* pool, size_t bytes) {
  const size_t n = std::clamp<size_t>(bytes / sizeof(float) & ~size_t{63}, 64, floats_);
  constexpr size_t kChunk = size_t{1} << 18;  // floats per task: 1 MiB
  const int64_t num_tasks = static_cast<int64_t>((n + kChunk - 1) / kChunk);
  std::vector<float> sinks(static_cast<size_t>(num_tasks));
  const size_t start = next_;
  const auto begin = Clock::now();
  parallel_for_contiguous(pool, num_tasks, 1e12, [&](int64_t task) {
    // A range that runs past the ring's end goes on from its start.
    const size_t first = (start + static_cast<size_t>(task) * kChunk) % floats_;
    const size_t len = std::min(kChunk, n - static_cast<size_t>(task) * kChunk);
    const size_t head = std::min(len, floats_ - first);
    sinks[task] = sum_floats(isa_, data_ + first, head) + sum_floats(isa_, data_, len - head);
  });
  const double seconds = std::chrono::duration<double>(Clock::now() - begin).count();
  next_ = (start + n) % floats_;
  volatile float sink = 0;
  for (float s : sinks) sink = sink + s;
  return static_cast<double>(n * sizeof(float)) / seconds / 1e9;
}

void InterleavedRoofline::start(ThreadPool* pool, size_t bytes) {
  probe_gbps_.push_back(probe_.read_gbps(pool, bytes));
}

void InterleavedRoofline::after_step(ThreadPool* pool, size_t bytes, double step_gbps) {
  const double before = probe_gbps_.back();
  probe_gbps_.push_back(probe_.read_gbps(pool, bytes));
  fractions_.push_back(step_gbps / (0.5 * (before + probe_gbps_.back())));
}

double measure_read_bandwidth_gbps(ThreadPool* pool, size_t buffer_bytes, int repeats, Isa isa) {
  const size_t n = buffer_bytes / sizeof(float);
  // The same memory the kernels stream (huge pages where the OS allows): on 4 KiB pages this
  // loop read ~6% less (77 against 82 GB/s here), which would flatter every roofline fraction.
  auto* data = static_cast<float*>(allocate_huge_aligned(n * sizeof(float), 64));
  std::memset(data, 0, n * sizeof(float));    // touch every page before timing
  constexpr size_t kChunk = size_t{1} << 20;  // floats per task: 4 MiB
  const int64_t num_tasks = static_cast<int64_t>((n + kChunk - 1) / kChunk);
  std::vector<float> sinks(num_tasks);
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    const auto start = Clock::now();
    parallel_for(pool, num_tasks, 1e12, [&](int64_t task) {
      const float* p = data + task * kChunk;
      const size_t len = std::min(kChunk, n - task * kChunk);
      sinks[task] = sum_floats(isa, p, len);
    });
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    best = std::max(best, static_cast<double>(n * sizeof(float)) / seconds / 1e9);
  }
  volatile float sink = 0;
  for (float s : sinks) sink = sink + s;
  free_huge_aligned(data, n * sizeof(float), 64);
  return best;
}

double measure_fma_peak_gflops(ThreadPool* pool, int repeats, Isa isa) {
  const int threads = pool ? pool->num_threads() : 1;
  const int64_t num_tasks = 8 * threads;  // handed out one by one: every thread stays busy
  std::vector<float> sinks(num_tasks);
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    const auto start = Clock::now();
    parallel_for(pool, num_tasks, 1e12, [&](int64_t task) {
      const float seed = static_cast<float>(task);
      sinks[task] = isa == Isa::kAvx512 ? fma_loop_avx512(seed)
                    : isa == Isa::kAvx2 ? fma_loop_avx2(seed)
                                        : fma_loop_portable(seed);
    });
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    best = std::max(best, num_tasks * fma_loop_flops(isa) / seconds / 1e9);
  }
  volatile float sink = 0;
  for (float s : sinks) sink = sink + s;
  return best;
}

}  // namespace pagedserve::kernels
