// The weight stream of one batch-1 decode step without attention: the 12 layers' q/k/v, o,
// gate/up and down products and the LM head of the 768/12/12/2048/32000 benchmark model, one
// m = 1 matmul_packed call after another (as LlamaModel::forward issues them), for F32, F16 and
// BF16 weights. 438 MB (F32) do not fit in any cache, so every step streams them from DRAM.
// Prints the median step's GB/s for each dtype and its ratio to the read bandwidth measured in
// the same process just before (measure_read_bandwidth_gbps), plus each kind of product's own
// GB/s. Threads: PAGEDSERVE_BENCH_THREADS (default every core); steps: argv[1] (default 40).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "kernels/cpu/machine_probe.h"
#include "kernels/cpu/packed_matmul.h"
#include "kernels/cpu/thread_pool.h"

namespace pagedserve::kernels {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kHidden = 768, kFfn = 2048, kVocab = 32000, kLayers = 12;

int bench_threads() {
  const char* env = std::getenv("PAGEDSERVE_BENCH_THREADS");
  const int n = env ? std::atoi(env) : 0;
  return n > 0 ? n : static_cast<int>(std::thread::hardware_concurrency());
}

// Random small values in `dtype` (values do not change speed).
PackedWeight random_weight(WeightDtype dtype, int n, int k, std::mt19937& rng) {
  std::uniform_int_distribution<uint32_t> bits(0, 0x3ff);
  const size_t count = static_cast<size_t>(n) * k;
  std::vector<unsigned char> raw(count * weight_dtype_size(dtype));
  for (size_t i = 0; i < count; ++i) {
    if (dtype == WeightDtype::kF32) {
      const float v = static_cast<float>(bits(rng)) / 4096.0f - 0.125f;
      std::memcpy(&raw[i * 4], &v, 4);
    } else {
      const uint16_t h = static_cast<uint16_t>(0x3000 | bits(rng));  // small normal F16 / BF16
      std::memcpy(&raw[i * 2], &h, 2);
    }
  }
  return PackedWeight::pack(raw.data(), dtype, n, k);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Layer {
  PackedWeight qkv, o, gate_up, down;
};

void run(WeightDtype dtype, const char* name, ThreadPool& pool, int steps) {
  std::mt19937 rng(7);
  std::vector<Layer> layers(kLayers);
  for (Layer& l : layers) {
    l.qkv = random_weight(dtype, 3 * kHidden, kHidden, rng);
    l.o = random_weight(dtype, kHidden, kHidden, rng);
    l.gate_up = random_weight(dtype, 2 * kFfn, kHidden, rng);
    l.down = random_weight(dtype, kHidden, kFfn, rng);
  }
  const PackedWeight lm_head = random_weight(dtype, kVocab, kHidden, rng);
  double bytes = static_cast<double>(lm_head.weight_bytes());
  for (const Layer& l : layers) {
    bytes += static_cast<double>(l.qkv.weight_bytes() + l.o.weight_bytes() +
                                 l.gate_up.weight_bytes() + l.down.weight_bytes());
  }
  std::vector<float> x(kFfn, 0.01f), qkv(3 * kHidden), h(kHidden), gate_up(2 * kFfn),
      logits(kVocab);
  enum { kQkv, kO, kGateUp, kDown, kLmHead, kKinds };
  const char* kind_names[kKinds] = {"qkv", "o", "gate_up", "down", "lm_head"};
  double kind_bytes[kKinds] = {};
  kind_bytes[kQkv] = kLayers * static_cast<double>(layers[0].qkv.weight_bytes());
  kind_bytes[kO] = kLayers * static_cast<double>(layers[0].o.weight_bytes());
  kind_bytes[kGateUp] = kLayers * static_cast<double>(layers[0].gate_up.weight_bytes());
  kind_bytes[kDown] = kLayers * static_cast<double>(layers[0].down.weight_bytes());
  kind_bytes[kLmHead] = static_cast<double>(lm_head.weight_bytes());
  std::vector<double> step_s, kind_s[kKinds], call_s[kKinds];
  const double bandwidth = measure_read_bandwidth_gbps(&pool);
  for (int step = 0; step < steps; ++step) {
    double kind_t[kKinds] = {};
    const auto timed = [&](int kind, const float* in, const PackedWeight& w, float* out) {
      const auto t0 = Clock::now();
      matmul_packed(in, w, out, 1, &pool);
      const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
      kind_t[kind] += dt;
      call_s[kind].push_back(dt);
    };
    const auto start = Clock::now();
    for (const Layer& l : layers) {
      timed(kQkv, x.data(), l.qkv, qkv.data());
      timed(kO, qkv.data(), l.o, h.data());
      timed(kGateUp, h.data(), l.gate_up, gate_up.data());
      timed(kDown, gate_up.data(), l.down, x.data());
    }
    timed(kLmHead, x.data(), lm_head, logits.data());
    step_s.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    for (int k = 0; k < kKinds; ++k) kind_s[k].push_back(kind_t[k]);
  }
  const double gbps = bytes / median(step_s) / 1e9;
  std::printf(
      "%-5s %6.1f MB/step  %7.3f ms/step  %6.1f GB/s  %5.1f%% of %5.1f GB/s read bandwidth\n", name,
      bytes / 1e6, median(step_s) * 1e3, gbps, 100.0 * gbps / bandwidth, bandwidth);
  // The fastest tenth of each kind's calls: what a quiet machine gives (on a shared machine
  // most steps lose some calls to other processes).
  double quiet_step_s = 0;
  for (int k = 0; k < kKinds; ++k) {
    const double kind_gbps = kind_bytes[k] / median(kind_s[k]) / 1e9;
    std::vector<double> calls = call_s[k];
    std::sort(calls.begin(), calls.end());
    const double p10 = calls[calls.size() / 10];
    const double calls_per_step = static_cast<double>(calls.size()) / steps;
    quiet_step_s += p10 * calls_per_step;
    std::printf("      %-8s %7.3f ms/step  %6.1f GB/s  %5.1f%%   p10 call %7.1f us = %6.1f GB/s\n",
                kind_names[k], median(kind_s[k]) * 1e3, kind_gbps, 100.0 * kind_gbps / bandwidth,
                p10 * 1e6, kind_bytes[k] / calls_per_step / p10 / 1e9);
  }
  std::printf("      p10 calls: %7.3f ms/step  %6.1f GB/s\n", quiet_step_s * 1e3,
              bytes / quiet_step_s / 1e9);
}

}  // namespace
}  // namespace pagedserve::kernels

int main(int argc, char** argv) {
  using namespace pagedserve::kernels;
  const int steps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 40;
  ThreadPool pool(bench_threads());
  std::printf("threads: %d, isa: %s\n", pool.num_threads(), isa_name(best_isa()));
  run(WeightDtype::kF32, "f32", pool, steps);
  run(WeightDtype::kF16, "f16", pool, steps);
  run(WeightDtype::kBF16, "bf16", pool, steps);
  return 0;
}
