// SampledTokenCarry: the executor's half of overlap scheduling. The scheduler plans step N+1
// while step N runs, so a sequence that samples in N continues in N+1 with kPlaceholderToken
// where N's token goes (step_messages.h). The executor knows that token first: it drew it.
// record() keeps what each sequence of the step just run drew; substitute() writes it into the
// next step's placeholders before that step runs.
//
// Past a verifying step (speculative decoding) the scheduler planned N+1 as if N accepted all
// of its proposal slots (ScheduledSequence::num_tentative_tokens). substitute() moves the row
// back over the ones N rejected (its position and RNG counter) and writes N's drawn tokens in
// place of the slots and the placeholder that end its histories (penalty_output_ids and the
// n-gram lookup's proposal_context).
// Pure: no threads; owned by whoever runs the steps in order (the executor actor, or
// LlmEngine's overlapped loop).
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "actors/step_messages.h"

namespace pagedserve::actors {

class SampledTokenCarry {
 public:
  // Fills every kPlaceholderToken in `input` (new_token_ids and penalty_output_ids) with the
  // last token its sequence drew in the step recorded last, and moves rows planned past a
  // verifying step as above. Throws std::logic_error naming the sequence when that step drew
  // nothing for it (the step failed and was forgotten, or a placeholder was planned for a
  // sequence that did not sample) or had another number of proposal slots than the row assumed.
  void substitute(StepInput& input) const;
  // Remembers the draws of each decoding row of the step just run, forgetting the step before
  // (placeholders only ever refer to the step just before). A prompt forking into best_of
  // children (several draws, no proposals) is never continued by a placeholder.
  void record(const StepInput& input, const StepOutput& output);
  // The step failed: nothing it sampled can be substituted.
  void forget() { last_.clear(); }

 private:
  struct Drawn {
    std::vector<int32_t> tokens;  // the row's draws: accepted proposals, then its own draw
    int num_slots = 0;            // proposal slots the row was planned with
  };
  std::unordered_map<uint64_t, Drawn> last_;  // seq_id -> what it drew in the last step
};

}  // namespace pagedserve::actors
