// sampling_distribution against a hand computation and against the sampler itself: over many
// seeds, sample_token's draws (an independent, bucketed implementation of the same definition)
// have the distribution's frequencies, and never land where it puts no mass.
#include "model/sampling_distribution.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "model/sampler.h"

namespace pagedserve::model {
namespace {

TEST(SamplingDistribution, TopPByHand) {
  const std::vector<float> logits = {1.0f, 2.0f, 0.0f, -1.0f};
  SamplingParams params;
  params.top_p = 0.7f;  // softmax: 0.644 (id 1) < 0.7, then + 0.237 (id 0) reaches it
  std::vector<float> probs;
  sampling_distribution(logits, params, probs);
  const double e1 = std::exp(1.0), e2 = std::exp(2.0);
  EXPECT_NEAR(probs[1], e2 / (e1 + e2), 1e-6);
  EXPECT_NEAR(probs[0], e1 / (e1 + e2), 1e-6);
  EXPECT_EQ(probs[2], 0.0f);
  EXPECT_EQ(probs[3], 0.0f);

  params = {};
  params.temperature = 0.5f;  // no filter: softmax of logits / 0.5
  sampling_distribution(logits, params, probs);
  double total = 0;
  for (float l : logits) total += std::exp(2.0 * l);
  for (size_t i = 0; i < logits.size(); ++i) {
    EXPECT_NEAR(probs[i], std::exp(2.0 * logits[i]) / total, 1e-6);
  }
  params.temperature = 0.0f;  // greedy: the first maximum
  sampling_distribution(std::vector<float>{0.0f, 3.0f, 3.0f}, params, probs);
  EXPECT_EQ(probs, (std::vector<float>{0.0f, 1.0f, 0.0f}));
  EXPECT_EQ(sample_from_distribution(probs, 0.99), 1);
  EXPECT_EQ(sample_from_distribution(std::vector<float>(3, 0.0f), 0.5), -1);
}

TEST(SamplingDistribution, SampleTokenDrawsWithItsFrequencies) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(500);
  for (float& l : logits) l = normal(rng);
  logits[17] = -std::numeric_limits<float>::infinity();
  std::vector<SamplingParams> all(5);
  all[1].temperature = 0.7f;
  all[1].top_k = 20;
  all[2].top_p = 0.8f;
  all[3].min_p = 0.1f;
  all[3].temperature = 1.3f;
  all[4].top_k = 50;
  all[4].top_p = 0.9f;
  all[4].min_p = 0.02f;
  constexpr int kDraws = 20000;
  for (size_t c = 0; c < all.size(); ++c) {
    std::vector<float> probs;
    sampling_distribution(logits, all[c], probs);
    double total = 0;
    for (float p : probs) total += p;
    EXPECT_NEAR(total, 1.0, 1e-5) << "params " << c;
    std::vector<int> counts(logits.size());
    for (int s = 0; s < kDraws; ++s) {
      ++counts[static_cast<size_t>(sample_token(logits, all[c], 1234 + c, s))];
    }
    for (size_t t = 0; t < logits.size(); ++t) {
      if (probs[t] == 0.0f) {
        EXPECT_EQ(counts[t], 0) << "params " << c << ": token " << t << " has no mass";
        continue;
      }
      const double expected = kDraws * probs[t];
      const double sigma = std::sqrt(expected * (1 - probs[t]));
      EXPECT_NEAR(counts[t], expected, 5 * sigma + 1) << "params " << c << ": token " << t;
    }
  }
}

}  // namespace
}  // namespace pagedserve::model
