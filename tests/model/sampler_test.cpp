// Sampler: greedy, seeds, and that each filter keeps exactly the tokens it should, checked
// by drawing many samples and comparing frequencies with probabilities computed in the test.
#include "model/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <set>

namespace pagedserve::model {
namespace {

std::vector<float> random_logits(int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(vocab);
  for (float& x : logits) x = normal(rng);
  return logits;
}

std::map<int32_t, int> histogram(const std::vector<float>& logits, const SamplingParams& p,
                                 int draws, uint64_t seed) {
  std::map<int32_t, int> counts;
  for (int i = 0; i < draws; ++i) ++counts[sample_token(logits, p, seed, i)];
  return counts;
}

TEST(Sampler, GreedyPicksTheArgmaxAndLowestIdOnTies) {
  std::vector<float> logits = {0.5f, 3.0f, -1.0f, 3.0f};
  SamplingParams p;
  p.temperature = 0.0f;
  EXPECT_EQ(sample_token(logits, p, 1, 0), 1);
  logits[3] = 3.5f;
  EXPECT_EQ(sample_token(logits, p, 1, 0), 3);
}

TEST(Sampler, TopKOneEqualsGreedyWhateverTheSeed) {
  for (uint32_t s = 0; s < 20; ++s) {
    const auto logits = random_logits(300, s);
    SamplingParams greedy;
    greedy.temperature = 0.0f;
    SamplingParams top1;
    top1.temperature = 1.3f;
    top1.top_k = 1;
    EXPECT_EQ(sample_token(logits, top1, s * 77, s), sample_token(logits, greedy, 0, 0));
  }
}

TEST(Sampler, SameSeedAndStepSameTokenDifferentSeedsDiffer) {
  const auto logits = random_logits(500, 3);
  SamplingParams p;
  std::set<int32_t> seen;
  for (uint64_t step = 0; step < 50; ++step) {
    const int32_t a = sample_token(logits, p, 42, step);
    EXPECT_EQ(a, sample_token(logits, p, 42, step));
    seen.insert(a);
  }
  EXPECT_GT(seen.size(), 5u) << "draws across steps should vary";
  int differ = 0;
  for (uint64_t seed = 0; seed < 50; ++seed) {
    differ += sample_token(logits, p, seed, 0) != sample_token(logits, p, seed + 1000, 0);
  }
  EXPECT_GT(differ, 25);
}

TEST(Sampler, FrequenciesFollowTheSoftmaxAtTheTemperature) {
  const std::vector<float> logits = {1.0f, 2.0f, 0.0f, 1.5f};
  SamplingParams p;
  p.temperature = 0.7f;
  const int draws = 40000;
  const auto counts = histogram(logits, p, draws, 9);
  double z = 0;
  for (float l : logits) z += std::exp(l / 0.7);
  for (int i = 0; i < 4; ++i) {
    const double expected = std::exp(logits[i] / 0.7) / z;
    const double observed = counts.count(i) ? counts.at(i) / static_cast<double>(draws) : 0.0;
    EXPECT_NEAR(observed, expected, 0.01) << "token " << i;
  }
}

TEST(Sampler, TopKKeepsOnlyTheKLargest) {
  const auto logits = random_logits(200, 5);
  SamplingParams p;
  p.top_k = 5;
  std::vector<int> order(logits.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  const std::set<int32_t> allowed(order.begin(), order.begin() + 5);
  for (const auto& [token, n] : histogram(logits, p, 3000, 1)) {
    EXPECT_TRUE(allowed.count(token)) << "token " << token << " is outside the top 5";
  }
}

TEST(Sampler, TopPKeepsTheSmallestPrefixReachingP) {
  // Probabilities 0.5, 0.3, 0.15, 0.05: top_p 0.75 keeps the first two only.
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f),
                                     std::log(0.05f)};
  SamplingParams p;
  p.top_p = 0.75f;
  const auto counts = histogram(logits, p, 20000, 2);
  EXPECT_EQ(counts.count(2) + counts.count(3), 0u);
  EXPECT_NEAR(counts.at(0) / 20000.0, 0.5 / 0.8, 0.015);
}

TEST(Sampler, MinPDropsTokensBelowTheScaledMaximum) {
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f),
                                     std::log(0.05f)};
  SamplingParams p;
  p.min_p = 0.25f;  // threshold 0.125: keeps 0.5, 0.3, 0.15
  const auto counts = histogram(logits, p, 20000, 4);
  EXPECT_EQ(counts.count(3), 0u);
  EXPECT_GT(counts.at(2), 0);
}

TEST(Sampler, ValidateNamesTheBadField) {
  SamplingParams p;
  EXPECT_EQ(p.validate(), "");
  p.top_p = 0.0f;
  EXPECT_NE(p.validate().find("top_p"), std::string::npos);
  p = {};
  p.temperature = -1.0f;
  EXPECT_NE(p.validate().find("temperature"), std::string::npos);
  p = {};
  p.max_tokens = 0;
  EXPECT_NE(p.validate().find("max_tokens"), std::string::npos);
  p = {};
  p.min_p = 1.5f;
  EXPECT_NE(p.validate().find("min_p"), std::string::npos);
  p = {};
  p.top_k = -2;
  EXPECT_NE(p.validate().find("top_k"), std::string::npos);
}

}  // namespace
}  // namespace pagedserve::model

namespace pagedserve::model {
namespace {

TEST(Penalties, MatchTheirDefinitions) {
  const std::vector<float> logits = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f};
  const std::vector<int32_t> prompt = {4};
  const std::vector<int32_t> output = {0, 0, 2};
  SamplingParams p;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  p.repetition_penalty = 2.0f;
  std::vector<float> got = logits;
  apply_penalties(got, p, prompt, output);
  // token 0: seen twice in the output, positive: 2/2 - (0.25*2 + 0.5) = 0.
  EXPECT_FLOAT_EQ(got[0], 0.0f);
  EXPECT_FLOAT_EQ(got[1], -1.0f);                    // never seen
  EXPECT_FLOAT_EQ(got[2], 0.5f / 2 - 0.25f - 0.5f);  // once in the output
  EXPECT_FLOAT_EQ(got[3], 3.0f);                     // never seen
  EXPECT_FLOAT_EQ(got[4], -2.0f * 2);                // prompt only: repetition, negative
}

TEST(Penalties, OffLeavesLogitsAlone) {
  std::vector<float> logits = {1.0f, 2.0f};
  const std::vector<int32_t> ids = {0, 1, 1};
  apply_penalties(logits, SamplingParams{}, ids, ids);
  EXPECT_EQ(logits, (std::vector<float>{1.0f, 2.0f}));
  SamplingParams bad;
  bad.repetition_penalty = 0.0f;
  EXPECT_NE(bad.validate().find("repetition_penalty"), std::string::npos);
  bad = {};
  bad.presence_penalty = 3.0f;
  EXPECT_NE(bad.validate().find("presence_penalty"), std::string::npos);
}

}  // namespace
}  // namespace pagedserve::model

namespace pagedserve::model {
namespace {

// sample_logprobs against a hand computation on a four-token row: logits {2, 1, 0, -1}, so
// log Z = log(e^2 + e^1 + e^0 + e^-1).
TEST(SampleLogprobs, MatchLogSoftmaxByHand) {
  const std::vector<float> logits = {1.0f, 2.0f, -1.0f, 0.0f};
  const double log_z = std::log(std::exp(2.0) + std::exp(1.0) + 1.0 + std::exp(-1.0));
  const int32_t drawn[2] = {2, 1};
  const std::vector<SampleLogprobs> out = sample_logprobs(logits, drawn, 2);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].sampled.token_id, 2);
  EXPECT_NEAR(out[0].sampled.logprob, -1.0 - log_z, 1e-6);
  EXPECT_EQ(out[1].sampled.token_id, 1);
  EXPECT_NEAR(out[1].sampled.logprob, 2.0 - log_z, 1e-6);
  for (const SampleLogprobs& entry : out) {
    ASSERT_EQ(entry.top.size(), 2u);
    EXPECT_EQ(entry.top[0].token_id, 1);
    EXPECT_NEAR(entry.top[0].logprob, 2.0 - log_z, 1e-6);
    EXPECT_EQ(entry.top[1].token_id, 0);
    EXPECT_NEAR(entry.top[1].logprob, 1.0 - log_z, 1e-6);
  }
  EXPECT_TRUE(sample_logprobs(logits, {}, 3).empty());
  EXPECT_EQ(sample_logprobs(logits, drawn, 0)[0].top.size(), 0u);
  EXPECT_EQ(sample_logprobs(logits, drawn, 99)[0].top.size(), 4u);  // clamped to the vocab
}

TEST(SampleLogprobs, ValidateRefusesBadCountsAndBeamSearch) {
  SamplingParams p;
  p.logprobs = -1;
  EXPECT_EQ(p.validate(), "logprobs must be in [0, 20], got -1");
  p.logprobs = 21;
  EXPECT_EQ(p.validate(), "logprobs must be in [0, 20], got 21");
  p.logprobs = 20;
  EXPECT_EQ(p.validate(), "");
  p.temperature = 0.0f;
  p.use_beam_search = true;
  p.n = 2;
  EXPECT_EQ(p.validate(), "logprobs is not supported with use_beam_search");
}

}  // namespace
}  // namespace pagedserve::model
