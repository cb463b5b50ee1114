// SequenceGroup: one request's state inside the scheduler (vLLM v0's SequenceGroup): its prompt,
// sampling parameters and 1..best_of sequences. The prompt is prefilled once by a single
// sequence; when its logits arrive the group forks (copy-on-write blocks) into best_of
// children, or into beams for beam search. Plain data plus small helpers; the Scheduler owns
// every group and is the only one to change them.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "actors/step_messages.h"
#include "model/sampling_params.h"

namespace pagedserve::actors {

enum class FinishReason { kNone, kStop, kLength, kAbort, kError };
const char* finish_reason_name(FinishReason reason);  // "stop", "length", "abort", "error"

enum class GroupStatus {
  kWaiting,  // holds no blocks: new, or preempted by recompute
  kRunning,  // its live sequences hold device blocks (possibly mid-prefill)
  kSwapped,  // its live sequences' blocks are in the CPU pool
};

// One sampling row of a step in flight, as the scheduler planned it (Sequence::pending_rows).
struct PendingRow {
  // Proposal slots the row verifies (speculative decoding; the executor fills them). A step
  // planned while this one runs assumes them all accepted; the executor moves that step's row
  // back over the ones rejected.
  int num_proposals = 0;
  // The row's first slot (the draw of the row before) was reserved speculative, not pending:
  // it is settled with this row's accepted proposals.
  bool first_slot_speculative = false;
  // Slots the row reserved with append_speculative_token (first slot and proposals).
  int num_speculative_slots() const { return (first_slot_speculative ? 1 : 0) + num_proposals; }
  // Tokens the row stands for in Sequence: its proposals, assumed accepted, and its draw.
  int num_tokens() const { return num_proposals + 1; }
};

struct Sequence {
  uint64_t seq_id = 0;  // the block manager's key, unique within one scheduler
  int index = 0;        // place in the request: its RNG stream and its output index
  std::vector<int32_t> output_token_ids;
  // The logprob of each output token (sampling sequences; beams leave it empty), so that a
  // stop string can take back tokens appended after it in the same step.
  std::vector<float> output_logprobs;
  double cumulative_logprob = 0.0;  // sum of the sampled tokens' logprobs (model/sampler.h)
  // Tokens whose K/V are in the cache or being computed by a scheduled step; 0 while waiting.
  int num_computed_tokens = 0;
  // The rows of scheduled steps whose draws are not known yet, oldest first (at most 1 when a
  // step is planned, 2 between planning a step ahead and updating the one before): each
  // counts in num_tokens as its proposals (assumed accepted) and one kPlaceholderToken for its
  // draw, so the next step can be planned while that one runs (overlap scheduling).
  std::deque<PendingRow> pending_rows;
  FinishReason finish_reason = FinishReason::kNone;
  // Planning from a view without the prefix cache (kMirrored, kRemote): the hits a probe op
  // found for this sequence's tokens while it held no blocks, -1 until one answered, and the
  // first step planned after that answer. A hint only: the blocks may be evicted meanwhile.
  int prefix_hint_tokens = -1;
  uint64_t prefix_hint_step = 0;
  // Speculative decoding: the proposals for the step being planned (Scheduler::propose_tokens;
  // empty when none), and, over the sequence's life, proposed and accepted tokens.
  std::vector<int32_t> proposal;
  int64_t num_proposed_tokens = 0;
  int64_t num_accepted_tokens = 0;
  // The acceptance policy (SpeculativeConfig::min_accepted_per_seq): a moving average of the
  // proposals accepted per step that tried to propose (-1 before the first), the steps this
  // sequence has been held back since it last proposed, and how many it waits before trying
  // again (doubled by each try that does not lift the average over the bar).
  double spec_accepted_average = -1.0;
  int spec_held_steps = 0;
  int spec_probe_interval = 0;  // 0: SpeculativeConfig::kSpeculativeProbeInterval
  int spec_wait_steps = 0;      // steps left before the next n-gram lookup after one found none
  // n-gram proposals' adaptive length (SpeculativeConfig::max_speculative_tokens): how many
  // this sequence proposes next; 0 until its first verifying step (then K).
  int spec_num_tokens = 0;
  // Draft-model proposals: positions whose draft K/V are in the cache (the draft catches up
  // from here when it next proposes; 0 for a new or recomputed sequence, kept across swaps).
  int draft_num_computed_tokens = 0;

  bool finished() const { return finish_reason != FinishReason::kNone; }
  int num_pending_samples() const { return static_cast<int>(pending_rows.size()); }
  // Tokens the pending rows stand for (their assumed-accepted proposals and their draws).
  int num_pending_tokens() const;
};

struct SequenceGroup {
  uint64_t request_id = 0;
  std::vector<int32_t> prompt_token_ids;
  model::SamplingParams sampling;
  // The same params, made once when the request is added and handed to every sampling row
  // of every step (ScheduledSequence::sampling) instead of a copy per row per step.
  std::shared_ptr<const model::SamplingParams> shared_sampling;
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
    return static_cast<int>(prompt_token_ids.size() + seq.output_token_ids.size()) +
           seq.num_pending_tokens();
  }
  // prompt + outputs + per pending row a kProposalSlotToken per proposal and a kPlaceholderToken
  std::vector<int32_t> tokens(const Sequence& seq) const;
  // tokens(seq) without the prompt: what the sequence generated and its pending rows stand for.
  std::vector<int32_t> output_tokens(const Sequence& seq) const;
  // prompt + outputs: the tokens whose values are known.
  int num_known_tokens(const Sequence& seq) const {
    return static_cast<int>(prompt_token_ids.size() + seq.output_token_ids.size());
  }
  // tokens(seq)[i] without building the list (a decode needs one token); kPlaceholderToken
  // past the end.
  int32_t token_at(const Sequence& seq, int i) const;
  bool has_pending_samples() const;  // some live sequence waits for a running step's sample
};

// The RNG stream of sequence `index`: index 0 keeps the request's seed, so n = 1 requests draw
// exactly what they drew before groups existed; the others mix the index in.
uint64_t sequence_seed(uint64_t request_seed, int index);

}  // namespace pagedserve::actors
