// paged_attention on the benchmark model's attention shape (12 heads, head_dim 64, 16-token
// blocks, scattered block tables): decode batches at 512, 2048 and 4096 tokens of context,
// reported as GB/s of K/V read (the roofline of decode attention), and a 512-token prefill as
// GFLOP/s. One sequence's K/V (3-13 MB at batch 1) stays in a large last-level cache between
// iterations, so batch-1 figures are above what a decode step that also streams its weights
// gets from memory.
// Each case runs on the portable loops and on the best ISA this CPU has, on a pool of
// PAGEDSERVE_BENCH_THREADS threads (default: every core), with a float32 cache and, on the best
// ISA, float16, bfloat16 and int8 caches (GB/s counts K/V at their stored size, int8's row
// scales included; time per call is the figure to compare between dtypes). The cache is
// allocated as the executor's is (2 MiB aligned, transparent huge pages).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "kernels/cpu/huge_page_allocator.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/thread_pool.h"

namespace pagedserve::kernels {
namespace {

constexpr int kHeads = 12;
constexpr int kHeadDim = 64;
constexpr int kBlockSize = 16;

ThreadPool& pool() {
  const char* env = std::getenv("PAGEDSERVE_BENCH_THREADS");
  static ThreadPool p(env ? std::atoi(env) : 0);
  return p;
}

// Arguments: sequences, context length, query tokens per sequence (1 = decode), isa, KV dtype.
void BM_PagedAttention(benchmark::State& state) {
  const int num_seqs = static_cast<int>(state.range(0));
  const int context = static_cast<int>(state.range(1));
  const int q_len = static_cast<int>(state.range(2));
  const auto isa = static_cast<Isa>(state.range(3));
  const auto dtype = static_cast<KvDtype>(state.range(4));
  if (!isa_supported(isa)) {
    state.SkipWithError("ISA not supported on this CPU");
    return;
  }
  const int blocks_per_seq = (context + kBlockSize - 1) / kBlockSize;
  const int num_blocks = num_seqs * blocks_per_seq;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const size_t cache_elements = static_cast<size_t>(num_blocks) * kHeads * kBlockSize * kHeadDim;
  const size_t element_bytes = kv_dtype_size(dtype);
  std::vector<char, HugePageAllocator<char>> keys(cache_elements * element_bytes);
  std::vector<char, HugePageAllocator<char>> values(cache_elements * element_bytes);
  const size_t rows = cache_elements / kHeadDim;  // int8's scales: one per (token, head)
  std::vector<float, HugePageAllocator<float>> key_scales(rows), value_scales(rows);
  for (std::vector<char, HugePageAllocator<char>>* cache : {&keys, &values}) {
    for (size_t i = 0; i < cache_elements; ++i) {
      const float x = dist(rng);
      if (dtype == KvDtype::kInt8) {
        reinterpret_cast<int8_t*>(cache->data())[i] = static_cast<int8_t>(x * 127.0f);
      } else if (dtype == KvDtype::kFloat32) {
        reinterpret_cast<float*>(cache->data())[i] = x;
      } else {
        reinterpret_cast<uint16_t*>(cache->data())[i] =
            dtype == KvDtype::kFloat16 ? f32_to_f16(x) : f32_to_bf16(x);
      }
    }
  }
  std::vector<int32_t> tables(num_blocks);
  std::iota(tables.begin(), tables.end(), 0);
  std::shuffle(tables.begin(), tables.end(), rng);  // blocks scattered over the pool
  std::vector<int32_t> starts(num_seqs + 1), seq_lens(num_seqs, context);
  for (int s = 0; s <= num_seqs; ++s) starts[s] = s * q_len;
  std::vector<float> query(static_cast<size_t>(num_seqs) * q_len * kHeads * kHeadDim);
  for (float& v : query) v = dist(rng);
  std::vector<float> out(query.size());

  PagedAttentionParams p;
  p.query = query.data();
  p.out = out.data();
  p.key_cache = keys.data();
  p.value_cache = values.data();
  p.query_start_loc = starts.data();
  p.seq_lens = seq_lens.data();
  p.block_tables = tables.data();
  p.num_seqs = num_seqs;
  p.max_blocks_per_seq = blocks_per_seq;
  p.num_heads = kHeads;
  p.num_kv_heads = kHeads;
  p.head_dim = kHeadDim;
  p.block_size = kBlockSize;
  p.scale = 0.125f;
  p.kv_dtype = dtype;
  if (dtype == KvDtype::kInt8) {
    std::fill(key_scales.begin(), key_scales.end(), 1.0f / 127.0f);
    std::fill(value_scales.begin(), value_scales.end(), 1.0f / 127.0f);
    p.key_scales = key_scales.data();
    p.value_scales = value_scales.data();
  }
  for (auto _ : state) {
    paged_attention(p, &pool(), isa);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  // K/V bytes each query token reads (its causal prefix), and 4 FLOPs per (position, dim).
  double positions = 0;
  for (int i = 0; i < q_len; ++i) positions += context - q_len + i + 1;
  positions *= num_seqs;
  const double bytes =
      positions * kHeads * 2 *
      (kHeadDim * static_cast<double>(element_bytes) + kv_dtype_row_scale_bytes(dtype));
  state.counters["GB/s"] =
      benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] = benchmark::Counter(4.0 * positions * kHeads * kHeadDim * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

void register_all() {
  const int cases[][3] = {{1, 512, 1}, {1, 2048, 1}, {1, 4096, 1}, {32, 512, 1}, {64, 512, 1}, {1, 512, 512}};
  const auto add = [](const int(&c)[3], Isa isa, KvDtype dtype) {
    benchmark::RegisterBenchmark("BM_PagedAttention", BM_PagedAttention)
        ->Args({c[0], c[1], c[2], static_cast<int>(isa), static_cast<int>(dtype)})
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  };
  for (const auto& c : cases) {
    if (best_isa() != Isa::kPortable) add(c, Isa::kPortable, KvDtype::kFloat32);
    for (KvDtype dtype :
         {KvDtype::kFloat32, KvDtype::kFloat16, KvDtype::kBFloat16, KvDtype::kInt8}) {
      add(c, best_isa(), dtype);
    }
  }
}

}  // namespace
}  // namespace pagedserve::kernels

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  pagedserve::kernels::register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
