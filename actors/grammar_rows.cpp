// GrammarRowStates: matchers kept per sequence, replayed from the output ids when out of date.
#include "actors/grammar_rows.h"

#include <algorithm>
#include <limits>

#include "kernels/cpu/sampling_rows.h"
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

size_t tokens_after(const model::SamplingParams& sampling, uint64_t step) {
  const int64_t left = int64_t{sampling.max_tokens} - static_cast<int64_t>(step) - 1;
  return static_cast<size_t>(std::max<int64_t>(left, 0));
}

bool next_token_bitmask(const GrammarRowState& state, size_t tokens_after,
                        std::vector<uint32_t>& bitmask) {
  if (state.broken || !state.matcher || state.matcher->is_terminated()) return false;
  bitmask.assign(model::grammar::bitmask_words(state.vocab_size), 0);
  state.matcher->fill_next_token_bitmask(bitmask, tokens_after);
  return std::any_of(bitmask.begin(), bitmask.end(), [](uint32_t word) { return word != 0; });
}

bool mask_logits(const GrammarRowState& state, std::span<float> logits, size_t tokens_after) {
  thread_local std::vector<uint32_t> bitmask;
  if (!next_token_bitmask(state, tokens_after, bitmask)) return false;
  kernels::apply_token_bitmask(logits.data(), static_cast<int64_t>(logits.size()), bitmask.data(),
                               static_cast<int64_t>(state.vocab_size));
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
