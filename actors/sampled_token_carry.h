// SampledTokenCarry: the executor's half of overlap scheduling. The scheduler plans step N+1
// while step N runs, so a sequence that samples in N continues in N+1 with kPlaceholderToken
// where N's token goes (step_messages.h). The executor knows that token first: it drew it.
// record() keeps what each sequence of the step just run sampled; substitute() writes it into
// the next step's placeholders before that step runs. Pure: no threads; owned by whoever runs
// the steps in order (the executor actor, or LlmEngine's overlapped loop).
#pragma once

#include <cstdint>
#include <unordered_map>

#include "actors/step_messages.h"

namespace pagedserve::actors {

class SampledTokenCarry {
 public:
  // Replaces every kPlaceholderToken in `input` (new_token_ids and penalty_output_ids) by the
  // token its sequence sampled in the step recorded last. Throws std::logic_error naming the
  // sequence when that step drew no single token for it (the step failed and was forgotten,
  // or a placeholder was planned for a sequence that did not sample).
  void substitute(StepInput& input) const;
  // Remembers the single token each sampling row of the step just run drew, forgetting the
  // step before (placeholders only ever refer to the step just before). Rows with several
  // draws (a prompt forking into best_of children) are never continued by a placeholder.
  void record(const StepInput& input, const StepOutput& output);
  // The step failed: nothing it sampled can be substituted.
  void forget() { last_.clear(); }

 private:
  std::unordered_map<uint64_t, int32_t> last_;  // seq_id -> token sampled in the last step
};

}  // namespace pagedserve::actors
