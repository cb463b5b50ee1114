// The sampler's row kernels on every ISA this CPU runs, against scalar references computed in
// the test: min/max and argmax as the standard library finds them, sums of exps in double with
// std::exp, each element's bucket by the documented formula, and bucket filters.
#include "kernels/cpu/sampling_rows.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "tests/kernels/kernel_test_util.h"

namespace pagedserve::kernels {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

using testing::supported_isas;

// Logits with ties (rounded to 1/8), a few -inf (banned tokens) and a spread of sigma.
std::vector<float> row(std::mt19937& rng, int64_t n, float sigma, bool with_inf) {
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = std::round(normal(rng) * 8.0f) / 8.0f;
  if (with_inf) {
    for (int i = 0; i < 3; ++i)
      x[std::uniform_int_distribution<size_t>(0, x.size() - 1)(rng)] = -kInf;
  }
  return x;
}

// A sum of n positive terms, each within 2 ulp of std::exp, added in another order than the
// reference's: a few ulp per term at most (for n = 1, the exp's own accuracy).
double sum_tolerance(int64_t n, double expected) {
  return static_cast<double>(n + 2) * 2.3e-16 * expected;
}

const std::vector<int64_t> kSizes = {1, 7, 15, 16, 17, 63, 64, 65, 1000, 32000};

TEST(SamplingRows, MinMaxAndArgmaxMatchTheStandardLibrary) {
  std::mt19937 rng(11);
  for (Isa isa : supported_isas()) {
    for (int64_t n : kSizes) {
      for (bool with_inf : {false, true}) {
        const std::vector<float> x = row(rng, n, 2.0f, with_inf && n > 3);
        const auto [lo, hi] = std::minmax_element(x.begin(), x.end());
        const RowRange r = row_min_max(x.data(), n, isa);
        EXPECT_EQ(r.min, *lo) << isa_name(isa) << " n=" << n;
        EXPECT_EQ(r.max, *hi) << isa_name(isa) << " n=" << n;
        EXPECT_EQ(row_argmax(x.data(), n, isa), std::max_element(x.begin(), x.end()) - x.begin())
            << isa_name(isa) << " n=" << n;
      }
    }
    const std::vector<float> banned(33, -kInf);
    EXPECT_EQ(row_argmax(banned.data(), 33, isa), 0) << isa_name(isa);
    std::vector<float> ties(40, 1.0f);
    ties[37] = 2.0f;
    ties[21] = 2.0f;
    EXPECT_EQ(row_argmax(ties.data(), 40, isa), 21) << isa_name(isa) << ": the first maximum";
  }
}

TEST(SamplingRows, SumOfExpsMatchesStdExpInDouble) {
  std::mt19937 rng(12);
  for (Isa isa : supported_isas()) {
    for (int64_t n : kSizes) {
      const std::vector<float> x = row(rng, n, 6.0f, n > 3);
      const double shift = *std::max_element(x.begin(), x.end());
      double expected = 0.0;
      for (float v : x) expected += std::exp(static_cast<double>(v) - shift);
      EXPECT_NEAR(row_sum_exp(x.data(), n, shift, isa), expected, sum_tolerance(n, expected))
          << isa_name(isa) << " n=" << n;
    }
    // Far below the shift the terms underflow to 0 as std::exp's do, never to garbage.
    const std::vector<float> far = {0.0f, -700.0f, -740.0f, -800.0f, -kInf};
    double expected = 0.0;
    for (float v : far) expected += std::exp(static_cast<double>(v));
    EXPECT_NEAR(row_sum_exp(far.data(), 5, 0.0, isa), expected, 1e-15) << isa_name(isa);
  }
}

// The float-exp sum against std::exp in double: each term within
// single_precision_exp_error(its gap) of the exact one, so the sum within the same bound at
// the row's largest gap (terms past a gap of 87 count as e^-87, < 2e-38 each).
TEST(SamplingRows, FloatExpSumIsWithinItsStatedBoundOfTheDoubleSum) {
  std::mt19937 rng(14);
  for (Isa isa : supported_isas()) {
    for (int64_t n : kSizes) {
      for (float sigma : {0.5f, 6.0f, 40.0f}) {
        const std::vector<float> x = row(rng, n, sigma, n > 3);
        const float shift = *std::max_element(x.begin(), x.end());
        double expected = 0.0;
        double max_gap = 0.0;
        for (float v : x) {
          expected += std::exp(static_cast<double>(v) - shift);
          if (std::isfinite(v)) max_gap = std::max(max_gap, static_cast<double>(shift) - v);
        }
        const double bound =
            single_precision_exp_error(std::min(max_gap, 87.0)) * expected + n * 2e-38;
        EXPECT_NEAR(row_sum_exp_f32(x.data(), n, shift, isa), expected, bound)
            << isa_name(isa) << " n=" << n << " sigma=" << sigma;
      }
    }
    // -inf and NaN count as e^-87; the sum stays finite and near the one finite term.
    const std::vector<float> odd = {0.0f, -kInf, std::numeric_limits<float>::quiet_NaN(), -1.0f};
    EXPECT_NEAR(row_sum_exp_f32(odd.data(), 4, 0.0f, isa), 1.0 + std::exp(-1.0), 1e-6)
        << isa_name(isa);
  }
}

TEST(SamplingRows, HistogramPutsEachElementInItsBucketWithItsMass) {
  std::mt19937 rng(13);
  for (Isa isa : supported_isas()) {
    for (int64_t n : kSizes) {
      for (float temperature : {0.25f, 1.0f, 1.7f}) {
        const std::vector<float> x = row(rng, n, 3.0f, n > 3);
        const float max_scaled = *std::max_element(x.begin(), x.end()) / temperature;
        const float per_unit = 255.0f / 20.0f;
        std::vector<uint8_t> bucket(x.size());
        std::vector<int32_t> count(256);
        std::vector<double> mass(256);
        ExpHistogramParams p;
        p.logits = x.data();
        p.n = n;
        p.temperature = temperature;
        p.max_scaled = max_scaled;
        p.buckets_per_unit = per_unit;
        p.bucket = bucket.data();
        p.bucket_count = count.data();
        p.bucket_mass = mass.data();
        const double total = exp_histogram(p, isa);

        std::vector<int32_t> want_count(256);
        std::vector<double> want_mass(256);
        double want_total = 0.0;
        for (int64_t i = 0; i < n; ++i) {
          const float s = x[i] / temperature;
          const float gap = (max_scaled - s) * per_unit;
          const int b = gap >= 255.0f ? 255 : static_cast<int>(gap);  // -inf: gap = inf
          ASSERT_EQ(bucket[i], b) << isa_name(isa) << " n=" << n << " i=" << i;
          ++want_count[b];
          const double e = std::exp(static_cast<double>(s) - max_scaled);
          want_mass[b] += e;
          want_total += e;
        }
        EXPECT_EQ(count, want_count) << isa_name(isa);
        for (int b = 0; b < 256; ++b) {
          EXPECT_NEAR(mass[b], want_mass[b], sum_tolerance(want_count[b], want_mass[b]))
              << isa_name(isa) << " b=" << b;
        }
        EXPECT_NEAR(total, want_total, sum_tolerance(n, want_total)) << isa_name(isa);

        // Counts only: the same buckets, no masses.
        std::vector<uint8_t> bucket2(x.size());
        p.bucket = bucket2.data();
        p.bucket_mass = nullptr;
        EXPECT_EQ(exp_histogram(p, isa), 0.0);
        EXPECT_EQ(bucket2, bucket) << isa_name(isa);
        EXPECT_EQ(count, want_count) << isa_name(isa);

        // Masses only: the same buckets and masses, no counts.
        std::vector<double> mass2(256);
        p.bucket_count = nullptr;
        p.bucket_mass = mass2.data();
        EXPECT_EQ(exp_histogram(p, isa), total) << isa_name(isa);
        EXPECT_EQ(bucket2, bucket) << isa_name(isa);
        EXPECT_EQ(mass2, mass) << isa_name(isa);
      }
    }
  }
}

// The sampler trusts single_precision_exp_error to decide or redo a row: every bucket's float
// mass must lie within it of the exact (std::exp, double) mass, for gaps up to the bucketed
// range and for the far tail (-inf, gaps past the float exp's clamp).
TEST(SamplingRows, SinglePrecisionMassesStayWithinTheirErrorBound) {
  if (!isa_supported(Isa::kAvx512)) GTEST_SKIP() << "single precision is the AVX-512 path";
  std::mt19937 rng(15);
  for (float sigma : {0.4f, 3.0f, 12.0f, 40.0f}) {
    for (float temperature : {0.3f, 1.0f, 1.5f}) {
      std::vector<float> x = row(rng, 32000, sigma, true);
      x[5] = 30.0f;  // a max far above the rest when sigma is small
      const float max_scaled = *std::max_element(x.begin(), x.end()) / temperature;
      const float min_scaled = -20.0f * sigma / temperature;
      const double max_gap = std::min(48.0, static_cast<double>(max_scaled - min_scaled));
      std::vector<uint8_t> bucket(x.size());
      std::vector<int32_t> count(256);
      std::vector<double> mass(256);
      ExpHistogramParams p;
      p.logits = x.data();
      p.n = static_cast<int64_t>(x.size());
      p.temperature = temperature;
      p.max_scaled = max_scaled;
      p.buckets_per_unit = static_cast<float>(255.0 / max_gap);
      p.bucket = bucket.data();
      p.bucket_count = count.data();
      p.bucket_mass = mass.data();
      p.single_precision = true;
      const double total = exp_histogram(p, Isa::kAvx512);
      std::vector<double> want(256);
      double want_total = 0.0;
      for (size_t i = 0; i < x.size(); ++i) {
        const double e = std::exp(static_cast<double>(x[i] / temperature) - max_scaled);
        want[bucket[i]] += e;
        want_total += e;
      }
      const double bound = single_precision_exp_error(max_gap);
      for (int b = 0; b < 255; ++b) {
        EXPECT_LE(std::fabs(mass[b] - want[b]), bound * want[b] + 1e-300)
            << "sigma " << sigma << " T " << temperature << " bucket " << b;
      }
      // The last bucket holds the far tail too: gaps up to the clamp (87) err by the bound at
      // gap 87, terms beyond by < 1e-37 each.
      const double tail = single_precision_exp_error(87.0) * want[255] + count[255] * 1e-37;
      EXPECT_LE(std::fabs(mass[255] - want[255]), tail);
      EXPECT_LE(std::fabs(total - want_total), bound * want_total + tail);
    }
  }
}

TEST(SamplingRows, CollectBucketsFindsExactlyTheRange) {
  std::mt19937 rng(14);
  for (Isa isa : supported_isas()) {
    for (int64_t n : kSizes) {
      std::vector<uint8_t> bucket(static_cast<size_t>(n));
      for (uint8_t& b : bucket)
        b = static_cast<uint8_t>(std::uniform_int_distribution<int>(0, 255)(rng));
      for (auto [lo, hi] : {std::pair{0, 0}, {0, 255}, {3, 40}, {255, 255}, {200, 254}}) {
        std::vector<int32_t> want;
        for (int64_t i = 0; i < n; ++i) {
          if (bucket[i] >= lo && bucket[i] <= hi) want.push_back(static_cast<int32_t>(i));
        }
        std::vector<int32_t> got(static_cast<size_t>(n));
        got.resize(static_cast<size_t>(collect_buckets(bucket.data(), n, lo, hi, got.data(), isa)));
        EXPECT_EQ(got, want) << isa_name(isa) << " n=" << n << " [" << lo << ", " << hi << "]";
      }
    }
  }
}

// Masks of every kind a grammar produces (all ones, all zeros, sparse, dense, mixed words),
// on rows shorter than, equal to and longer than the grammar's vocabulary, against the
// definition read one bit per id.
TEST(SamplingRows, TokenBitmaskSetsExactlyTheDisallowedIdsToMinusInfinity) {
  std::mt19937 rng(11);
  for (int64_t allowed_ids : {1, 31, 32, 33, 1000, 4099}) {
    for (int64_t n : {allowed_ids - 1, allowed_ids, allowed_ids + 40}) {
      if (n < 1) continue;
      for (double density : {0.0, 0.02, 0.5, 0.98, 1.0}) {
        const int64_t words = (std::min(n, allowed_ids) + 31) / 32;
        std::vector<uint32_t> mask(static_cast<size_t>(words), 0);
        std::bernoulli_distribution bit(density);
        for (int64_t i = 0; i < words * 32; ++i) {
          if (bit(rng)) mask[i / 32] |= 1u << (i % 32);
        }
        const std::vector<float> before = row(rng, n, 2.0f, true);
        std::vector<float> x = before;
        apply_token_bitmask(x.data(), n, mask.data(), allowed_ids);
        for (int64_t i = 0; i < n; ++i) {
          const bool allowed = i < allowed_ids && ((mask[i / 32] >> (i % 32)) & 1u) != 0;
          if (allowed) {
            ASSERT_EQ(x[i], before[i]) << "id " << i << " of " << n;
          } else {
            ASSERT_EQ(x[i], -kInf) << "id " << i << " of " << n << ", vocab " << allowed_ids;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace pagedserve::kernels
