// matmul_packed (F32, F16, BF16 weights) against OpenBLAS sgemm/sgemv on the shapes of the
// 768/12/12/2048/32000 benchmark model: decode (m = 1), batched decode (m = 32, 64) and a
// 512-token prefill. Counters: GFLOP/s (2mnk) and GB/s (weights, x and out once). After the
// runs a table prints each of our kernels' ratio to OpenBLAS f32 on the same shape, measured
// in this process. Both sides use PAGEDSERVE_BENCH_THREADS threads (default: every core).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu/packed_matmul.h"
#include "kernels/cpu/thread_pool.h"

#ifdef PAGEDSERVE_HAVE_OPENBLAS
#include <cblas.h>
extern "C" void openblas_set_num_threads(int num_threads);
#endif

namespace pagedserve::kernels {
namespace {

int bench_threads() {
  const char* env = std::getenv("PAGEDSERVE_BENCH_THREADS");
  const int n = env ? std::atoi(env) : 0;
  return n > 0 ? n : static_cast<int>(std::thread::hardware_concurrency());
}

ThreadPool& pool() {
  static ThreadPool p(bench_threads());
  return p;
}

std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// The weight's bytes in `dtype` (16-bit values: the upper halves of the floats, i.e. BF16 by
// truncation, or F16 bit patterns of small normal numbers; values do not change speed).
std::vector<unsigned char> weight_bytes(const std::vector<float>& w, WeightDtype dtype) {
  std::vector<unsigned char> out(w.size() * weight_dtype_size(dtype));
  for (size_t i = 0; i < w.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &w[i], 4);
    if (dtype == WeightDtype::kF32) {
      std::memcpy(&out[i * 4], &bits, 4);
    } else {
      const uint16_t h = dtype == WeightDtype::kBF16
                             ? static_cast<uint16_t>(bits >> 16)
                             : static_cast<uint16_t>(0x3000 | (bits & 0x83ff));  // |v| < 1
      std::memcpy(&out[i * 2], &h, 2);
    }
  }
  return out;
}

void set_counters(benchmark::State& state, int m, int n, int k, size_t w_bytes) {
  const double flops = 2.0 * m * n * k;
  const double bytes = static_cast<double>(w_bytes) + 4.0 * (double{1} * m * k + double{1} * m * n);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GB/s"] =
      benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Ours(benchmark::State& state) {
  const int m = static_cast<int>(state.range(0));
  const int n = static_cast<int>(state.range(1));
  const int k = static_cast<int>(state.range(2));
  const auto dtype = static_cast<WeightDtype>(state.range(3));
  const auto x = random_values(static_cast<size_t>(m) * k, 1);
  const auto w = random_values(static_cast<size_t>(n) * k, 2);
  const PackedWeight packed = PackedWeight::pack(weight_bytes(w, dtype).data(), dtype, n, k);
  std::vector<float> out(static_cast<size_t>(m) * n);
  for (auto _ : state) {
    matmul_packed(x.data(), packed, out.data(), m, &pool());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, m, n, k, packed.weight_bytes());
}

#ifdef PAGEDSERVE_HAVE_OPENBLAS
void BM_OpenBlas(benchmark::State& state) {
  const int m = static_cast<int>(state.range(0));
  const int n = static_cast<int>(state.range(1));
  const int k = static_cast<int>(state.range(2));
  openblas_set_num_threads(bench_threads());
  const auto x = random_values(static_cast<size_t>(m) * k, 1);
  const auto w = random_values(static_cast<size_t>(n) * k, 2);
  std::vector<float> out(static_cast<size_t>(m) * n);
  for (auto _ : state) {
    if (m == 1) {
      cblas_sgemv(CblasRowMajor, CblasNoTrans, n, k, 1.0f, w.data(), k, x.data(), 1, 0.0f,
                  out.data(), 1);
    } else {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, x.data(), k, w.data(), k,
                  0.0f, out.data(), n);
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, m, n, k, w.size() * sizeof(float));
}
#endif

struct Shape {
  int m, n, k;
};
// qkv, o, gate+up and down projections and the LM head of the benchmark model.
const Shape kShapes[] = {{1, 2304, 768},   {1, 768, 768},   {1, 4096, 768},   {1, 768, 2048},
                         {1, 32000, 768},  {32, 2304, 768}, {32, 4096, 768},  {32, 768, 2048},
                         {64, 4096, 768},  {64, 768, 2048}, {512, 2304, 768}, {512, 4096, 768},
                         {512, 768, 2048}, {512, 768, 768}};

void register_benchmarks() {
  for (const Shape& s : kShapes) {
    for (int dtype = 0; dtype < 3; ++dtype) {
      benchmark::RegisterBenchmark("BM_Ours", BM_Ours)
          ->Args({s.m, s.n, s.k, dtype})
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
    }
#ifdef PAGEDSERVE_HAVE_OPENBLAS
    benchmark::RegisterBenchmark("BM_OpenBlas", BM_OpenBlas)
        ->Args({s.m, s.n, s.k})
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
#endif
  }
}

// Keeps every run's GFLOP/s so the ratio table can be printed after the console report.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      if (run.run_type != Run::RT_Iteration)
        continue;  // skip aggregates (medians via --repetitions)
      auto it = run.counters.find("GFLOP/s");
      if (it != run.counters.end()) gflops_[run.benchmark_name()].push_back(it->second.value);
    }
  }
  void print_ratios() const {
    std::printf("\nratio to OpenBLAS f32 (GFLOP/s ours / theirs, median of repetitions):\n");
    std::printf("%-18s %8s %8s %8s %10s\n", "m/n/k", "f32", "f16", "bf16", "openblas");
    for (const Shape& s : kShapes) {
      const std::string shape =
          std::to_string(s.m) + "/" + std::to_string(s.n) + "/" + std::to_string(s.k);
      const double theirs = median_of("BM_OpenBlas/" + shape + "/real_time");
      std::printf("%-18s", shape.c_str());
      for (int dtype = 0; dtype < 3; ++dtype) {
        const double ours =
            median_of("BM_Ours/" + shape + "/" + std::to_string(dtype) + "/real_time");
        std::printf(" %8.2f", theirs > 0 ? ours / theirs : 0.0);
      }
      std::printf(" %8.1f GF\n", theirs);
    }
  }

 private:
  double median_of(const std::string& name) const {
    auto it = gflops_.find(name);
    if (it == gflops_.end() || it->second.empty()) return 0.0;
    std::vector<double> v = it->second;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  }
  std::map<std::string, std::vector<double>> gflops_;
};

}  // namespace
}  // namespace pagedserve::kernels

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  pagedserve::kernels::register_benchmarks();
  std::printf("threads: %d, isa: %s\n", pagedserve::kernels::bench_threads(),
              pagedserve::kernels::isa_name(pagedserve::kernels::best_isa()));
  pagedserve::kernels::RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.print_ratios();
  benchmark::Shutdown();
  return 0;
}
