// run_static_batching (the FasterTransformer baseline): batch timing, step costs, failures and
// memory shares against hand computations, and the paper's point that paged batching beats
// request-level batching when output lengths differ.
#include "tools/paper/static_batching.h"

#include <gtest/gtest.h>

namespace pagedserve::paper {
namespace {

// One second per step whatever the batch (step counts become times); the pool holds
// `kv_tokens` tokens, i.e. kv_tokens / 64 max_model_len reservations.
actors::SimProfile unit_profile(int64_t kv_tokens) {
  actors::SimProfile p;
  p.step_overhead_s = 1.0;
  p.kv_bytes_per_token = 1;
  p.kv_cache_bytes = kv_tokens;
  p.max_model_len = 64;
  return p;
}

SimRequest request(double arrival, int prompt, int output, int n = 1) {
  SimRequest r;
  r.arrival_s = arrival;
  r.prompt_token_ids.assign(prompt, 5);
  for (int i = 0; i < prompt; ++i) r.prompt_token_ids[i] = 100 + i;
  r.output_len = output;
  r.n = n;
  return r;
}

StaticBatchConfig config4() {
  StaticBatchConfig c;
  c.block_size = 4;
  return c;
}

double shares_sum(const MemoryShares& m) {
  return m.token + m.reserved + m.internal + m.external + m.free;
}

TEST(StaticBatching, OneBatchEndsWithItsLongestSequence) {
  // 256 slots / 64 = B 4. Prefill (t=1, the output-1 request done), decode (t=2, output 2
  // done), decode (t=3, output 3 done): latencies 1, 3, 2 over outputs 1, 3, 2.
  const SimRunResult r = run_static_batching(
      unit_profile(256), config4(), {request(0, 4, 1), request(0, 4, 3), request(0, 4, 2)});
  EXPECT_EQ(r.completed, 3);
  EXPECT_EQ(r.failed, 0);
  EXPECT_EQ(r.steps, 3);
  EXPECT_EQ(r.preemptions, 0);
  EXPECT_DOUBLE_EQ(r.duration_s, 3.0);
  EXPECT_DOUBLE_EQ(r.normalized_latency_s, 1.0);
  EXPECT_DOUBLE_EQ(r.request_throughput, 1.0);
  EXPECT_DOUBLE_EQ(r.token_throughput, (5.0 + 7.0 + 6.0) / 3.0);
  EXPECT_DOUBLE_EQ(r.mean_running_seqs, (3.0 + 2.0 + 1.0) / 3.0);  // finished ones stop
}

TEST(StaticBatching, TheNextBatchWaitsForTheWholeBatch) {
  // 128 slots: B = 2. The first two run 3 steps (done at 1 and 3); the third, though the
  // output-1 sequence freed its compute after step 1, starts only at 3 and is done at 5.
  const std::vector<SimRequest> three = {request(0, 4, 1), request(0, 4, 3), request(0, 4, 2)};
  const SimRunResult r = run_static_batching(unit_profile(128), config4(), three);
  EXPECT_EQ(r.completed, 3);
  EXPECT_EQ(r.steps, 5);
  EXPECT_DOUBLE_EQ(r.duration_s, 5.0);
  EXPECT_DOUBLE_EQ(r.normalized_latency_s, (1.0 / 1 + 3.0 / 3 + 5.0 / 2) / 3);
  // max_batch = 2 in a large pool batches alike.
  StaticBatchConfig capped = config4();
  capped.max_batch = 2;
  const SimRunResult c = run_static_batching(unit_profile(4096), capped, three);
  EXPECT_DOUBLE_EQ(c.duration_s, 5.0);
  EXPECT_DOUBLE_EQ(c.normalized_latency_s, r.normalized_latency_s);
}

TEST(StaticBatching, StepsCostTheLinearModel) {
  // a 0.5, b 0.1, c 0.01. Prompts 3 and 5, outputs 2 and 3.
  //   prefill: 8 tokens, reads 8:                 0.5 + 0.8 + 0.08 = 1.38  (t 1.38)
  //   decode:  2 tokens, reads (3+1) + (5+1) = 10: 0.5 + 0.2 + 0.10 = 0.80  (t 2.18, first done)
  //   decode:  1 token,  reads 5+2 = 7:            0.5 + 0.1 + 0.07 = 0.67  (t 2.85)
  actors::SimProfile p = unit_profile(4096);
  p.step_overhead_s = 0.5;
  p.per_batched_token_s = 0.1;
  p.per_kv_token_read_s = 0.01;
  const SimRunResult r = run_static_batching(p, config4(), {request(0, 3, 2), request(0, 5, 3)});
  EXPECT_EQ(r.completed, 2);
  EXPECT_EQ(r.steps, 3);
  EXPECT_NEAR(r.duration_s, 2.85, 1e-12);
  EXPECT_NEAR(r.normalized_latency_s, (2.18 / 2 + 2.85 / 3) / 2, 1e-12);
}

TEST(StaticBatching, IdleClockJumpsAndLateArrivalsWaitForTheBatch) {
  // Out of order in the vector. The 0.5 arrival waits for the batch of 0 (ends at 3), runs
  // 3 -> 4; the 100 arrival finds the engine idle and starts at 100, done at 102.
  const SimRunResult r = run_static_batching(
      unit_profile(256), config4(), {request(100, 4, 2), request(0.5, 4, 1), request(0, 4, 3)});
  EXPECT_EQ(r.completed, 3);
  EXPECT_EQ(r.steps, 3 + 1 + 2);
  EXPECT_DOUBLE_EQ(r.duration_s, 102.0);
  EXPECT_DOUBLE_EQ(r.normalized_latency_s, (2.0 / 2 + 3.5 / 1 + 3.0 / 3) / 3);
}

TEST(StaticBatching, ParallelSamplesAreIndependentSequences) {
  // a 0, b 1: cost = tokens computed. B = 2: the n=2 request fills a batch, unshared prompts:
  // prefill 8 + decode 2 -> t 10; then the other: prefill 4 + decode 1 -> t 15.
  actors::SimProfile p = unit_profile(128);
  p.step_overhead_s = 0.0;
  p.per_batched_token_s = 1.0;
  const SimRunResult r =
      run_static_batching(p, config4(), {request(0, 4, 2, /*n=*/2), request(0, 4, 2)});
  EXPECT_EQ(r.completed, 2);
  EXPECT_DOUBLE_EQ(r.duration_s, 15.0);
  EXPECT_DOUBLE_EQ(r.normalized_latency_s, (10.0 / 2 + 15.0 / 2) / 2);
  EXPECT_DOUBLE_EQ(r.mean_running_seqs, (8 * 2.0 + 2 * 2.0 + 4 * 1.0 + 1 * 1.0) / 15.0);
}

TEST(StaticBatching, UnservableRequestsFailWithoutHanging) {
  // max_model_len 64, B 2: 60 + 10 tokens is too long, n = 3 too wide; 60 + 4 just fits.
  // Nothing runs before 1; the 1 arrival runs 1 -> 3, the 2 arrival waits for it: 3 -> 7.
  const SimRunResult r = run_static_batching(
      unit_profile(128), config4(),
      {request(0, 60, 10), request(0, 4, 2, /*n=*/3), request(1, 4, 2), request(2, 60, 4)});
  EXPECT_EQ(r.completed, 2);
  EXPECT_EQ(r.failed, 2);
  EXPECT_DOUBLE_EQ(r.duration_s, 7.0);  // from the first arrival, failed or not (as run_sim)
  EXPECT_DOUBLE_EQ(r.normalized_latency_s, (2.0 / 2 + 5.0 / 4) / 2);
}

TEST(StaticBatching, NothingServableEndsAtOnce) {
  const SimRunResult r =
      run_static_batching(unit_profile(128), config4(), {request(0, 64, 1), request(5, 4, 0)});
  EXPECT_EQ(r.completed, 0);
  EXPECT_EQ(r.failed, 2);
  EXPECT_EQ(r.steps, 0);
  EXPECT_DOUBLE_EQ(r.duration_s, 0.0);
}

TEST(StaticBatching, MemorySharesOfOneSequence) {
  // 128 slots, one reservation of 64. Prompt 4, output 3: the steps hold 4, 5, 6 tokens (the
  // last sampled token is never written), final length 6, so reserved 2, 1, 0.
  const SimRunResult r = run_static_batching(unit_profile(128), config4(), {request(0, 4, 3)});
  EXPECT_NEAR(r.memory.token, 5.0 / 128, 1e-12);
  EXPECT_NEAR(r.memory.reserved, 1.0 / 128, 1e-12);
  EXPECT_NEAR(r.memory.internal, 58.0 / 128, 1e-12);
  EXPECT_DOUBLE_EQ(r.memory.external, 0.0);
  EXPECT_NEAR(r.memory.free, 64.0 / 128, 1e-12);
  EXPECT_NEAR(shares_sum(r.memory), 1.0, 1e-12);
}

TEST(StaticBatching, AFinishedSequenceKeepsItsMemoryUntilTheBatchEnds) {
  // Outputs 1 and 3, prompts 4: finals 4 and 6. Held (4, 4), (4, 5), (4, 6): tokens 8, 9, 10;
  // reserved 2, 1, 0; internal 60 + 58 every step; no free slot (B = 2 fills 128).
  const SimRunResult r =
      run_static_batching(unit_profile(128), config4(), {request(0, 4, 1), request(0, 4, 3)});
  EXPECT_NEAR(r.memory.token, 9.0 / 128, 1e-12);
  EXPECT_NEAR(r.memory.reserved, 1.0 / 128, 1e-12);
  EXPECT_NEAR(r.memory.internal, 118.0 / 128, 1e-12);
  EXPECT_NEAR(r.memory.free, 0.0, 1e-12);
  EXPECT_NEAR(shares_sum(r.memory), 1.0, 1e-12);
  EXPECT_DOUBLE_EQ(r.mean_running_seqs, (2.0 + 1.0 + 1.0) / 3.0);
}

TEST(StaticBatching, APoolSmallerThanOneContextStillRunsOne) {
  // 32 slots hold no 64-token reservation: B is 1 and the shares are of what it reserves.
  const SimRunResult r =
      run_static_batching(unit_profile(32), config4(), {request(0, 4, 2), request(0, 4, 2)});
  EXPECT_EQ(r.completed, 2);
  EXPECT_DOUBLE_EQ(r.duration_s, 4.0);
  EXPECT_NEAR(shares_sum(r.memory), 1.0, 1e-12);
  EXPECT_NEAR(r.memory.free, 0.0, 1e-12);
}

TEST(StaticBatching, PagedBatchingFinishesMixedOutputsSooner) {
  // The paper's point: with outputs of 2 and 120 tokens, every static batch lasts as long as
  // its longest sequence and reserves a whole context per sequence; paged batching refills
  // freed slots every step and holds only the tokens written.
  actors::SimProfile p = unit_profile(1024);
  p.max_model_len = 256;
  p.step_overhead_s = 0.01;
  p.per_batched_token_s = 1e-4;
  p.per_kv_token_read_s = 1e-6;
  std::vector<SimRequest> requests;
  for (int i = 0; i < 32; ++i) requests.push_back(request(0, 16, i % 2 == 0 ? 2 : 120));
  StaticBatchConfig static_config;
  const SimRunResult fixed = run_static_batching(p, static_config, requests);
  const SimRunResult paged = run_sim(p, SimRunConfig{}, requests);
  ASSERT_EQ(fixed.completed, 32);
  ASSERT_EQ(paged.completed, 32);
  EXPECT_LT(paged.duration_s, fixed.duration_s);
  EXPECT_GT(paged.mean_running_seqs, fixed.mean_running_seqs);
}

}  // namespace
}  // namespace pagedserve::paper
