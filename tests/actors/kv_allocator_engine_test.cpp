// The scheduler over each KV allocator (--kv-allocator): the same batch of requests (greedy,
// seeded parallel sampling, beam search) gives exactly the outputs of the paged allocator,
// since only the memory manager differs; every block is back in the pool afterwards. The
// paged run's outputs are themselves pinned against the reference model elsewhere
// (llm_engine_test), so this compares each baseline with an independently checked run.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "actors/llm_engine.h"
#include "tests/actors/engine_test_util.h"

namespace pagedserve::actors {
namespace {

using namespace testing_util;

struct Outcome {
  std::map<uint64_t, std::vector<std::vector<int32_t>>> outputs;  // request -> sequences
  int64_t preemptions = 0;
};

Outcome run_batch(cache::KvAllocatorKind kind, int num_kv_blocks) {
  EngineConfig config = stories_config();
  config.kv_allocator = kind;
  config.num_kv_blocks = num_kv_blocks;
  config.max_model_len = 256;
  LlmEngine engine(config);
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> prompt;
    for (int t = 0; t < 5 + 7 * i; ++t) prompt.push_back(1 + (t * 37 + i * 11) % 500);
    model::SamplingParams params = greedy(20 + 4 * i);
    params.ignore_eos = true;
    if (i == 3) {  // parallel sampling, seeded
      params.temperature = 0.8f;
      params.n = 3;
      params.seed = 42;
    } else if (i == 4) {  // beam search
      params.n = 2;
      params.use_beam_search = true;
    }
    engine.add_request(prompt, params);
  }
  Outcome outcome;
  for (auto& [id, finished] : run_to_completion(engine)) {
    EXPECT_TRUE(finished.finished) << "request " << id;
    for (const CompletionOutput& seq : finished.last.outputs) {
      outcome.outputs[id].push_back(seq.token_ids);
    }
  }
  const cache::KvAllocator& kv = engine.scheduler().kv_allocator();
  EXPECT_EQ(kv.num_free_device_blocks(), kv.num_total_device_blocks());
  EXPECT_EQ(kv.memory_breakdown().free_slots, kv.memory_breakdown().total_slots);
  outcome.preemptions = engine.stats().num_preemptions_recompute;
  return outcome;
}

TEST(KvAllocatorEngine, EveryAllocatorGivesThePagedOutputs) {
  const Outcome paged = run_batch(cache::KvAllocatorKind::kPaged, 256);
  ASSERT_EQ(paged.outputs.size(), 6u);
  for (auto kind : {cache::KvAllocatorKind::kReserveMax, cache::KvAllocatorKind::kReservePow2,
                    cache::KvAllocatorKind::kReserveOracle}) {
    SCOPED_TRACE(cache::kv_allocator_name(kind));
    EXPECT_EQ(run_batch(kind, 256).outputs, paged.outputs);
  }
}

// A pool too small for every region at once: the reserving allocators queue admissions (and
// reserve-max serialises requests) but the outputs do not change.
TEST(KvAllocatorEngine, TightPoolQueuesButKeepsOutputs) {
  const Outcome paged = run_batch(cache::KvAllocatorKind::kPaged, 40);
  for (auto kind : {cache::KvAllocatorKind::kReserveMax, cache::KvAllocatorKind::kReservePow2,
                    cache::KvAllocatorKind::kReserveOracle}) {
    SCOPED_TRACE(cache::kv_allocator_name(kind));
    EXPECT_EQ(run_batch(kind, 48).outputs, paged.outputs);
  }
}

}  // namespace
}  // namespace pagedserve::actors
