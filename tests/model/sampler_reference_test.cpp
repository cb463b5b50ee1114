// The sampler against its definition, written here as the plain full-sort algorithm: sort
// the scaled row, cut with top-k, top-p and min-p, walk the CDF at uniform_from_counter. The
// sampler buckets the row instead of sorting it; every draw must pick the same token, across
// vocabulary sizes, temperatures, filter combinations, peaked and flat rows, ties and banned
// (-inf) tokens. Also: the logprob it returns with the token, and the sparse penalties
// against a dense reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cpu/sampling_rows.h"
#include "model/sampler.h"

namespace pagedserve::model {
namespace {

// The sorted definition, written out independently of model/sampler.cpp: sort the whole row,
// keep the top k, softmax, cut by top-p and min-p, then invert the sequential cumulative sums
// at u times the kept mass. Sorted and cut once, so one row serves many draws.
class SortedReference {
 public:
  SortedReference(const std::vector<float>& logits, const SamplingParams& p) {
    const int vocab = static_cast<int>(logits.size());
    for (int i = 0; i < vocab; ++i) c_.push_back({logits[i] / p.temperature, i});
    std::sort(c_.begin(), c_.end(), [](const auto& a, const auto& b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    });
    if (p.top_k > 0 && p.top_k < vocab) c_.resize(static_cast<size_t>(p.top_k));
    std::vector<double> probs(c_.size());
    double total = 0.0;
    for (size_t i = 0; i < c_.size(); ++i) {
      probs[i] = std::exp(static_cast<double>(c_[i].first) - c_[0].first);
      total += probs[i];
    }
    for (double& q : probs) q /= total;
    size_t n = probs.size();
    if (p.top_p < 1.0f) {
      double cum = 0.0;
      for (n = 0; n < probs.size();) {
        cum += probs[n++];
        if (cum >= p.top_p) break;
      }
    }
    if (p.min_p > 0.0f) {
      size_t m = 0;
      while (m < n && probs[m] >= p.min_p * probs[0]) ++m;
      n = std::max<size_t>(m, 1);
    }
    mass_ = std::accumulate(probs.begin(), probs.begin() + n, 0.0);
    double cum = 0.0;
    for (size_t i = 0; i < n; ++i) cum_.push_back(cum += probs[i]);
  }
  int32_t draw(double u) const {
    const auto it = std::upper_bound(cum_.begin(), cum_.end(), u * mass_);
    return c_[std::min<size_t>(it - cum_.begin(), cum_.size() - 1)].second;
  }

 private:
  std::vector<std::pair<float, int32_t>> c_;
  std::vector<double> cum_;
  double mass_ = 0.0;
};

int32_t reference_sample(const std::vector<float>& logits, const SamplingParams& p, uint64_t seed,
                         uint64_t step) {
  return SortedReference(logits, p).draw(uniform_from_counter(seed, step));
}

enum class Shape { kFlat, kGaussian, kPeaked };

// kFlat: what a random-weight model gives (every token within a few nats); kGaussian: ties
// from rounding; kPeaked: a trained model's few likely tokens over a long tail.
std::vector<float> make_row(int vocab, Shape shape, std::mt19937& rng) {
  std::vector<float> x(static_cast<size_t>(vocab));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : x) {
    const float z = normal(rng);
    switch (shape) {
      case Shape::kFlat:
        v = 0.4f * z;
        break;
      case Shape::kGaussian:
        v = std::round(3.0f * z * 4.0f) / 4.0f;
        break;
      case Shape::kPeaked:
        v = 2.0f * z - 10.0f;
        break;
    }
  }
  if (shape == Shape::kPeaked) {
    for (int i = 0; i < 6; ++i) x[std::uniform_int_distribution<int>(0, vocab - 1)(rng)] = 8.0f - i;
  }
  for (int i = 0; i < 4; ++i) {
    x[std::uniform_int_distribution<int>(0, vocab - 1)(rng)] =
        -std::numeric_limits<float>::infinity();
  }
  return x;
}

struct Filters {
  int top_k;
  float top_p;
  float min_p;
};

TEST(SamplerReference, EveryDrawPicksTheFullSortsToken) {
  std::mt19937 rng(2026);
  const Filters filters[] = {{0, 1.0f, 0.0f},  {0, 0.9f, 0.0f},   {0, 0.5f, 0.0f},
                             {0, 0.02f, 0.0f}, {0, 1.0f, 0.05f},  {0, 1.0f, 0.5f},
                             {0, 0.95f, 0.1f}, {40, 1.0f, 0.0f},  {40, 0.9f, 0.05f},
                             {5, 0.8f, 0.0f},  {1000, 0.9f, 0.0f}};
  int draws = 0;
  for (int vocab : {50, 1000, 32000, 128256}) {
    // The reference sorts the whole row per draw: fewer draws on the big rows keep this quick.
    for (Shape shape : {Shape::kFlat, Shape::kGaussian, Shape::kPeaked}) {
      const std::vector<float> logits = make_row(vocab, shape, rng);
      for (float temperature : {0.3f, 1.0f, 1.6f}) {
        for (const Filters& f : filters) {
          SamplingParams p;
          p.temperature = temperature;
          p.top_k = f.top_k;
          p.top_p = f.top_p;
          p.min_p = f.min_p;
          const int num_draws = vocab >= 100000 ? 2 : vocab >= 32000 ? 6 : 40;
          for (int d = 0; d < num_draws; ++d) {
            const uint64_t seed = rng();
            ASSERT_EQ(sample_token(logits, p, seed, d), reference_sample(logits, p, seed, d))
                << "vocab " << vocab << " shape " << static_cast<int>(shape) << " T " << temperature
                << " top_k " << f.top_k << " top_p " << f.top_p << " min_p " << f.min_p << " draw "
                << d;
            ++draws;
          }
        }
      }
    }
  }
  EXPECT_GT(draws, 2500);
}

// Masked rows (a grammar's mask): most tokens -inf, from a single one left to more than the
// sampler's few-candidate limit (1,024), with every filter; and the logprob of the draw.
TEST(SamplerReference, MaskedRowsMatchTheFullSort) {
  std::mt19937 rng(1717);
  const Filters filters[] = {{0, 1.0f, 0.0f}, {0, 0.9f, 0.0f}, {0, 1.0f, 0.1f}, {3, 0.8f, 0.0f}};
  for (int left : {1, 2, 7, 300, 1024, 1025, 5000}) {
    for (Shape shape : {Shape::kFlat, Shape::kGaussian, Shape::kPeaked}) {
      const std::vector<float> full = make_row(32000, shape, rng);
      std::vector<float> logits(full.size(), -std::numeric_limits<float>::infinity());
      for (int i = 0; i < left; ++i) {
        const size_t id = std::uniform_int_distribution<size_t>(0, full.size() - 1)(rng);
        logits[id] = std::isfinite(full[id]) ? full[id] : 0.5f;
      }
      for (float temperature : {0.7f, 1.0f}) {
        for (const Filters& f : filters) {
          SamplingParams p;
          p.temperature = temperature;
          p.top_k = f.top_k;
          p.top_p = f.top_p;
          p.min_p = f.min_p;
          for (int d = 0; d < 8; ++d) {
            const uint64_t seed = rng();
            const TokenLogprob t = sample_token_logprob(logits, p, seed, d);
            ASSERT_EQ(t.token_id, reference_sample(logits, p, seed, d))
                << "left " << left << " shape " << static_cast<int>(shape) << " T " << temperature
                << " top_k " << f.top_k << " top_p " << f.top_p << " min_p " << f.min_p << " draw "
                << d;
            EXPECT_NEAR(t.logprob, token_logprob(logits, t.token_id), 1e-5);
            EXPECT_TRUE(std::isfinite(logits[t.token_id]));
          }
        }
      }
    }
  }
}

TEST(SamplerReference, DrawsNearTheTopOfTheRangeStillMatch) {
  // Seeds whose uniform lands in the last 1e-3 of [0, 1): the walk reaches the tail buckets.
  std::mt19937 rng(7);
  const std::vector<float> logits = make_row(32000, Shape::kPeaked, rng);
  SamplingParams p;
  int found = 0;
  for (uint64_t seed = 0; found < 5 && seed < 200000; ++seed) {
    if (uniform_from_counter(seed, 0) < 0.999) continue;
    ++found;
    EXPECT_EQ(sample_token(logits, p, seed, 0), reference_sample(logits, p, seed, 0));
  }
  EXPECT_EQ(found, 5);
}

TEST(SamplerReference, TiesAndDegenerateBucketsMatchTheFullSort) {
  // Rows whose opened buckets split into sub-buckets in awkward ways: a finely quantised flat
  // row (ties in every bucket, some at sub-bucket edges), a row half of which is one tied
  // logit (a bucket that is one sub-bucket), a nearly constant row (the narrowest spread), and
  // a peaked row over a tail whose exps underflow to 0 (sub-buckets of mass zero).
  std::mt19937 rng(31);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::vector<float>> rows(4, std::vector<float>(32000));
  for (size_t i = 0; i < 32000; ++i) {
    const float z = normal(rng);
    rows[0][i] = std::round(0.4f * z * 4096.0f) / 4096.0f;
    rows[1][i] = i % 2 == 0 ? 0.25f : 0.4f * z;
    rows[2][i] = i % 3 == 0 ? 1.0f : 1.0f - 1e-6f * static_cast<float>(i % 5);
    rows[3][i] = i % 7 == 0 ? -1000.0f : 2.0f * z - 10.0f;
  }
  rows[3][17] = 8.0f;
  rows[3][99] = -std::numeric_limits<float>::infinity();
  const Filters filters[] = {{0, 1.0f, 0.0f},  {0, 0.9f, 0.0f},  {0, 0.3f, 0.0f},
                             {0, 1.0f, 0.05f}, {0, 1.0f, 0.9f},  {0, 0.95f, 0.1f},
                             {40, 1.0f, 0.0f}, {40, 0.9f, 0.05f}};
  // Uniforms spread over [0, 1) and a few in its last 1e-3 (the walk reaches the tail).
  std::vector<uint64_t> seeds;
  for (uint64_t seed = 0; seeds.size() < 8; ++seed) seeds.push_back(rng());
  for (uint64_t seed = 0; seeds.size() < 11; ++seed) {
    if (uniform_from_counter(seed, 0) >= 0.999) seeds.push_back(seed);
  }
  for (size_t r = 0; r < rows.size(); ++r) {
    for (float temperature : {0.5f, 1.0f}) {
      for (const Filters& f : filters) {
        SamplingParams p;
        p.temperature = temperature;
        p.top_k = f.top_k;
        p.top_p = f.top_p;
        p.min_p = f.min_p;
        for (uint64_t seed : seeds) {
          ASSERT_EQ(sample_token(rows[r], p, seed, 0), reference_sample(rows[r], p, seed, 0))
              << "row " << r << " T " << temperature << " top_k " << f.top_k << " top_p " << f.top_p
              << " min_p " << f.min_p << " seed " << seed;
        }
      }
    }
  }
}

TEST(SamplerReference, ManyDrawsFromFlatRowsMatch) {
  // Flat 128k rows are where float masses most often leave a draw or a cut undecided (tokens
  // of ~1e-5 each, within the masses' error of a boundary): many draws on one row each.
  std::mt19937 rng(77);
  for (Shape shape : {Shape::kFlat, Shape::kGaussian}) {
    const std::vector<float> logits = make_row(128256, shape, rng);
    for (const Filters& f : {Filters{0, 1.0f, 0.0f}, Filters{0, 0.9f, 0.0f},
                             Filters{0, 1.0f, 0.05f}, Filters{0, 0.6f, 0.3f}}) {
      SamplingParams p;
      p.top_p = f.top_p;
      p.min_p = f.min_p;
      const SortedReference reference(logits, p);
      for (uint64_t step = 0; step < 400; ++step) {
        ASSERT_EQ(sample_token(logits, p, 3, step), reference.draw(uniform_from_counter(3, step)))
            << "shape " << static_cast<int>(shape) << " top_p " << f.top_p << " min_p " << f.min_p
            << " step " << step;
      }
    }
  }
}

TEST(SamplerReference, TheReturnedLogprobIsTheRawLogSoftmax) {
  std::mt19937 rng(5);
  for (Shape shape : {Shape::kFlat, Shape::kPeaked}) {
    const std::vector<float> logits = make_row(32000, shape, rng);
    double max_logit = -std::numeric_limits<double>::infinity();
    for (float l : logits) max_logit = std::max<double>(max_logit, l);
    double z = 0.0;
    for (float l : logits) z += std::exp(l - max_logit);
    const double lse = max_logit + std::log(z);
    for (float temperature : {0.0f, 0.7f, 1.0f}) {
      for (int top_k : {0, 20}) {
        SamplingParams p;
        p.temperature = temperature;
        p.top_k = top_k;
        const TokenLogprob t = sample_token_logprob(logits, p, 99, 3);
        EXPECT_EQ(t.token_id, sample_token(logits, p, 99, 3));
        EXPECT_NEAR(t.logprob, logits[t.token_id] - lse, 1e-5);
        EXPECT_NEAR(token_logprob(logits, t.token_id), logits[t.token_id] - lse, 1e-5);
      }
    }
  }
}

// sample_tokens (no logprob: the executor's call when the request ranks nothing by logprob)
// draws each seed's token by the definition, greedy and sampled, with the next row prefetched,
// and draws the same given the row's chunk maxima (a greedy row then reads one chunk).
TEST(SamplerReference, SampleTokensDrawsEverySeedByTheDefinition) {
  constexpr int kChunk = 64;
  std::mt19937 rng(11);
  int draws = 0;
  for (int vocab : {1000, 32000}) {
    for (Shape shape : {Shape::kFlat, Shape::kPeaked}) {
      const std::vector<float> logits = make_row(vocab, shape, rng);
      const std::vector<float> next = make_row(vocab, shape, rng);
      std::vector<float> chunk_max;  // scanned here: the largest of each chunk
      for (int first = 0; first < vocab; first += kChunk) {
        float top = -std::numeric_limits<float>::infinity();
        for (int i = first; i < std::min(vocab, first + kChunk); ++i) {
          if (!std::isnan(logits[i])) top = std::max(top, logits[i]);
        }
        chunk_max.push_back(top);
      }
      for (float temperature : {0.0f, 0.7f, 1.0f}) {
        for (float top_p : {1.0f, 0.9f}) {
          SamplingParams p;
          p.temperature = temperature;
          p.top_p = top_p;
          const std::vector<uint64_t> seeds = {rng(), rng(), rng()};
          const std::vector<int32_t> got = sample_tokens(logits, p, seeds, 5, next.data());
          ASSERT_EQ(got.size(), seeds.size());
          // With the row's chunk maxima (what the LM head takes for greedy rows): the same.
          const kernels::RowChunkMaxima row{chunk_max.data(), kChunk};
          EXPECT_EQ(sample_tokens(logits, p, seeds, 5, next.data(), row), got);
          EXPECT_EQ(sample_tokens_logprob(logits, p, seeds, 5, next.data(), row)[0].token_id,
                    got[0]);
          for (size_t s = 0; s < seeds.size(); ++s) {
            const int32_t expected =
                temperature == 0.0f
                    ? static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) -
                                           logits.begin())
                    : reference_sample(logits, p, seeds[s], 5);
            EXPECT_EQ(got[s], expected) << "vocab " << vocab << " T " << temperature;
            ++draws;
          }
        }
      }
    }
  }
  EXPECT_EQ(draws, 72);
}

TEST(SamplerReference, SparsePenaltiesMatchTheDenseDefinition) {
  std::mt19937 rng(8);
  for (int trial = 0; trial < 50; ++trial) {
    const int vocab = 500;
    std::vector<float> logits(vocab);
    for (float& l : logits) l = std::normal_distribution<float>(0.0f, 2.0f)(rng);
    std::vector<int32_t> prompt(30), output(40);
    for (int32_t& id : prompt) id = std::uniform_int_distribution<int32_t>(-5, vocab + 5)(rng);
    for (int32_t& id : output) id = std::uniform_int_distribution<int32_t>(0, 60)(rng);
    SamplingParams p;
    p.repetition_penalty = 1.3f;
    p.presence_penalty = 0.4f;
    p.frequency_penalty = -0.3f;

    std::vector<float> want = logits;
    for (int id = 0; id < vocab; ++id) {
      const bool seen = std::count(prompt.begin(), prompt.end(), id) > 0 ||
                        std::count(output.begin(), output.end(), id) > 0;
      if (seen) want[id] = want[id] > 0 ? want[id] / 1.3f : want[id] * 1.3f;
      const auto count = std::count(output.begin(), output.end(), id);
      if (count > 0) want[id] -= -0.3f * static_cast<float>(count) + 0.4f;
    }
    std::vector<float> got = logits;
    apply_penalties(got, p, prompt, output);
    EXPECT_EQ(got, want) << "trial " << trial;
  }
}

}  // namespace
}  // namespace pagedserve::model
