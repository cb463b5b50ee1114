// Beam search selection (vLLM v0's algorithm with early_stopping = false): each step the
// candidates from every live beam compete, finished candidates compete with the beams already
// finished, and the search stops when no live beam can beat the worst kept finished beam.
// Pure: it ranks candidates; the scheduler forks and frees the sequences it names.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "model/sampler.h"

namespace pagedserve::actors {

// vLLM v0's Sequence.get_beam_search_score: cumulative logprob / length ^ length_penalty, the
// length counting the prompt and not counting a final EOS token.
double beam_score(double cumulative_logprob, int num_tokens, bool ends_in_eos,
                  float length_penalty);

// One live beam's view of a step: its cumulative logprob and its top candidates.
struct BeamParent {
  double cumulative_logprob = 0.0;
  std::vector<model::TokenLogprob> top;  // best first (the executor's top_logprobs)
};

// The global top `count` (parent, token) pairs by parent cumulative + token logprob, best
// first (ties: the lower parent, then the order within that parent's list).
struct BeamCandidate {
  size_t parent = 0;  // index into the parents span
  int32_t token_id = -1;
  double cumulative_logprob = 0.0;
};
std::vector<BeamCandidate> top_beam_candidates(std::span<const BeamParent> parents, int count);

// A candidate once the stop checks ran: whether it finished and its score.
struct ScoredCandidate {
  BeamCandidate candidate;
  bool finished = false;
  double score = 0.0;
};

struct BeamSelection {
  std::vector<size_t> keep_finished;  // indexes into the old finished beams still kept
  std::vector<size_t> new_finished;   // indexes into candidates joining the finished beams
  std::vector<size_t> continuing;     // indexes into candidates that live on, best first
  bool done = false;                  // the search is over: no beam continues
};

// finished_scores: the scores of the finished beams kept so far.
BeamSelection select_beams(std::span<const double> finished_scores,
                           std::span<const ScoredCandidate> candidates, int beam_width);

}  // namespace pagedserve::actors
