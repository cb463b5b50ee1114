// The band draw against the sorted definition written out here (sort the scaled row, softmax in
// double, invert the cumulative sums at u): every draw it decides must be the definition's
// token, and it must decide nearly all of them (otherwise the sampler silently pays for the
// bucketed draw it replaces). Rows: a random model's flat ones, a trained model's peaked ones,
// ties, sizes that are not multiples of the kernels' vectors or blocks, several temperatures.
#include "model/band_draw.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "model/sampler.h"

namespace pagedserve::model::sampling {
namespace {

// Top-p and min-p as vLLM applies them: the smallest prefix whose mass reaches top_p, then the
// prefix of that at least min_p times as likely as the top token, then the draw at u times the
// kept prefix's mass.
class Definition {
 public:
  Definition(const std::vector<float>& logits, float temperature, float top_p = 1.0f,
             float min_p = 0.0f) {
    for (size_t i = 0; i < logits.size(); ++i) {
      sorted_.push_back({logits[i] / temperature, static_cast<int32_t>(i)});
    }
    std::sort(sorted_.begin(), sorted_.end(), [](const auto& a, const auto& b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    });
    double total = 0.0;
    std::vector<double> p;
    for (const auto& [s, id] : sorted_) {
      p.push_back(std::exp(static_cast<double>(s) - sorted_[0].first));
      total += p.back();
    }
    double cumulative = 0.0;
    for (double q : p) cumulative_.push_back(cumulative += q / total);
    kept_ = cumulative_.size();
    if (top_p < 1.0f) {
      kept_ = static_cast<size_t>(
                  std::lower_bound(cumulative_.begin(), cumulative_.end(), double{top_p}) -
                  cumulative_.begin()) +
              1;
      kept_ = std::min(kept_, cumulative_.size());
    }
    if (min_p > 0.0f) {  // the prefix at least min_p times as likely as the top token
      size_t m = 0;
      while (m < kept_ && p[m] / total >= min_p * (p[0] / total)) ++m;
      kept_ = std::max<size_t>(m, 1);
    }
  }
  int32_t draw(double u) const {
    const double target = u * cumulative_[kept_ - 1];
    const auto it = std::upper_bound(cumulative_.begin(), cumulative_.begin() + kept_, target);
    return sorted_[std::min<size_t>(it - cumulative_.begin(), kept_ - 1)].second;
  }
  // A u `offset` from the k-th boundary of the cumulative distribution (below it when
  // negative). Past the double roundings of both sums (~1e-16 per term, 128k terms) from 1e-10
  // on; up to ~1e-6 closer than the float masses' error bound can tell, so the draw must be
  // left to the exact pass whenever the float masses could be wrong.
  double near_boundary(size_t k, double offset) const {
    return std::max(0.0, (cumulative_[std::min(k, kept_ - 1)] + offset) / cumulative_[kept_ - 1]);
  }
  size_t size() const { return kept_; }

 private:
  std::vector<std::pair<float, int32_t>> sorted_;
  std::vector<double> cumulative_;
  size_t kept_ = 0;
};

enum class Shape { kFlat, kPeaked, kTies, kWide };

std::vector<float> make_row(int vocab, Shape shape, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(vocab));
  for (float& v : x) {
    switch (shape) {
      case Shape::kFlat:
        v = 0.4f * normal(rng);
        break;
      case Shape::kPeaked:
        v = 2.0f * normal(rng) - 10.0f;
        break;
      case Shape::kTies:
        v = std::round(normal(rng) * 4.0f) / 4.0f;
        break;
      case Shape::kWide:  // a long tail and no spikes: bands of some hundreds of elements
        v = 3.0f * normal(rng);
        break;
    }
  }
  if (shape == Shape::kPeaked) {
    std::uniform_int_distribution<int> any(0, vocab - 1);
    for (int i = 0; i < 6; ++i) x[static_cast<size_t>(any(rng))] = 8.0f - static_cast<float>(i);
  }
  return x;
}

const char* name(Shape s) {
  switch (s) {
    case Shape::kFlat:
      return "flat";
    case Shape::kPeaked:
      return "peaked";
    case Shape::kTies:
      return "ties";
    case Shape::kWide:
      return "wide";
  }
  return "";
}

// Draws u (random, the ends, and just below boundaries of the cumulative distribution) of one
// row; every decided one must be the definition's. Returns how many were decided.
int check_draws(const std::vector<float>& row, float temperature, float top_p, std::mt19937& rng,
                const std::string& where, int* draws, float min_p = 0.0f) {
  const Definition definition(row, temperature, top_p, min_p);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  // (u within double rounding of 1 lands wherever rounding puts it, in both.)
  std::vector<double> us = {0.0, 1.0 - 1e-6};
  for (int i = 0; i < 60; ++i) us.push_back(uniform(rng));
  // Boundaries, at distances from far inside the float masses' error to past it: a draw the
  // float masses decide there must be right too (a tolerance narrower than their true error
  // fails here).
  for (size_t k : {size_t{0}, definition.size() / 3, definition.size() / 2}) {
    for (double offset : {1e-10, 3e-8, 1e-7, 3e-7, 1e-6}) {
      for (double sign : {-1.0, 1.0}) {
        const double u = definition.near_boundary(k, sign * offset);
        if (u < 1.0) us.push_back(u);  // (past the last kept token's boundary: no draw)
      }
    }
  }
  int decided = 0;
  for (double u : us) {
    const std::optional<BandDraw> got = band_draw(row, temperature, u, top_p, min_p);
    ++*draws;
    if (!got) continue;
    ++decided;
    EXPECT_EQ(got->token, definition.draw(u)) << where << " u " << u;
    EXPECT_EQ(got->row_max, *std::max_element(row.begin(), row.end())) << where;
  }
  return decided;
}

// Nearly all decided, counted over all rows: one row's subsample can be unlucky (its strided
// positions a few standard errors off the row), and then most of that row's draws miss the band.
TEST(BandDraw, EveryDecidedDrawIsTheDefinitionsAndNearlyAllAreDecided) {
  std::mt19937 rng(17);
  int decided = 0;
  int draws = 0;
  for (int vocab : {4099, 32000, 50257, 128256}) {
    for (Shape shape : {Shape::kFlat, Shape::kPeaked, Shape::kTies, Shape::kWide}) {
      for (float temperature : {1.0f, 0.7f, 1.6f}) {
        const std::vector<float> row = make_row(vocab, shape, rng);
        const std::string where = std::string(name(shape)) + " vocab " + std::to_string(vocab) +
                                  " T " + std::to_string(temperature);
        decided += check_draws(row, temperature, 1.0f, rng, where, &draws);
      }
    }
  }
  // Flat 128k rows leave ~10% of draws to the exact pass, which decides them too; a miss of
  // the band (the estimate's error past its margin) is rare.
  EXPECT_GE(decided, draws * 95 / 100);
}

// Top-p: a cut walk, then the draw's under it. Below a 64k vocabulary, rows whose bands would
// hold thousands of elements (flat, tied, and wide ones at top-p 0.9) are handed back to the
// bucketed draw before the band pass; a trained model's peaked rows are decided, and so are
// most draws from the wide rows of a 128k vocabulary.
TEST(BandDraw, TopPDrawsAreTheDefinitionsToo) {
  std::mt19937 rng(29);
  int decided_peaked = 0;
  int draws_peaked = 0;
  int decided_wide = 0;  // 128k rows but the peaked ones
  int draws_wide = 0;
  for (int vocab : {4099, 32000, 128256}) {
    for (Shape shape : {Shape::kFlat, Shape::kPeaked, Shape::kTies, Shape::kWide}) {
      for (float top_p : {0.9f, 0.95f, 0.5f, 0.05f}) {
        const float temperature = top_p == 0.5f ? 0.8f : 1.0f;
        const std::vector<float> row = make_row(vocab, shape, rng);
        const std::string where = std::string(name(shape)) + " vocab " + std::to_string(vocab) +
                                  " top_p " + std::to_string(top_p);
        int draws = 0;
        const int decided = check_draws(row, temperature, top_p, rng, where, &draws);
        if (shape == Shape::kPeaked) {
          decided_peaked += decided;
          draws_peaked += draws;
        } else if (vocab == 128256) {
          decided_wide += decided;
          draws_wide += draws;
        }
      }
    }
  }
  EXPECT_GE(decided_peaked, draws_peaked * 9 / 10);
  EXPECT_GE(decided_wide, draws_wide * 3 / 4) << decided_wide << " of " << draws_wide;
}

// Min-p: the cut is a known gap; the tokens near it get the exact test. Every shape is decided
// (the cut's band is narrow whatever the row).
TEST(BandDraw, MinPDrawsAreTheDefinitionsToo) {
  std::mt19937 rng(31);
  int decided = 0;
  int draws = 0;
  for (int vocab : {4099, 32000, 128256}) {
    for (Shape shape : {Shape::kFlat, Shape::kPeaked, Shape::kTies, Shape::kWide}) {
      for (float min_p : {0.05f, 0.3f, 0.9f}) {
        const float temperature = min_p == 0.3f ? 0.7f : 1.0f;
        const std::vector<float> row = make_row(vocab, shape, rng);
        const std::string where = std::string(name(shape)) + " vocab " + std::to_string(vocab) +
                                  " min_p " + std::to_string(min_p);
        decided += check_draws(row, temperature, 1.0f, rng, where, &draws, min_p);
      }
    }
  }
  EXPECT_GE(decided, draws * 9 / 10);
}

TEST(BandDraw, HandsBackRowsItDoesNotTake) {
  std::mt19937 rng(19);
  std::vector<float> row = make_row(8192, Shape::kFlat, rng);
  EXPECT_TRUE(band_draw(row, 1.0f, 0.5).has_value());
  std::vector<float> banned = row;
  banned[10] = -std::numeric_limits<float>::infinity();
  EXPECT_FALSE(band_draw(banned, 1.0f, 0.5).has_value());  // the few-candidates path's rows
  std::vector<float> nan = row;
  nan[100] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(band_draw(nan, 1.0f, 0.5).has_value());
  std::vector<float> wide = row;
  wide[5] = -100.0f;  // a spread past 80 nats
  EXPECT_FALSE(band_draw(wide, 1.0f, 0.5).has_value());
  EXPECT_FALSE(band_draw(row, 0.0f, 0.5).has_value());
  EXPECT_FALSE(band_draw(row, 1.0f, 0.5, 0.9f, 0.1f).has_value());  // top-p and min-p together
}

// Through the sampler (band draw, and the bucketed draw where it hands back): the same tokens
// as the definition, and the logprob at temperature 1 from the band pass's total.
TEST(BandDraw, TheSamplerDrawsTheDefinitionsTokenWithItsLogprob) {
  std::mt19937 rng(23);
  SamplingParams params;  // temperature 1, nothing filtered: the clients' default
  for (Shape shape : {Shape::kFlat, Shape::kPeaked}) {
    const std::vector<float> row = make_row(32000, shape, rng);
    const Definition definition(row, 1.0f);
    double log_total = 0.0;
    const float top = *std::max_element(row.begin(), row.end());
    for (float x : row) log_total += std::exp(static_cast<double>(x) - top);
    log_total = top + std::log(log_total);
    // The row sampled next, prefetched during this one's pass: a hint that changes nothing.
    const std::vector<float> next_row = make_row(32000, Shape::kFlat, rng);
    for (uint64_t step = 0; step < 200; ++step) {
      const uint64_t seed = 42;
      const TokenLogprob got = sample_token_logprob(row, params, seed, step);
      ASSERT_EQ(got.token_id, definition.draw(uniform_from_counter(42, step))) << name(shape);
      const double want = static_cast<double>(row[static_cast<size_t>(got.token_id)]) - log_total;
      EXPECT_NEAR(got.logprob, want, 1e-5) << name(shape);
      EXPECT_EQ(sample_tokens_logprob(row, params, std::span(&seed, 1), step, next_row.data())[0],
                got)
          << name(shape);
    }
  }
}

}  // namespace
}  // namespace pagedserve::model::sampling
