// SampledTokenCarry: carry one step's sampled tokens into the next step's placeholders.
#include "actors/sampled_token_carry.h"

#include <stdexcept>
#include <string>

namespace pagedserve::actors {

void SampledTokenCarry::substitute(StepInput& input) const {
  for (ScheduledSequence& seq : input.seqs) {
    for (std::vector<int32_t>* tokens : {&seq.new_token_ids, &seq.penalty_output_ids}) {
      for (int32_t& token : *tokens) {
        if (token != kPlaceholderToken) continue;
        auto it = last_.find(seq.seq_id);
        if (it == last_.end()) {
          throw std::logic_error("step " + std::to_string(input.step_id) + ": sequence " +
                                 std::to_string(seq.seq_id) +
                                 " continues a sample the previous step did not draw");
        }
        token = it->second;
      }
    }
  }
}

void SampledTokenCarry::record(const StepInput& input, const StepOutput& output) {
  last_.clear();
  for (size_t i = 0; i < input.seqs.size() && i < output.seqs.size(); ++i) {
    if (output.seqs[i].samples.size() != 1) continue;
    last_[input.seqs[i].seq_id] = output.seqs[i].samples.front().token_id;
  }
}

}  // namespace pagedserve::actors
