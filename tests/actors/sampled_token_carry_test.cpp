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
