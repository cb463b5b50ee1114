// Sampler: greedy, temperature, top-k, top-p and min-p over one logits row.
#include "model/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace pagedserve::model {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

int32_t argmax(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

struct Candidate {
  float logit;
  int32_t id;
};

}  // namespace

std::string SamplingParams::validate() const {
  auto bad = [](const std::string& what) { return what; };
  if (!(temperature >= 0.0f) || !std::isfinite(temperature))
    return bad("temperature must be a finite number >= 0, got " + std::to_string(temperature));
  if (!(top_p > 0.0f && top_p <= 1.0f))
    return bad("top_p must be in (0, 1], got " + std::to_string(top_p));
  if (top_k < -1)
    return bad("top_k must be -1 (off), 0 (off) or positive, got " + std::to_string(top_k));
  if (!(min_p >= 0.0f && min_p <= 1.0f))
    return bad("min_p must be in [0, 1], got " + std::to_string(min_p));
  if (max_tokens < 1)
    return bad("max_tokens must be at least 1, got " + std::to_string(max_tokens));
  if (min_tokens < 0) return bad("min_tokens must be >= 0, got " + std::to_string(min_tokens));
  if (min_tokens > max_tokens)
    return bad("min_tokens (" + std::to_string(min_tokens) + ") must not exceed max_tokens (" +
               std::to_string(max_tokens) + ")");
  return {};
}

double uniform_from_counter(uint64_t seed, uint64_t step) {
  const uint64_t bits = splitmix64(seed ^ splitmix64(step + 0x632be59bd9b4e019ULL));
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

int32_t sample_token(std::span<const float> logits, const SamplingParams& params, uint64_t seed,
                     uint64_t step) {
  if (params.is_greedy()) return argmax(logits);

  const int vocab = static_cast<int>(logits.size());
  std::vector<Candidate> candidates(vocab);
  for (int i = 0; i < vocab; ++i) candidates[i] = {logits[i] / params.temperature, i};
  auto by_logit_desc = [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  };

  // Top-k keeps the k largest; the survivors are sorted so top-p can walk them in order.
  size_t keep = candidates.size();
  if (params.top_k > 0 && params.top_k < vocab) keep = static_cast<size_t>(params.top_k);
  std::partial_sort(candidates.begin(), candidates.begin() + keep, candidates.end(), by_logit_desc);
  candidates.resize(keep);

  std::vector<double> probs(candidates.size());
  const double max_logit = candidates.front().logit;
  double total = 0.0;
  for (size_t i = 0; i < candidates.size(); ++i) {
    probs[i] = std::exp(static_cast<double>(candidates[i].logit) - max_logit);
    total += probs[i];
  }
  for (double& p : probs) p /= total;

  // Top-p: the smallest prefix whose mass reaches top_p (at least one token).
  if (params.top_p < 1.0f) {
    double cumulative = 0.0;
    size_t n = 0;
    while (n < probs.size()) {
      cumulative += probs[n++];
      if (cumulative >= params.top_p) break;
    }
    probs.resize(n);
  }
  // Min-p: drop tokens less likely than min_p times the most likely one.
  if (params.min_p > 0.0f) {
    const double threshold = params.min_p * probs.front();
    size_t n = 0;
    while (n < probs.size() && probs[n] >= threshold) ++n;
    probs.resize(std::max<size_t>(n, 1));
  }

  const double mass = std::accumulate(probs.begin(), probs.end(), 0.0);
  const double target = uniform_from_counter(seed, step) * mass;
  double cumulative = 0.0;
  for (size_t i = 0; i < probs.size(); ++i) {
    cumulative += probs[i];
    if (target < cumulative) return candidates[i].id;
  }
  return candidates[probs.size() - 1].id;
}

}  // namespace pagedserve::model
