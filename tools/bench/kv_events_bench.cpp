// KV-cache events' cost on the prefix-cache actor's hot path: the block manager workloads that
// publish blocks (new prompts that evict, decode appends that fill blocks), without a recorder
// (arg 0) and with one drained every iteration as the actor drains it after each op list (arg
// 1). The ratio of the two items_per_second is the recording overhead; encoding and sending run
// on the publisher's own thread (net/kv_events) and are not in it.
#include <benchmark/benchmark.h>

#include <numeric>
#include <vector>

#include "cache/block_manager.h"
#include "cache/kv_cache_events.h"

namespace pagedserve::cache {
namespace {

std::vector<int32_t> make_prompt(int n, int32_t first) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

BlockManagerConfig bench_config() {
  BlockManagerConfig c;
  c.block_size = 16;
  c.num_device_blocks = 8192;
  c.num_cpu_blocks = 0;
  return c;
}

// New 1024-token prompts: 64 blocks stored per allocate and, once the pool is full of
// cached-free blocks, 64 evicted.
void BM_EventsAllocateFreeMiss(benchmark::State& state) {
  const bool events = state.range(0) != 0;
  BlockManager bm(bench_config());
  KvEventRecorder recorder;
  if (events) bm.set_event_recorder(&recorder);
  std::vector<int32_t> prompt = make_prompt(1024, 0);
  SeqId id = 0;
  for (auto _ : state) {
    prompt[0] = static_cast<int32_t>(id);
    bm.allocate(id, prompt);
    bm.free(id);
    if (events) benchmark::DoNotOptimize(recorder.take());
    ++id;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_EventsAllocateFreeMiss)->Arg(0)->Arg(1);

// Decode: 256 sequences append in turn; every 16th append fills and stores a block.
void BM_EventsAppendToken(benchmark::State& state) {
  const bool events = state.range(0) != 0;
  BlockManager bm(bench_config());
  KvEventRecorder recorder;
  if (events) bm.set_event_recorder(&recorder);
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
    // One op list per step of all the sequences: drain once per 256 appends.
    if (events && s == 0) benchmark::DoNotOptimize(recorder.take());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_EventsAppendToken)->Arg(0)->Arg(1);

}  // namespace
}  // namespace pagedserve::cache

BENCHMARK_MAIN();
