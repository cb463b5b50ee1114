// sampling_distribution: the sorted definition of model/sampler.h written out as probabilities.
// The cuts need the order of the most likely tokens only, so candidates are the tokens within
// kTailNats of the maximum (all of them when that is not enough for top-p).
#include "model/sampling_distribution.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace pagedserve::model {

namespace {

constexpr double kTailNats = 40.0;

struct Candidate {
  double logit;  // scaled by the temperature
  int32_t id;
};

bool by_logit_desc(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

int32_t first_max(std::span<const float> logits) {
  int32_t best = -1;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (!std::isfinite(logits[i])) continue;
    if (best < 0 || logits[i] > logits[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
  }
  return best;
}

// The candidates sorted, each with its softmax probability over the whole row.
std::vector<std::pair<Candidate, double>> sorted_candidates(std::span<const float> logits,
                                                            double temperature, double max_logit,
                                                            double total, double min_logit) {
  std::vector<std::pair<Candidate, double>> out;
  for (size_t i = 0; i < logits.size(); ++i) {
    const double scaled = static_cast<double>(logits[i]) / temperature;
    if (!(scaled >= min_logit)) continue;  // NaN and -inf too
    out.push_back({{scaled, static_cast<int32_t>(i)}, std::exp(scaled - max_logit) / total});
  }
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return by_logit_desc(a.first, b.first); });
  return out;
}

}  // namespace

void sampling_distribution(std::span<const float> logits, const SamplingParams& params,
                           std::vector<float>& probs) {
  probs.assign(logits.size(), 0.0f);
  const int32_t argmax = first_max(logits);
  if (argmax < 0) return;
  if (params.is_greedy()) {
    probs[static_cast<size_t>(argmax)] = 1.0f;
    return;
  }
  const double temperature = params.temperature;
  const double max_logit = static_cast<double>(logits[static_cast<size_t>(argmax)]) / temperature;
  double total = 0.0;
  for (float logit : logits) {
    const double scaled = static_cast<double>(logit) / temperature;
    if (scaled >= -std::numeric_limits<double>::infinity()) total += std::exp(scaled - max_logit);
  }
  const int vocab = static_cast<int>(logits.size());
  const bool top_k = params.top_k > 0 && params.top_k < vocab;
  if (!top_k && params.top_p >= 1.0f && params.min_p <= 0.0f) {
    for (size_t i = 0; i < logits.size(); ++i) {
      const double scaled = static_cast<double>(logits[i]) / temperature;
      probs[i] =
          std::isnan(scaled) ? 0.0f : static_cast<float>(std::exp(scaled - max_logit) / total);
    }
    return;
  }
  auto candidates = sorted_candidates(logits, temperature, max_logit, total, max_logit - kTailNats);
  double head_mass = 0.0;
  for (const auto& c : candidates) head_mass += c.second;
  if (!top_k && params.top_p < 1.0f && head_mass < params.top_p) {
    candidates = sorted_candidates(logits, temperature, max_logit, total,
                                   -std::numeric_limits<double>::infinity());
  }
  // Top-k, then renormalise over what remains (the sorted definition's softmax of the kept).
  if (top_k && candidates.size() > static_cast<size_t>(params.top_k)) {
    candidates.resize(static_cast<size_t>(params.top_k));
  }
  double kept = 0.0;
  for (const auto& c : candidates) kept += c.second;
  for (auto& c : candidates) c.second /= kept;
  size_t n = candidates.size();
  if (params.top_p < 1.0f) {  // the smallest prefix whose mass reaches top_p
    double cumulative = 0.0;
    size_t i = 0;
    while (i < n) {
      cumulative += candidates[i++].second;
      if (cumulative >= params.top_p) break;
    }
    n = i;
  }
  if (params.min_p > 0.0f) {  // tokens less likely than min_p times the most likely one
    const double threshold = params.min_p * candidates.front().second;
    size_t i = 0;
    while (i < n && candidates[i].second >= threshold) ++i;
    n = std::max<size_t>(i, 1);
  }
  double mass = 0.0;
  for (size_t i = 0; i < n; ++i) mass += candidates[i].second;
  for (size_t i = 0; i < n; ++i) {
    probs[static_cast<size_t>(candidates[i].first.id)] =
        static_cast<float>(candidates[i].second / mass);
  }
}

int32_t sample_from_distribution(std::span<const float> probs, double u) {
  double total = 0.0;
  for (float p : probs) total += p;
  const double target = u * total;
  double cumulative = 0.0;
  int32_t last = -1;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] <= 0.0f) continue;
    cumulative += probs[i];
    last = static_cast<int32_t>(i);
    if (target < cumulative) return last;
  }
  return last;
}

}  // namespace pagedserve::model
