// The weight stream of one batch-1 decode step with quantized weights, without attention: each
// layer's q/k/v, o, gate/up and down products and the LM head, m = 1, one matmul_quantized call
// per GGUF tensor (as LinearWeight::forward issues them: q, k and v are three calls into one
// output row, gate and up two), then the same step with each stack as one
// matmul_quantized_stacked call. Shapes: Llama-3.2-1B (hidden 2048, 16 layers, 32/8 heads of
// 64, ffn 8192, vocabulary 128256) or the 768/12/32000 benchmark model. Types: "Q8_0" (every
// tensor Q8_0) or "Q4_K_M" (llama.cpp's mix: Q4_K, with Q6_K attn_v and ffn_down in the
// use_more_bits layers and a Q6_K LM head). Prints the median step's GB/s (quantized bytes)
// against the read bandwidth measured in the same process, and each product's GB/s.
// Environment: PAGEDSERVE_BENCH_THREADS (default 2), PAGEDSERVE_BENCH_MODELS ("llama,small"),
// PAGEDSERVE_BENCH_TYPES ("Q8_0,Q4_K_M"); argv[1]: steps (default 30).
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
#include "kernels/cpu/quant.h"
#include "kernels/cpu/thread_pool.h"

namespace pagedserve::kernels {
namespace {

using Clock = std::chrono::steady_clock;

struct ModelShape {
  const char* name;
  int hidden, layers, heads, kv_heads, head_dim, ffn, vocab;
};
const ModelShape kModels[] = {{"llama", 2048, 16, 32, 8, 64, 8192, 128256},
                              {"small", 768, 12, 12, 12, 64, 2048, 32000}};

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

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// n rows: 16 distinct quantized random rows repeated (values do not change speed).
QuantizedWeight quantized_weight(QuantType type, int n, int k) {
  constexpr int kDistinct = 16;
  std::mt19937 rng(static_cast<uint32_t>(n * 31 + k));
  std::normal_distribution<float> dist(0.0f, 0.05f);
  std::vector<float> w(static_cast<size_t>(kDistinct) * k);
  for (float& v : w) v = dist(rng);
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

// One product: its runs side by side in one output row (LinearWeight's quantized form).
struct Product {
  std::vector<QuantizedWeight> runs;
  int rows = 0;
  size_t bytes() const {
    size_t b = 0;
    for (const QuantizedWeight& w : runs) b += w.weight_bytes();
    return b;
  }
  void forward(const float* x, float* out, ThreadPool* pool, bool stacked) const {
    if (stacked) {
      matmul_quantized_stacked(x, runs, out, 1, rows, pool);
      return;
    }
    int first = 0;
    for (const QuantizedWeight& w : runs) {
      matmul_quantized(x, w, out + first, 1, rows, pool);
      first += w.rows();
    }
  }
};

Product product(std::initializer_list<std::pair<QuantType, int>> runs, int k) {
  Product p;
  for (const auto& [type, n] : runs) {
    p.runs.push_back(quantized_weight(type, n, k));
    p.rows += n;
  }
  return p;
}

// llama.cpp's use_more_bits(i, n).
bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

void run(const ModelShape& s, const std::string& mix, ThreadPool& pool, int steps) {
  const bool q4km = mix == "Q4_K_M";
  const QuantType base = q4km ? QuantType::kQ4_K : QuantType::kQ8_0;
  const int q = s.heads * s.head_dim, kv = s.kv_heads * s.head_dim;
  enum { kQkv, kO, kGateUp, kDown, kLmHead, kKinds };
  const char* kind_names[kKinds] = {"qkv", "o", "gate_up", "down", "lm_head"};
  std::vector<std::vector<Product>> layers(s.layers);
  for (int l = 0; l < s.layers; ++l) {
    const QuantType more = q4km && use_more_bits(l, s.layers) ? QuantType::kQ6_K : base;
    layers[l].push_back(product({{base, q}, {base, kv}, {more, kv}}, s.hidden));
    layers[l].push_back(product({{base, s.hidden}}, q));
    layers[l].push_back(product({{base, s.ffn}, {base, s.ffn}}, s.hidden));
    layers[l].push_back(product({{more, s.hidden}}, s.ffn));
  }
  const Product lm_head = product({{q4km ? QuantType::kQ6_K : base, s.vocab}}, s.hidden);
  double kind_bytes[kKinds] = {};
  for (const auto& layer : layers) {
    for (int k = 0; k < 4; ++k) kind_bytes[k] += static_cast<double>(layer[k].bytes());
  }
  kind_bytes[kLmHead] = static_cast<double>(lm_head.bytes());
  double bytes = 0;
  for (double b : kind_bytes) bytes += b;
  std::vector<float> x(std::max(s.ffn, q), 0.01f), out(std::max(2 * s.ffn, s.vocab));
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (float& v : x) v = dist(rng);

  for (const bool stacked : {false, true}) {
    std::vector<double> step_s, kind_s[kKinds], call_s[kKinds];
    const double bandwidth = measure_read_bandwidth_gbps(&pool, size_t{1} << 30, 3);
    // A probe of the step's bytes around every step, as the machine's bandwidth moves during
    // a run.
    InterleavedRoofline interleaved;
    for (int step = -2; step < steps; ++step) {  // two warm-up steps
      double kind_t[kKinds] = {};
      const auto timed = [&](int kind, const Product& p) {
        const auto t0 = Clock::now();
        p.forward(x.data(), out.data(), &pool, stacked);
        const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
        kind_t[kind] += dt;
        if (step >= 0) call_s[kind].push_back(dt);
      };
      const auto start = Clock::now();
      for (const auto& layer : layers) {
        for (int k = 0; k < 4; ++k) timed(k, layer[k]);
      }
      timed(kLmHead, lm_head);
      const double step_seconds = std::chrono::duration<double>(Clock::now() - start).count();
      if (step == -1) interleaved.start(&pool, static_cast<size_t>(bytes));
      if (step < 0) continue;
      step_s.push_back(step_seconds);
      interleaved.after_step(&pool, static_cast<size_t>(bytes), bytes / step_seconds / 1e9);
      for (int k = 0; k < kKinds; ++k) kind_s[k].push_back(kind_t[k]);
    }
    const double gbps = bytes / median(step_s) / 1e9;
    std::printf("%-5s %-6s %-7s %7.1f MB/step %7.3f ms/step %6.1f GB/s %5.1f%% of %5.1f GB/s\n",
                s.name, mix.c_str(), stacked ? "stacked" : "per-run", bytes / 1e6,
                median(step_s) * 1e3, gbps, 100.0 * gbps / bandwidth, bandwidth);
    std::printf(
        "      against the interleaved probes (median %.1f GB/s): %.1f%% (median of steps)\n",
        median(interleaved.probe_gbps()), 100.0 * median(interleaved.fractions()));
    for (int k = 0; k < kKinds; ++k) {
      const double kind_gbps = kind_bytes[k] / median(kind_s[k]) / 1e9;
      std::vector<double> calls = call_s[k];
      std::sort(calls.begin(), calls.end());
      const double calls_per_step = static_cast<double>(calls.size()) / steps;
      const double p10 = calls[calls.size() / 10];
      std::printf("      %-8s %7.3f ms/step %6.1f GB/s %5.1f%%  p10 call %7.1f us = %6.1f GB/s\n",
                  kind_names[k], median(kind_s[k]) * 1e3, kind_gbps, 100.0 * kind_gbps / bandwidth,
                  p10 * 1e6, kind_bytes[k] / calls_per_step / p10 / 1e9);
    }
    std::fflush(stdout);
  }
}

}  // namespace
}  // namespace pagedserve::kernels

int main(int argc, char** argv) {
  using namespace pagedserve::kernels;
  const int steps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 30;
  const int threads = std::atoi(env_or("PAGEDSERVE_BENCH_THREADS", "2").c_str());
  ThreadPool pool(threads);
  std::printf("threads %d, isa %s\n", pool.num_threads(), isa_name(best_isa()));
  const std::string models = env_or("PAGEDSERVE_BENCH_MODELS", "llama,small");
  for (const ModelShape& s : kModels) {
    if (models.find(s.name) == std::string::npos) continue;
    for (const std::string& mix : split(env_or("PAGEDSERVE_BENCH_TYPES", "Q8_0,Q4_K_M"))) {
      run(s, mix, pool, steps);
    }
  }
  return 0;
}
