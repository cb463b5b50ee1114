// SampledTokenCarry: the executor's side of overlap scheduling, against hand-built steps.
#include "actors/sampled_token_carry.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace pagedserve::actors {
namespace {

ScheduledSequence row(uint64_t seq_id, std::vector<int32_t> tokens) {
  ScheduledSequence s;
  s.seq_id = seq_id;
  s.new_token_ids = std::move(tokens);
  s.sample = true;
  return s;
}

TEST(SampledTokenCarry, FillsEachPlaceholderWithItsOwnSequencesLastSample) {
  StepInput previous;
  previous.seqs = {row(1, {5, 6}), row(2, {7}), row(3, {8})};
  StepOutput sampled;
  sampled.seqs.resize(3);
  sampled.seqs[0].samples = {{40, -1.0f}};
  sampled.seqs[1].samples = {{41, -1.0f}};
  sampled.seqs[2].samples = {{42, -1.0f}, {43, -2.0f}};  // a forking prompt: never continued
  SampledTokenCarry carry;
  carry.record(previous, sampled);

  StepInput next;
  next.seqs = {row(2, {kPlaceholderToken}), row(1, {kPlaceholderToken}), row(9, {1, 2, 3})};
  next.seqs[0].penalty_output_ids = {11, kPlaceholderToken};
  carry.substitute(next);
  EXPECT_EQ(next.seqs[0].new_token_ids, std::vector<int32_t>{41});
  EXPECT_EQ(next.seqs[0].penalty_output_ids, (std::vector<int32_t>{11, 41}));
  EXPECT_EQ(next.seqs[1].new_token_ids, std::vector<int32_t>{40});
  EXPECT_EQ(next.seqs[2].new_token_ids, (std::vector<int32_t>{1, 2, 3})) << "no placeholder";

  StepInput forked;
  forked.seqs = {row(3, {kPlaceholderToken})};
  EXPECT_THROW(carry.substitute(forked), std::logic_error);
}

// Overlap past a verifying step: the rows of step N+1 were planned as if step N accepted all
// of its proposal slots. Sequence 1 verified 3 proposals and accepted 1 (draws 5, 30),
// sequence 2 verified 2 and accepted both (draws 8, 9, 31), sequence 3 had 1 slot and drew 32.
TEST(SampledTokenCarry, MovesRowsPlannedPastAVerifyingStepBackOverTheRejectedProposals) {
  constexpr int32_t kSlot = kProposalSlotToken;
  StepInput verifying;
  verifying.seqs = {row(1, {4, kSlot, kSlot, kSlot}), row(2, {3, kSlot, kSlot}),
                    row(3, {2, kSlot})};
  verifying.seqs[0].num_proposed_tokens = 3;
  verifying.seqs[1].num_proposed_tokens = 2;
  verifying.seqs[2].num_proposed_tokens = 1;
  StepOutput drawn;
  drawn.seqs.resize(3);
  drawn.seqs[0].samples = {{5, -0.1f}, {30, -1.0f}};
  drawn.seqs[1].samples = {{8, -0.1f}, {9, -0.2f}, {31, -1.0f}};
  drawn.seqs[2].samples = {{32, -1.0f}};
  SampledTokenCarry carry;
  carry.record(verifying, drawn);

  StepInput next;
  // Sequence 1: 10 tokens computed before N (its last token at 10), N's 3 slots assumed
  // accepted: planned at 14 with sample_step 8 (4 outputs before N, 4 assumed from N), with
  // two proposal slots of its own. Two were rejected: the row moves back by 2, and its
  // histories get N's draws in place of the 3 slots and the placeholder.
  next.seqs = {row(1, {kPlaceholderToken, kSlot, kSlot}), row(2, {kPlaceholderToken}),
               row(3, {kPlaceholderToken})};
  next.seqs[0].num_computed_tokens = 14;
  next.seqs[0].sample_step = 8;
  next.seqs[0].num_tentative_tokens = 3;
  next.seqs[0].num_proposed_tokens = 2;
  next.seqs[0].penalty_output_ids = {1, 2, 3, 4, kSlot, kSlot, kSlot, kPlaceholderToken};
  next.seqs[0].proposal_context = {70, 71, 1, 2, 3, 4, kSlot, kSlot, kSlot, kPlaceholderToken};
  // Sequence 2: everything accepted: nothing moves.
  next.seqs[1].num_computed_tokens = 20;
  next.seqs[1].sample_step = 5;
  next.seqs[1].num_tentative_tokens = 2;
  next.seqs[1].penalty_output_ids = {3, kSlot, kSlot, kPlaceholderToken};
  // Sequence 3: its one proposal rejected.
  next.seqs[2].num_computed_tokens = 7;
  next.seqs[2].sample_step = 3;
  next.seqs[2].num_tentative_tokens = 1;
  carry.substitute(next);

  EXPECT_EQ(next.seqs[0].new_token_ids, (std::vector<int32_t>{30, kSlot, kSlot}));
  EXPECT_EQ(next.seqs[0].num_computed_tokens, 12);
  EXPECT_EQ(next.seqs[0].sample_step, 6u);
  EXPECT_EQ(next.seqs[0].num_proposed_tokens, 2) << "the executor fills the slots later";
  EXPECT_EQ(next.seqs[0].num_tentative_tokens, 0);
  EXPECT_EQ(next.seqs[0].penalty_output_ids, (std::vector<int32_t>{1, 2, 3, 4, 5, 30}));
  EXPECT_EQ(next.seqs[0].proposal_context, (std::vector<int32_t>{70, 71, 1, 2, 3, 4, 5, 30}));

  EXPECT_EQ(next.seqs[1].new_token_ids, std::vector<int32_t>{31});
  EXPECT_EQ(next.seqs[1].num_computed_tokens, 20);
  EXPECT_EQ(next.seqs[1].sample_step, 5u);
  EXPECT_EQ(next.seqs[1].penalty_output_ids, (std::vector<int32_t>{3, 8, 9, 31}));

  EXPECT_EQ(next.seqs[2].new_token_ids, std::vector<int32_t>{32});
  EXPECT_EQ(next.seqs[2].num_computed_tokens, 6);
  EXPECT_EQ(next.seqs[2].sample_step, 2u);

  // A row that assumed another number of slots than the step had is a logic error, and so is
  // a history that does not end with them.
  carry.record(verifying, drawn);
  StepInput wrong;
  wrong.seqs = {row(2, {kPlaceholderToken})};
  wrong.seqs[0].num_tentative_tokens = 1;
  EXPECT_THROW(carry.substitute(wrong), std::logic_error);
  StepInput short_history;
  short_history.seqs = {row(2, {kPlaceholderToken})};
  short_history.seqs[0].num_tentative_tokens = 2;
  short_history.seqs[0].penalty_output_ids = {3, 9, kSlot, kPlaceholderToken};
  EXPECT_THROW(carry.substitute(short_history), std::logic_error);
}

TEST(SampledTokenCarry, OnlyThePreviousStepCountsAndAFailedStepIsForgotten) {
  SampledTokenCarry carry;
  StepInput first;
  first.seqs = {row(1, {5})};
  StepOutput first_out;
  first_out.seqs.resize(1);
  first_out.seqs[0].samples = {{40, -1.0f}};
  carry.record(first, first_out);

  StepInput second;
  second.seqs = {row(2, {6})};
  StepOutput second_out;
  second_out.seqs.resize(1);
  second_out.seqs[0].samples = {{50, -1.0f}};
  carry.record(second, second_out);
  StepInput stale;
  stale.seqs = {row(1, {kPlaceholderToken})};
  EXPECT_THROW(carry.substitute(stale), std::logic_error) << "sequence 1 sampled two steps ago";

  carry.forget();
  StepInput after_failure;
  after_failure.seqs = {row(2, {kPlaceholderToken})};
  EXPECT_THROW(carry.substitute(after_failure), std::logic_error);
}

}  // namespace
}  // namespace pagedserve::actors
