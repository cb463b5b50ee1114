// run_sim: the replay loop's virtual clock and latency arithmetic against hand computations,
// and the reserving allocators' admission limit visible in the batch size.
#include "tools/paper/sim_run.h"

#include <gtest/gtest.h>

namespace pagedserve::paper {
namespace {

// One second per step whatever the batch: step counts become times.
actors::SimProfile unit_profile(int64_t kv_tokens) {
  actors::SimProfile p;
  p.step_overhead_s = 1.0;
  p.kv_bytes_per_token = 1;
  p.kv_cache_bytes = kv_tokens;
  p.max_model_len = 64;
  return p;
}

SimRequest request(double arrival, int prompt, int output) {
  SimRequest r;
  r.arrival_s = arrival;
  r.prompt_token_ids.assign(prompt, 5);
  for (int i = 0; i < prompt; ++i) r.prompt_token_ids[i] = 100 + i;
  r.output_len = output;
  return r;
}

TEST(SimRun, OneRequestTakesOneStepPerToken) {
  // Prefill samples the first token, then two decodes: 3 steps = 3 s for 3 tokens.
  SimRunConfig config;
  config.block_size = 4;
  const SimRunResult r = run_sim(unit_profile(256), config, {request(0.0, 4, 3)});
  EXPECT_EQ(r.completed, 1);
  EXPECT_EQ(r.steps, 3);
  EXPECT_DOUBLE_EQ(r.duration_s, 3.0);
  EXPECT_DOUBLE_EQ(r.normalized_latency_s, 1.0);
}

TEST(SimRun, IdleGapsAreSkippedNotCounted) {
  // The second request arrives long after the first finished: it starts at its arrival.
  SimRunConfig config;
  config.block_size = 4;
  const SimRunResult r =
      run_sim(unit_profile(256), config, {request(0.0, 4, 2), request(100.0, 4, 2)});
  EXPECT_EQ(r.completed, 2);
  EXPECT_DOUBLE_EQ(r.duration_s, 102.0);          // first arrival to last completion
  EXPECT_DOUBLE_EQ(r.normalized_latency_s, 1.0);  // each: 2 s for 2 tokens
  EXPECT_EQ(r.steps, 4);
}

TEST(SimRun, ReserveMaxRunsOneRequestAtATimeInAOneContextPool) {
  // 64 slots = one max_model_len region: reserve-max serialises, paged batches both.
  SimRunConfig config;
  config.block_size = 4;
  const std::vector<SimRequest> two = {request(0.0, 4, 4), request(0.0, 4, 4)};
  const SimRunResult paged = run_sim(unit_profile(64), config, two);
  config.allocator = cache::KvAllocatorKind::kReserveMax;
  const SimRunResult max = run_sim(unit_profile(64), config, two);
  EXPECT_EQ(paged.completed, 2);
  EXPECT_EQ(max.completed, 2);
  EXPECT_DOUBLE_EQ(paged.duration_s, 4.0);  // both in every step
  EXPECT_DOUBLE_EQ(max.duration_s, 8.0);    // one after the other
  // reserve-max holds the whole pool while a request runs: all of it is a region.
  EXPECT_NEAR(max.memory.free + max.memory.external, 0.0, 1e-12);
}

}  // namespace
}  // namespace pagedserve::paper
