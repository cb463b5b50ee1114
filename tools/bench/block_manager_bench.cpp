// Block manager throughput: chained hashing of one block, allocate+free of prompts (prefix
// cache missing, hitting, and off), decode appends, fork, and a swap round trip. Items are
// operations (or blocks, where named), so items_per_second reads as operations per second.
#include <benchmark/benchmark.h>

#include <numeric>
#include <vector>

#include "cache/block_hash.h"
#include "cache/block_manager.h"

namespace pagedserve::cache {
namespace {

std::vector<int32_t> make_prompt(int n, int32_t first) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

BlockManagerConfig bench_config(bool caching) {
  BlockManagerConfig c;
  c.block_size = 16;
  c.num_device_blocks = 8192;
  c.num_cpu_blocks = 8192;
  c.enable_prefix_caching = caching;
  return c;
}

void BM_HashBlock16(benchmark::State& state) {
  const std::vector<int32_t> tokens = make_prompt(16, 7);
  BlockHash parent = kRootBlockHash;
  for (auto _ : state) {
    parent = hash_block(parent, tokens);
    benchmark::DoNotOptimize(parent);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * 16 * sizeof(int32_t));
}
BENCHMARK(BM_HashBlock16);

// Every prompt is new (prompt[0] changes): caching on hashes all full blocks, publishes them
// and, once the pool is full of cached-free blocks, evicts as many as it allocates.
void BM_AllocateFreeMiss(benchmark::State& state) {
  const int len = static_cast<int>(state.range(0));
  const bool caching = state.range(1) != 0;
  BlockManager bm(bench_config(caching));
  std::vector<int32_t> prompt = make_prompt(len, 0);
  SeqId id = 0;
  for (auto _ : state) {
    prompt[0] = static_cast<int32_t>(id);
    bm.allocate(id, prompt);
    bm.free(id);
    ++id;
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["blocks/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * ((len + 15) / 16), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_AllocateFreeMiss)->ArgsProduct({{128, 1024}, {0, 1}});

// The same prompt again and again: all but the last block come from the prefix cache.
void BM_AllocateFreeHit(benchmark::State& state) {
  const int len = static_cast<int>(state.range(0));
  BlockManager bm(bench_config(true));
  const std::vector<int32_t> prompt = make_prompt(len, 0);
  bm.allocate(0, prompt);
  SeqId id = 1;
  for (auto _ : state) {
    benchmark::DoNotOptimize(bm.allocate(id, prompt).num_cached_tokens);
    bm.free(id);
    ++id;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_AllocateFreeHit)->Arg(128)->Arg(1024);

// can_allocate then allocate, as the scheduler calls them (the prompt is hashed once).
void BM_CanAllocateThenAllocate(benchmark::State& state) {
  const int len = static_cast<int>(state.range(0));
  BlockManager bm(bench_config(true));
  std::vector<int32_t> prompt = make_prompt(len, 0);
  SeqId id = 0;
  for (auto _ : state) {
    prompt[0] = static_cast<int32_t>(id);
    if (bm.can_allocate(prompt)) bm.allocate(id, prompt);
    bm.free(id);
    ++id;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_CanAllocateThenAllocate)->Arg(1024);

// Decode: 256 running sequences append one token each per "step"; a block fills (and is
// hashed) every 16th append. Sequences restart after 512 tokens.
void BM_AppendToken(benchmark::State& state) {
  const bool caching = state.range(0) != 0;
  BlockManager bm(bench_config(caching));
  constexpr int kSeqs = 256;
  for (SeqId s = 0; s < kSeqs; ++s) bm.allocate(s, make_prompt(17, static_cast<int32_t>(s) << 8));
  int32_t token = 0;
  SeqId s = 0;
  for (auto _ : state) {
    if (bm.num_tokens(s) >= 512) {
      state.PauseTiming();
      bm.free(s);
      bm.allocate(s, make_prompt(17, token));
      state.ResumeTiming();
    }
    benchmark::DoNotOptimize(bm.append_token(s, ++token));
    s = (s + 1) % kSeqs;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_AppendToken)->Arg(0)->Arg(1);

// Parallel sampling: fork a 1024-token sequence, one copy-on-write append, free the child.
void BM_ForkAppendFree(benchmark::State& state) {
  BlockManager bm(bench_config(true));
  bm.allocate(0, make_prompt(1000, 0));
  SeqId child = 1;
  for (auto _ : state) {
    bm.fork(0, child);
    benchmark::DoNotOptimize(bm.append_token(child, 5));
    bm.free(child);
    ++child;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ForkAppendFree);

// Swap a 1024-token sequence out and back in (64 blocks each way).
void BM_SwapOutIn(benchmark::State& state) {
  BlockManager bm(bench_config(false));
  bm.allocate(0, make_prompt(1024, 0));
  for (auto _ : state) {
    benchmark::DoNotOptimize(bm.swap_out(0));
    benchmark::DoNotOptimize(bm.swap_in(0));
  }
  state.SetItemsProcessed(state.iterations() * 2);
}
BENCHMARK(BM_SwapOutIn);

}  // namespace
}  // namespace pagedserve::cache

BENCHMARK_MAIN();
