// The sampler's bucketed row: the invariants its walks rely on when they step over whole
// sub-buckets of an opened bucket. The sorted sub-buckets laid end to end are the bucket in
// the sorted order (ties never split across sub-buckets), each sub-bucket's mass is the sum
// of its elements' double exps, and every element clears its sub-bucket's min_ratio bound.
#include "model/bucketed_row.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace pagedserve::model::sampling {
namespace {

std::vector<float> row_of(int vocab, int kind, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(vocab));
  for (size_t i = 0; i < x.size(); ++i) {
    const float z = normal(rng);
    switch (kind) {
      case 0:  // flat, what a random model gives
        x[i] = 0.4f * z;
        break;
      case 1:  // flat and finely quantised: many ties, some at sub-bucket edges
        x[i] = std::round(0.4f * z * 4096.0f) / 4096.0f;
        break;
      case 2:  // half the row one tied logit
        x[i] = i % 2 == 0 ? 0.25f : 0.4f * z;
        break;
      default:  // peaked, over a tail past the bucketed range and some banned tokens
        x[i] = i % 97 == 0   ? -std::numeric_limits<float>::infinity()
               : i % 13 == 0 ? -1000.0f
                             : 2.0f * z - 10.0f;
        break;
    }
  }
  if (kind == 3) x[5] = 8.0f;
  return x;
}

TEST(BucketedRow, SortedSubBucketsAreTheSortedBucketWithExactMasses) {
  std::mt19937 rng(11);
  for (int kind = 0; kind < 4; ++kind) {
    const std::vector<float> logits = row_of(20000, kind, rng);
    for (float temperature : {0.5f, 1.0f}) {
      const kernels::RowRange range = kernels::row_min_max(logits.data(), 20000);
      BucketedRow row(logits, temperature, range, Masses::kDouble);
      const double max_scaled = static_cast<double>(range.max / temperature);
      size_t seen = 0;
      for (int b = 0; b < kNumBuckets; ++b) {
        std::vector<Candidate> want = row.gather(b, b);
        std::sort(want.begin(), want.end(), by_logit_desc);
        ASSERT_EQ(row.size(b), want.size());
        seen += want.size();
        std::vector<Candidate> got;
        double mass = 0.0;
        for (int s = 0; s < kNumSubBuckets; ++s) {
          ASSERT_EQ(row.sub_begin(b, s), got.size());
          const std::span<const Candidate> sub = row.sub_sorted(b, s);
          ASSERT_EQ(row.sub_end(b, s), got.size() + sub.size());
          double sub_mass = 0.0;
          for (const Candidate& c : sub) {
            const double e = std::exp(static_cast<double>(c.logit) - max_scaled);
            sub_mass += e;
            EXPECT_GE(e, row.sub_min_ratio(b, s)) << "bucket " << b << " sub " << s;
          }
          EXPECT_NEAR(row.sub_prob(b, s), sub_mass / row.total(), 1e-15);
          mass += row.sub_prob(b, s);
          got.insert(got.end(), sub.begin(), sub.end());
        }
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_EQ(got[i].id, want[i].id) << "kind " << kind << " bucket " << b << " pos " << i;
          ASSERT_EQ(row.at(b, i).id, want[i].id);
        }
        EXPECT_NEAR(mass, row.prob(b), 1e-12) << "bucket " << b;
      }
      EXPECT_EQ(seen, logits.size());
    }
  }
}

TEST(BucketedRow, FloatMassPrefixesAreWithinTheirBound) {
  // The premise of the single-precision tolerance (BucketedRow's constructor): every sum of
  // float bucket masses, each prefix the walks step over and the total, is within
  // e = single_precision_exp_error(spread) of the double one, relative.
  std::mt19937 rng(12);
  double worst = 0.0;
  for (int kind = 0; kind < 4; ++kind) {
    const std::vector<float> logits = row_of(128256, kind, rng);
    const kernels::RowRange range = kernels::row_min_max(logits.data(), 128256);
    for (float temperature : {0.3f, 1.0f}) {
      BucketedRow single(logits, temperature, range, Masses::kSingle);
      const double spread = std::min((range.max - range.min) / temperature, 48.0f);
      const double e = kernels::single_precision_exp_error(spread);
      std::vector<double> single_prefix;
      double sum = 0.0;
      for (int b = 0; b < kNumBuckets; ++b) single_prefix.push_back(sum += single.prob(b));
      const double single_total = single.total();
      BucketedRow exact(logits, temperature, range, Masses::kDouble);
      EXPECT_LE(std::fabs(single_total - exact.total()), e * exact.total());
      sum = 0.0;
      for (int b = 0; b < kNumBuckets; ++b) {
        sum += exact.prob(b);
        // Numerators: the shares times their totals.
        const double want = sum * exact.total();
        const double got = single_prefix[b] * single_total;
        EXPECT_LE(std::fabs(got - want), e * want + 1e-15 * exact.total()) << "bucket " << b;
        if (want > 0.0) worst = std::max(worst, std::fabs(got - want) / (e * want));
      }
    }
  }
  RecordProperty("worst_error_over_bound", std::to_string(worst));
}

TEST(BucketedRow, ATiedBucketIsOneSubBucketSortedById) {
  // Every token but the maximum shares one logit: its bucket is a single sub-bucket.
  std::vector<float> logits(5000, -0.5f);
  logits[4321] = 0.0f;
  const kernels::RowRange range = kernels::row_min_max(logits.data(), 5000);
  BucketedRow row(logits, 1.0f, range, Masses::kDouble);
  int tied_bucket = -1;
  for (int b = 0; b < kNumBuckets; ++b) {
    if (b != 0 && row.occupied(b)) tied_bucket = b;
  }
  ASSERT_GE(tied_bucket, 0);
  int nonempty = 0;
  for (int s = 0; s < kNumSubBuckets; ++s) {
    if (row.sub_begin(tied_bucket, s) == row.sub_end(tied_bucket, s)) continue;
    ++nonempty;
    const std::span<const Candidate> sub = row.sub_sorted(tied_bucket, s);
    ASSERT_EQ(sub.size(), 4999u);
    for (size_t i = 1; i < sub.size(); ++i) ASSERT_LT(sub[i - 1].id, sub[i].id);
  }
  EXPECT_EQ(nonempty, 1);
}

}  // namespace
}  // namespace pagedserve::model::sampling
