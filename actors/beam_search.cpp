// Beam search ranking: vLLM v0's _process_sequence_group_outputs (beam branch) and
// _check_beam_search_early_stopping with early_stopping = false.
#include "actors/beam_search.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace pagedserve::actors {

double beam_score(double cumulative_logprob, int num_tokens, bool ends_in_eos,
                  float length_penalty) {
  const int length = std::max(1, num_tokens - (ends_in_eos ? 1 : 0));
  return cumulative_logprob / std::pow(static_cast<double>(length), length_penalty);
}

std::vector<BeamCandidate> top_beam_candidates(std::span<const BeamParent> parents, int count) {
  std::vector<BeamCandidate> all;
  for (size_t p = 0; p < parents.size(); ++p) {
    for (const model::TokenLogprob& t : parents[p].top) {
      all.push_back({p, t.token_id, parents[p].cumulative_logprob + t.logprob});
    }
  }
  // stable_sort keeps (parent, rank) order among equal scores.
  std::stable_sort(all.begin(), all.end(), [](const BeamCandidate& a, const BeamCandidate& b) {
    return a.cumulative_logprob > b.cumulative_logprob;
  });
  if (static_cast<int>(all.size()) > count) all.resize(static_cast<size_t>(count));
  return all;
}

BeamSelection select_beams(std::span<const double> finished_scores,
                           std::span<const ScoredCandidate> candidates, int beam_width) {
  // Old and new finished beams compete for beam_width places.
  struct Finished {
    double score;
    bool is_new;
    size_t index;
  };
  std::vector<Finished> finished;
  for (size_t i = 0; i < finished_scores.size(); ++i) {
    finished.push_back({finished_scores[i], false, i});
  }
  std::vector<size_t> running;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (candidates[i].finished) {
      finished.push_back({candidates[i].score, true, i});
    } else {
      running.push_back(i);
    }
  }
  std::stable_sort(finished.begin(), finished.end(),
                   [](const Finished& a, const Finished& b) { return a.score > b.score; });
  std::stable_sort(running.begin(), running.end(),
                   [&](size_t a, size_t b) { return candidates[a].score > candidates[b].score; });

  BeamSelection out;
  const size_t width = static_cast<size_t>(beam_width);
  for (size_t i = 0; i < std::min(width, finished.size()); ++i) {
    (finished[i].is_new ? out.new_finished : out.keep_finished).push_back(finished[i].index);
  }
  if (running.empty()) {
    out.done = true;
  } else if (finished.size() >= width) {
    // early_stopping = false: stop when the best live beam, scored as it stands, cannot beat
    // the worst finished beam that is kept.
    out.done = finished[width - 1].score >= candidates[running.front()].score;
  }
  if (!out.done) {
    running.resize(std::min(width, running.size()));
    out.continuing = std::move(running);
  }
  return out;
}

}  // namespace pagedserve::actors
