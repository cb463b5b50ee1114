// SampledTokenCarry: carry one step's draws into the next step's placeholders.
#include "actors/sampled_token_carry.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace pagedserve::actors {
namespace {

// A row continues the previous step's draw: its tokens hold the placeholder, and its histories
// (whole sequences, so only their last entry is looked at) end with it.
bool has_placeholder(const ScheduledSequence& seq) {
  const auto ends_with_it = [](const std::vector<int32_t>& history) {
    return !history.empty() && history.back() == kPlaceholderToken;
  };
  return std::find(seq.new_token_ids.begin(), seq.new_token_ids.end(), kPlaceholderToken) !=
             seq.new_token_ids.end() ||
         ends_with_it(seq.penalty_output_ids) || ends_with_it(seq.proposal_context);
}

std::string row_name(const StepInput& input, const ScheduledSequence& seq) {
  return "step " + std::to_string(input.step_id) + ": sequence " + std::to_string(seq.seq_id);
}

// A history planned while the step before ran ends with a kProposalSlotToken per proposal
// slot that step verified and a kPlaceholderToken for its draw: they become what it drew.
void fill_history(std::vector<int32_t>& history, int num_tentative,
                  const std::vector<int32_t>& drawn, const std::string& row) {
  if (history.empty() || history.back() != kPlaceholderToken) return;
  const size_t unknown = static_cast<size_t>(num_tentative) + 1;
  if (history.size() < unknown ||
      std::any_of(history.end() - static_cast<std::ptrdiff_t>(unknown), history.end() - 1,
                  [](int32_t t) { return t != kProposalSlotToken; })) {
    throw std::logic_error(row + ": its history does not end with the previous step's " +
                           std::to_string(num_tentative) + " proposal slots and draw");
  }
  history.resize(history.size() - unknown);
  history.insert(history.end(), drawn.begin(), drawn.end());
}

}  // namespace

void SampledTokenCarry::substitute(StepInput& input) const {
  for (ScheduledSequence& seq : input.seqs) {
    if (!has_placeholder(seq)) continue;
    auto it = last_.find(seq.seq_id);
    if (it == last_.end()) {
      throw std::logic_error(row_name(input, seq) +
                             " continues a sample the previous step did not draw");
    }
    const Drawn& drawn = it->second;
    if (seq.num_tentative_tokens != drawn.num_slots) {
      throw std::logic_error(
          row_name(input, seq) + " assumed " + std::to_string(seq.num_tentative_tokens) +
          " proposal slots before it, the previous step had " + std::to_string(drawn.num_slots));
    }
    // The row was planned as if every slot before it was accepted.
    const int num_accepted = static_cast<int>(drawn.tokens.size()) - 1;
    const int num_rejected = seq.num_tentative_tokens - num_accepted;
    seq.num_computed_tokens -= num_rejected;
    seq.sample_step -= static_cast<uint64_t>(num_rejected);
    fill_history(seq.penalty_output_ids, seq.num_tentative_tokens, drawn.tokens,
                 row_name(input, seq));
    fill_history(seq.proposal_context, seq.num_tentative_tokens, drawn.tokens,
                 row_name(input, seq));
    std::replace(seq.new_token_ids.begin(), seq.new_token_ids.end(), kPlaceholderToken,
                 drawn.tokens.back());
    if (seq.num_tentative_tokens > 0 && !seq.draft_context_ids.empty() &&
        seq.draft_context_ids.back() == kProposalSlotToken) {
      // A draft row planned past a draft-verifying one: it assumed the draft's K/V reached
      // that row's last proposal and runs it first. With a rejection they reach the row's
      // first token instead (the draw there is this row's first token): nothing to catch up.
      if (num_rejected > 0) {
        seq.draft_num_computed_tokens = seq.num_computed_tokens;
        seq.draft_context_ids.clear();
      } else {
        seq.draft_context_ids.back() = drawn.tokens[drawn.tokens.size() - 2];
      }
    }
    seq.num_tentative_tokens = 0;
  }
}

void SampledTokenCarry::record(const StepInput& input, const StepOutput& output) {
  last_.clear();
  for (size_t i = 0; i < input.seqs.size() && i < output.seqs.size(); ++i) {
    const ScheduledSequence& seq = input.seqs[i];
    const std::vector<model::TokenLogprob>& samples = output.seqs[i].samples;
    if (samples.empty() || (samples.size() > 1 && seq.num_proposed_tokens == 0)) continue;
    Drawn& drawn = last_[seq.seq_id];
    drawn.num_slots = seq.num_proposed_tokens;
    for (const model::TokenLogprob& sample : samples) drawn.tokens.push_back(sample.token_id);
  }
}

}  // namespace pagedserve::actors
