// SequenceGroup: one request's state inside the scheduler (vLLM v0's SequenceGroup): its prompt,
// sampling parameters and 1..best_of sequences. The prompt is prefilled once by a single
// sequence; when its logits arrive the group forks (copy-on-write blocks) into best_of
// children, or into beams for beam search. Plain data plus small helpers; the Scheduler owns
// every group and is the only one to change them.
#pragma once

#include <cstdint>
#include <vector>

#include "model/sampling_params.h"

namespace pagedserve::actors {

enum class FinishReason { kNone, kStop, kLength, kAbort, kError };
const char* finish_reason_name(FinishReason reason);  // "stop", "length", "abort", "error"

enum class GroupStatus {
  kWaiting,  // holds no blocks: new, or preempted by recompute
  kRunning,  // its live sequences hold device blocks (possibly mid-prefill)
  kSwapped,  // its live sequences' blocks are in the CPU pool
};

struct Sequence {
  uint64_t seq_id = 0;  // the block manager's key, unique within one scheduler
  int index = 0;        // place in the request: its RNG stream and its output index
  std::vector<int32_t> output_token_ids;
  double cumulative_logprob = 0.0;  // sum of the sampled tokens' logprobs (model/sampler.h)
  int num_computed_tokens = 0;      // tokens whose K/V are in the cache; 0 while waiting
  FinishReason finish_reason = FinishReason::kNone;

  bool finished() const { return finish_reason != FinishReason::kNone; }
};

struct SequenceGroup {
  uint64_t request_id = 0;
  std::vector<int32_t> prompt_token_ids;
  model::SamplingParams sampling;
  uint64_t seed = 0;  // the request's seed; sequence i draws from sequence_seed(seed, i)
  GroupStatus status = GroupStatus::kWaiting;
  bool forked = false;         // the prompt's logits were sampled: seqs are children or beams
  int num_cached_tokens = -1;  // prompt tokens the prefix cache served at first admission
  int num_preemptions = 0;
  int output_len_hint = 0;  // NewRequest::output_len_hint
  // Live sequences, plus finished ones kept for the final output (finished sequences hold no
  // blocks). Sampling groups keep index order; beam search keeps finished beams here too.
  std::vector<Sequence> seqs;

  bool is_beam_search() const { return sampling.use_beam_search; }
  int num_live() const;
  std::vector<Sequence*> live();
  Sequence* find(uint64_t seq_id);
  int num_tokens(const Sequence& seq) const {
    return static_cast<int>(prompt_token_ids.size() + seq.output_token_ids.size());
  }
  std::vector<int32_t> tokens(const Sequence& seq) const;  // prompt + outputs
};

// The RNG stream of sequence `index`: index 0 keeps the request's seed, so n = 1 requests draw
// exactly what they drew before groups existed; the others mix the index in.
uint64_t sequence_seed(uint64_t request_seed, int index);

}  // namespace pagedserve::actors
