// The distribution a sampling row draws from, as a dense vector: what speculative decoding's
// rejection rule needs of the draft's proposals (q) and of the target's verifying rows (p), where
// the sampler (model/sampler.h) only ever needs one draw. Pure.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/sampling_params.h"

namespace pagedserve::model {

// Fills probs[vocab] with the probabilities sample_token's sorted definition draws from: the
// logits divided by the temperature, softmax, cut by top-k, top-p and min-p (in that order, each
// relative to what remains), renormalised; 0 for every cut token. Greedy params (and a row with
// no finite maximum) give 1 at the first maximum. O(vocabulary) without top-k, top-p or min-p;
// with them, only tokens within kTailNats (scaled) of the maximum are sorted, unless their mass
// falls short of top_p, when the whole row is. Tokens further below carry less than e^-40 of
// the maximum's probability each and are dropped by the cuts.
void sampling_distribution(std::span<const float> logits, const SamplingParams& params,
                           std::vector<float>& probs);

// Inverse CDF: the first token whose cumulative probability exceeds u times the row's total
// mass (which need not be 1), or the last token with mass when rounding runs past it. -1 when
// every probability is 0.
int32_t sample_from_distribution(std::span<const float> probs, double u);

}  // namespace pagedserve::model
