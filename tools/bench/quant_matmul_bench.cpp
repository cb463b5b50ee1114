// matmul_quantized on the projection shapes of the 768/12/32000 benchmark model and of
// Llama-3.2-1B (hidden 2048, 32/8 heads, intermediate 8192, vocabulary 128256), for decode
// (m = 1, 32) and a 512-token prefill, against matmul_packed with F16 weights on the same shape
// in the same process. A plain table, one line per (shape, type, m):
//   GB/s     the weight's quantized (ggml) bytes over the time, and for m = 1 its share of the
//            read bandwidth measure_read_bandwidth_gbps measures on the same threads right
//            after (weights that fit the last-level cache exceed 100%);
//   GFLOP/s  2mnk over the time;
//   x F16    the F16 kernel's time over the quantized kernel's (above 1: faster).
// Times are the best of repeats (at least 3 and 0.3 s). The environment picks the run:
//   PAGEDSERVE_BENCH_THREADS (default 2), PAGEDSERVE_BENCH_TYPES (e.g. "Q8_0,Q4_K"; default
//   all), PAGEDSERVE_BENCH_M (e.g. "1,512"; default 1,32,512), PAGEDSERVE_BENCH_MODELS ("small",
//   "llama"; default both), PAGEDSERVE_BENCH_LM_HEAD_PREFILL=1 to include m = 512 on the LM
//   heads (skipped by default: prefill computes logits for the last token only).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cpu/machine_probe.h"
#include "kernels/cpu/packed_matmul.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/thread_pool.h"

namespace pagedserve::kernels {
namespace {

struct Shape {
  const char* model;
  const char* name;
  int n, k;
};

const Shape kShapes[] = {
    {"small", "qkv", 2304, 768},      {"small", "o", 768, 768},
    {"small", "gate_up", 4096, 768},  {"small", "down", 768, 2048},
    {"small", "lm_head", 32000, 768}, {"llama", "qkv", 3072, 2048},
    {"llama", "o", 2048, 2048},       {"llama", "gate_up", 16384, 2048},
    {"llama", "down", 2048, 8192},    {"llama", "lm_head", 128256, 2048},
};

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

std::string loadavg() {
  std::FILE* f = std::fopen("/proc/loadavg", "r");
  char buf[64] = {};
  if (f != nullptr) {
    if (std::fgets(buf, sizeof buf, f) == nullptr) buf[0] = '\0';
    std::fclose(f);
  }
  std::string s(buf);
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

// Best-of-repeats seconds of fn().
template <typename Fn>
double best_seconds(Fn&& fn) {
  using Clock = std::chrono::steady_clock;
  fn();  // warm-up: scratch, pages, caches
  double best = 1e30, total = 0;
  for (int rep = 0; rep < 3 || total < 0.3; ++rep) {
    const auto t0 = Clock::now();
    fn();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::min(best, s);
    total += s;
    if (rep >= 200) break;
  }
  return best;
}

std::vector<float> random_floats(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// n rows of ggml blocks: 16 distinct quantized random rows repeated (values do not change speed).
QuantizedWeight quantized_weight(QuantType type, int n, int k) {
  constexpr int kDistinct = 16;
  const std::vector<float> w = random_floats(static_cast<size_t>(kDistinct) * k, 2, 0.05f);
  const size_t row_bytes = quant_row_bytes(type, k);
  std::vector<unsigned char> distinct(kDistinct * row_bytes);
  for (int r = 0; r < kDistinct; ++r) {
    quantize_row(type, &w[static_cast<size_t>(r) * k], &distinct[r * row_bytes], k);
  }
  std::vector<unsigned char> rows(static_cast<size_t>(n) * row_bytes);
  for (int r = 0; r < n; ++r) {
    std::memcpy(&rows[r * row_bytes], &distinct[(r % kDistinct) * row_bytes], row_bytes);
  }
  return QuantizedWeight::pack(rows.data(), type, n, k);
}

PackedWeight f16_weight(int n, int k) {
  std::vector<uint16_t> bits(static_cast<size_t>(n) * k);
  std::mt19937 rng(3);
  for (uint16_t& b : bits) b = static_cast<uint16_t>(0x2000 | (rng() & 0x83ff));  // small normals
  return PackedWeight::pack(bits.data(), WeightDtype::kF16, n, k);
}

}  // namespace
}  // namespace pagedserve::kernels

int main() {
  using namespace pagedserve::kernels;
  const int threads = std::atoi(env_or("PAGEDSERVE_BENCH_THREADS", "2").c_str());
  const std::vector<std::string> type_names =
      split(env_or("PAGEDSERVE_BENCH_TYPES", "Q8_0,Q4_K,Q6_K,Q4_0,Q5_0,Q5_1,Q5_K"));
  std::vector<int> ms;
  for (const std::string& m : split(env_or("PAGEDSERVE_BENCH_M", "1,32,512"))) {
    ms.push_back(std::atoi(m.c_str()));
  }
  const std::string models = env_or("PAGEDSERVE_BENCH_MODELS", "small,llama");
  const bool lm_head_prefill = env_or("PAGEDSERVE_BENCH_LM_HEAD_PREFILL", "0") == "1";

  ThreadPool pool(threads);
  std::printf("threads %d, isa %s, load average at start: %s\n", threads, isa_name(best_isa()),
              loadavg().c_str());
  const double bandwidth = measure_read_bandwidth_gbps(&pool);
  std::printf("measured read bandwidth: %.1f GB/s\n\n", bandwidth);
  std::printf("%-6s %-8s %6s %5s %-5s %4s %10s %8s %7s %9s %9s %7s\n", "model", "proj", "n", "k",
              "type", "m", "time_us", "GB/s", "%bw", "GFLOP/s", "F16_GF/s", "x F16");

  for (const Shape& s : kShapes) {
    if (models.find(s.model) == std::string::npos) continue;
    const bool lm_head = std::strcmp(s.name, "lm_head") == 0;
    const int max_m = *std::max_element(ms.begin(), ms.end());
    const std::vector<float> x = random_floats(static_cast<size_t>(max_m) * s.k, 1, 1.0f);
    std::vector<float> out(static_cast<size_t>(max_m) * s.n);
    // The F16 baseline per m, on the same shape.
    std::vector<double> f16_seconds(ms.size(), 0.0);
    {
      const PackedWeight f16 = f16_weight(s.n, s.k);
      for (size_t i = 0; i < ms.size(); ++i) {
        if (ms[i] >= 512 && lm_head && !lm_head_prefill) continue;
        f16_seconds[i] =
            best_seconds([&] { matmul_packed(x.data(), f16, out.data(), ms[i], &pool); });
      }
    }
    for (const std::string& name : type_names) {
      const std::optional<QuantType> type = parse_quant_type(name);
      if (!type) {
        std::printf("unknown type %s\n", name.c_str());
        continue;
      }
      const QuantizedWeight w = quantized_weight(*type, s.n, s.k);
      for (size_t i = 0; i < ms.size(); ++i) {
        const int m = ms[i];
        if (m >= 512 && lm_head && !lm_head_prefill) continue;
        const double sec =
            best_seconds([&] { matmul_quantized(x.data(), w, out.data(), m, s.n, &pool); });
        const double gbs = w.weight_bytes() / sec * 1e-9;
        const double flops = 2.0 * m * s.n * s.k;
        char share[16] = "";
        if (m == 1) {
          // The bandwidth again, right after: other work on the machine moves it.
          const double now = measure_read_bandwidth_gbps(&pool, size_t{1} << 30, 3);
          std::snprintf(share, sizeof share, "%.0f%%", 100.0 * gbs / std::max(now, 1e-9));
        }
        std::printf("%-6s %-8s %6d %5d %-5s %4d %10.1f %8.1f %7s %9.1f %9.1f %7.2f\n", s.model,
                    s.name, s.n, s.k, name.c_str(), m, sec * 1e6, gbs, share, flops / sec * 1e-9,
                    flops / f16_seconds[i] * 1e-9, f16_seconds[i] / sec);
        std::fflush(stdout);
      }
    }
  }
  std::printf("\nload average at end: %s\n", loadavg().c_str());
  return 0;
}
