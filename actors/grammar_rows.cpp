// GrammarRowStates: matchers kept per sequence, replayed from the output ids when out of date.
#include "actors/grammar_rows.h"

#include <algorithm>
#include <limits>

#include "model/sampling_params.h"

namespace pagedserve::actors {
namespace {

// Steps a sequence may go unscheduled before its matcher is dropped (it replays on return).
constexpr uint64_t kKeepSteps = 64;

bool is_prefix(std::span<const int32_t> prefix, std::span<const int32_t> of) {
  return prefix.size() <= of.size() && std::equal(prefix.begin(), prefix.end(), of.begin());
}

void accept_all(GrammarRowState& state, std::span<const int32_t> ids) {
  for (int32_t id : ids) {
    if (state.broken) return;
    if (id < 0 || !state.matcher->accept_token(id)) {
      state.broken = true;
      return;
    }
    state.accepted.push_back(id);
  }
}

}  // namespace

GrammarRowState& GrammarRowStates::sync(const ScheduledSequence& seq, uint64_t step_id) {
  GrammarRowState& state = states_[seq.seq_id];
  state.last_step = step_id;
  const std::span<const int32_t> output = seq.penalty_output_ids;
  const bool fresh = !state.matcher || !is_prefix(state.accepted, output);
  if (fresh) {
    state.matcher.emplace(seq.sampling->grammar);
    state.vocab_size = seq.sampling->grammar->vocabulary().size();
    state.accepted.clear();
    state.broken = false;
  }
  accept_all(state, output.subspan(state.accepted.size()));
  return state;
}

void GrammarRowStates::prune(uint64_t step_id) {
  std::erase_if(states_,
                [&](const auto& entry) { return entry.second.last_step + kKeepSteps < step_id; });
}

bool mask_logits(const GrammarRowState& state, std::span<float> logits, size_t tokens_after) {
  if (state.broken || !state.matcher || state.matcher->is_terminated()) return false;
  const size_t vocab = state.vocab_size;
  thread_local std::vector<uint32_t> bitmask;
  bitmask.assign(model::grammar::bitmask_words(vocab), 0);
  // One byte per token at worst: every byte has a token of its own.
  state.matcher->fill_next_token_bitmask(bitmask, tokens_after);
  if (std::all_of(bitmask.begin(), bitmask.end(), [](uint32_t word) { return word == 0; })) {
    return false;
  }
  constexpr float kNever = -std::numeric_limits<float>::infinity();
  // A word at a time: inside a string nearly every word is all ones (nothing to do), between
  // values nearly every word is zero (32 stores); only mixed words are read bit by bit.
  const size_t covered = std::min(vocab, logits.size());
  for (size_t first = 0; first < covered; first += 32) {
    const uint32_t word = bitmask[first / 32];
    const size_t end = std::min(first + 32, covered);
    if (word == ~uint32_t{0} && end - first == 32) continue;
    if (word == 0) {
      std::fill(logits.begin() + first, logits.begin() + end, kNever);
      continue;
    }
    for (size_t id = first; id < end; ++id) {
      if (((word >> (id - first)) & 1u) == 0) logits[id] = kNever;
    }
  }
  std::fill(logits.begin() + covered, logits.end(), kNever);  // ids past the vocabulary
  return true;
}

std::vector<uint8_t> advance_on_draws(GrammarRowState& state,
                                      std::span<const model::TokenLogprob> draws) {
  std::vector<uint8_t> ended(draws.size(), 0);
  if (state.broken || !state.matcher) return ended;
  const auto ends_after = [](model::grammar::GrammarMatcher& matcher, int32_t id) {
    if (!matcher.accept_token(id)) return false;
    return matcher.is_terminated() || matcher.must_end();
  };
  if (draws.size() == 1) {
    const int32_t id = draws.front().token_id;
    model::grammar::GrammarMatcher& matcher = *state.matcher;
    if (matcher.accept_token(id)) {
      state.accepted.push_back(id);
      ended[0] = matcher.is_terminated() || matcher.must_end();
    } else {
      state.broken = true;
    }
    return ended;
  }
  for (size_t i = 0; i < draws.size(); ++i) {
    model::grammar::GrammarMatcher child = *state.matcher;
    ended[i] = ends_after(child, draws[i].token_id);
  }
  return ended;
}

}  // namespace pagedserve::actors
