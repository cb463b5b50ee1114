// GrammarRowStates: the executor's grammar matchers, one per constrained sequence, kept across
// steps so each step advances a matcher by one token instead of replaying the whole output.
// The scheduler sends every constrained sequence's output ids (ScheduledSequence::
// penalty_output_ids), so a matcher that is missing or out of date (a new child of n > 1, a
// sequence preempted and recomputed, one not scheduled for a while) is rebuilt by replaying
// them: the state always follows the tokens, never the executor's history. Pure: no threads;
// sync() runs on the executor thread before the rows are sampled, then each row's state is
// used by exactly one pool task.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "actors/step_messages.h"
#include "model/grammar/matcher.h"

namespace pagedserve::actors {

// One sequence's matcher and the tokens it has accepted.
struct GrammarRowState {
  std::optional<model::grammar::GrammarMatcher> matcher;
  std::vector<int32_t> accepted;  // the output ids the matcher has consumed
  size_t vocab_size = 0;          // ids the grammar's vocabulary knows; others never allowed
  // A token in the output the grammar rejects (the sequence went on after the grammar ended,
  // e.g. under overlap scheduling): no mask can be computed; the row is sampled unconstrained
  // and its result is never used (the sequence has already stopped).
  bool broken = false;
  uint64_t last_step = 0;
};

class GrammarRowStates {
 public:
  // The state of `seq` (sampling->grammar set) brought up to its output ids. Call for every
  // constrained row of a step before sampling any of them.
  GrammarRowState& sync(const ScheduledSequence& seq, uint64_t step_id);
  // Drops the states of sequences not scheduled for a while (finished, aborted, or waiting:
  // those replay when they return).
  void prune(uint64_t step_id);
  size_t size() const { return states_.size(); }

 private:
  std::unordered_map<uint64_t, GrammarRowState> states_;  // by seq_id
};

// How many more tokens a sequence may draw after the one at output position `step` (what
// max_tokens leaves): the `tokens_after` of the masks below.
size_t tokens_after(const model::SamplingParams& sampling, uint64_t step);

// The grammar's mask for the state's next token: bit id of `bitmask` (bitmask_words(
// state.vocab_size) words) set exactly when the grammar allows token id next, with
// `tokens_after` as in mask_logits. False when the state is broken or terminated or nothing at
// all would be allowed (the row is then sampled unconstrained).
bool next_token_bitmask(const GrammarRowState& state, size_t tokens_after,
                        std::vector<uint32_t>& bitmask);

// Sets to -inf the logits of every token the state's grammar does not allow next; ids past the
// grammar's vocabulary are never allowed. `tokens_after`: how many more tokens the sequence may
// draw after this one (max_tokens left): near the end only tokens that leave a completion short
// enough are allowed, so the output is complete by max_tokens (GrammarMatcher's budgeted mask).
// Returns false (logits untouched) when the state is broken or nothing at all would be allowed.
bool mask_logits(const GrammarRowState& state, std::span<float> logits, size_t tokens_after);

// After the row's draws: per draw, whether the grammar is complete and allows nothing more.
// A single draw advances the state (its sequence continues with it); several draws (a prompt
// forking into best_of children) leave it as it is: each child replays its own token next step.
std::vector<uint8_t> advance_on_draws(GrammarRowState& state,
                                      std::span<const model::TokenLogprob> draws);

}  // namespace pagedserve::actors
