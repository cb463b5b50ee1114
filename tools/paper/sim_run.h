// One simulated serving run for `pagedserve bench paper`: the real Scheduler and KV allocator
// driven by the SimExecutor's virtual clock. Requests arrive at given virtual times; each step
// the scheduler plans, the executor "runs" it (advancing the clock by the cost model), and
// finished requests are timed. Pure and deterministic: no threads, no wall clock, no I/O.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "actors/scheduler.h"
#include "actors/sim_executor.h"
#include "cache/kv_allocator.h"

namespace pagedserve::paper {

struct SimRequest {
  double arrival_s = 0.0;
  std::vector<int32_t> prompt_token_ids;
  int output_len = 1;  // forced: the simulator never samples an end-of-sequence token
  int n = 1;           // parallel samples (best_of) or beam width
  bool beam_search = false;
};

struct SimRunConfig {
  cache::KvAllocatorKind allocator = cache::KvAllocatorKind::kPaged;
  int block_size = 16;
  int num_device_blocks = 0;  // 0: the profile's kv_cache_bytes
  int num_cpu_blocks = 0;
  actors::PreemptionMode preemption = actors::PreemptionMode::kRecompute;
  bool prefix_caching = false;
  bool pass_output_len_hint = true;  // tell the scheduler each request's true output length
  int max_num_seqs = 256;
  int max_num_batched_tokens = 2560;
  // SchedulerConfig::admit_whole_prompt_only: on (the engine's default), as the paper's vLLM
  // (v0, no chunked prefill) admitted; the throughput sweep also shows paged with it off.
  bool admit_whole_prompt_only = true;
  // reserve-* only: buddy allocation (power-of-two regions, aligned), as the paper's Orca.
  bool buddy_regions = false;
  // Beam candidates drawn per (sequence, position) instead of one fixed ranking (SimExecutor).
  bool random_beam_candidates = false;
};

// Shares of the device pool, averaged over the run weighted by step time (sum = 1).
struct MemoryShares {
  double token = 0, reserved = 0, internal = 0, external = 0, free = 0;
};

struct SimRunResult {
  int completed = 0;
  int failed = 0;                     // refused (a request larger than the pool) or stuck
  double duration_s = 0.0;            // virtual: first arrival to last completion
  double normalized_latency_s = 0.0;  // mean over completed of latency / output tokens
  double request_throughput = 0.0;    // completed / duration
  double token_throughput = 0.0;      // (prompt + output tokens of completed) / duration
  MemoryShares memory;                // time-averaged
  double mean_logical_blocks = 0.0;   // what the sequences' tables name (time-averaged)
  double mean_physical_blocks = 0.0;  // distinct blocks held (time-averaged)
  double mean_running_seqs = 0.0;     // batch size, time-averaged
  double swap_time_s = 0.0;           // virtual time spent copying swapped blocks
  int64_t preemptions = 0;
  int64_t steps = 0;
  int num_device_blocks = 0;
};

SimRunResult run_sim(const actors::SimProfile& profile, const SimRunConfig& config,
                     const std::vector<SimRequest>& requests);

// The same loop over any executor: run_step runs one step and sets its duration (the cost
// model's, or a measured wall time). swap_cost, when given, prices swapped blocks for
// SimRunResult::swap_time_s. config.num_device_blocks must be set.
using StepRunner = std::function<actors::StepOutput(const actors::StepInput&, double& seconds)>;
SimRunResult run_replay(const SimRunConfig& config, int max_model_len, const StepRunner& run_step,
                        const std::vector<SimRequest>& requests,
                        const actors::SimProfile* swap_cost);

// Blocks of `block_size` tokens the profile's KV memory holds.
int device_blocks_for(const actors::SimProfile& profile, int block_size);
// CPU swap blocks of `block_size` tokens in 4 GiB (vLLM's default swap space).
int swap_space_blocks(const actors::SimProfile& profile, int block_size);

}  // namespace pagedserve::paper
