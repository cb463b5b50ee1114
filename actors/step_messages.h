// The messages between the scheduler and the executor for one engine step: what to compute
// (StepInput) and what came out (StepOutput). Movable values that own their data, so they can
// cross threads unchanged when the executor becomes an actor.
#pragma once

#include <cstdint>
#include <vector>

#include "cache/block_manager.h"
#include "model/sampling_params.h"

namespace pagedserve::actors {

// One sequence's share of a step.
struct ScheduledSequence {
  uint64_t seq_id = 0;
  std::vector<int32_t> new_token_ids;  // tokens whose K/V this step computes
  int num_computed_tokens = 0;         // tokens already in the cache before this step
  std::vector<int32_t> block_table;    // device blocks covering all computed + new tokens
  bool sample = false;                 // false for a prompt chunk that is not the last
  model::SamplingParams sampling;      // used when sample is true
  uint64_t seed = 0;                   // the request's seed (drawn at random when not given)
  uint64_t sample_step = 0;            // number of tokens sampled so far: the RNG counter
};

struct StepInput {
  uint64_t step_id = 0;
  std::vector<cache::BlockCopy> swap_out;      // device -> cpu, before the step
  std::vector<cache::BlockCopy> swap_in;       // cpu -> device, before the step
  std::vector<cache::BlockCopy> block_copies;  // device -> device (copy-on-write)
  std::vector<ScheduledSequence> seqs;
};

struct StepOutput {
  uint64_t step_id = 0;
  std::vector<int32_t> sampled_token_ids;  // [seqs.size()]; -1 where sample was false
};

}  // namespace pagedserve::actors
