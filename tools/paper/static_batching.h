// The PagedAttention paper's FasterTransformer baseline (Kwon et al., SOSP 2023, §6.1):
// request-level ("static") batching with a Triton-like dynamic batcher. When the engine is idle
// it takes up to B of the earliest waiting requests as one batch, runs it to completion (one
// prefill step, then decode steps) and only then starts the next batch. Every sequence reserves
// max_model_len KV slots, so B is what the pool holds of such reservations. There is no real
// scheduler or allocator here: the batch's steps are priced with the same cost model as run_sim
// (step_seconds), so the two are comparable on the same virtual clock. Pure and deterministic.
#pragma once

#include <vector>

#include "actors/sim_executor.h"
#include "tools/paper/sim_run.h"

namespace pagedserve::paper {

struct StaticBatchConfig {
  int block_size = 16;        // only to size the pool in tokens like run_sim does
  int num_device_blocks = 0;  // 0: device_blocks_for(profile, block_size)
  int max_batch = 0;  // 0: as many max_model_len-token reservations as the pool holds (at least 1)
};

// Request-level (static) batching, FasterTransformer-like: returns the same SimRunResult fields
// run_sim fills (completed, failed, duration_s, normalized_latency_s, request_throughput,
// token_throughput, memory shares, mean_running_seqs, steps; preemptions 0). A request of n
// samples (or beam width n) is n independent sequences, each with its own reservation. Requests
// longer than max_model_len (prompt + output) or wider than B fail at arrival.
SimRunResult run_static_batching(const actors::SimProfile& profile, const StaticBatchConfig& config,
                                 const std::vector<SimRequest>& requests);

}  // namespace pagedserve::paper
