// The band draw's row kernels on every ISA this CPU runs, against scalar references computed
// in the test: block maxima as the standard library finds them, each element's class (before,
// in or after the band) by the documented float gap, the float pass's masses against std::exp
// in double within the bound it reports (whatever the gap and the row's offset), and the exact
// sums within a few ulp of a double reference.
#include "kernels/cpu/exp_band.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tests/kernels/kernel_test_util.h"

namespace pagedserve::kernels {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

using testing::supported_isas;

// Logits with ties (rounded to 1/8 where `ties`), spread sigma around `mean`.
std::vector<float> make_row(std::mt19937& rng, int64_t n, float mean, float sigma, bool ties) {
  std::normal_distribution<float> normal(mean, sigma);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = ties ? std::round(normal(rng) * 8.0f) / 8.0f : normal(rng);
  return x;
}

const std::vector<int64_t> kSizes = {1, 15, 16, 17, 255, 256, 257, 1000, 32000, 50257};

TEST(ExpBand, BlockMaximaAndRangeMatchTheStandardLibrary) {
  std::mt19937 rng(3);
  for (Isa isa : supported_isas()) {
    for (int64_t n : kSizes) {
      for (int64_t block : {16, 256}) {
        std::vector<float> x = make_row(rng, n, 0.0f, 2.0f, true);
        const bool with_nan = n > 20;
        if (with_nan) x[static_cast<size_t>(n / 2)] = std::numeric_limits<float>::quiet_NaN();
        std::vector<float> maxima(static_cast<size_t>((n + block - 1) / block), 123.0f);
        const BlockedRange r = row_block_max(x.data(), n, block, maxima.data(), isa);
        EXPECT_EQ(r.has_nan, with_nan) << isa_name(isa) << " n=" << n;
        float lo = kInf, hi = -kInf;
        for (int64_t b = 0; b < static_cast<int64_t>(maxima.size()); ++b) {
          float top = -kInf;
          for (int64_t i = b * block; i < std::min(n, (b + 1) * block); ++i) {
            if (std::isnan(x[static_cast<size_t>(i)])) continue;
            top = std::max(top, x[static_cast<size_t>(i)]);
            lo = std::min(lo, x[static_cast<size_t>(i)]);
          }
          hi = std::max(hi, top);
          EXPECT_EQ(maxima[static_cast<size_t>(b)], top) << isa_name(isa) << " block " << b;
        }
        EXPECT_EQ(r.range.min, lo) << isa_name(isa) << " n=" << n;
        EXPECT_EQ(r.range.max, hi) << isa_name(isa) << " n=" << n;
      }
    }
  }
}

TEST(ExpBand, ScaledExpsAreWithinTheirBound) {
  std::mt19937 rng(5);
  for (Isa isa : supported_isas()) {
    for (float temperature : {1.0f, 0.7f}) {
      const std::vector<float> x = make_row(rng, 4099, 1.0f, 3.0f, false);
      const float max_scaled = *std::max_element(x.begin(), x.end()) / temperature;
      std::vector<float> out(x.size());
      scaled_exp_f32(x.data(), static_cast<int64_t>(x.size()), temperature, max_scaled, out.data(),
                     isa);
      for (size_t i = 0; i < x.size(); ++i) {
        const float s = temperature == 1.0f ? x[i] : x[i] / temperature;
        const double exact = std::exp(static_cast<double>(s) - max_scaled);
        const double bound = single_precision_exp_error(max_scaled - s) * exact;
        EXPECT_NEAR(out[i], exact, bound) << isa_name(isa) << " i=" << i;
      }
    }
  }
}

// Room for a pass to collect `capacity` elements (plus its whole-vector stores), attached to p.
struct BandBuffers {
  std::vector<int32_t> ids;
  std::vector<float> scaled;
  std::vector<double> masses;
  BandBuffers(ExpBandParams& p, int64_t capacity)
      : ids(static_cast<size_t>(capacity) + 16),
        scaled(static_cast<size_t>(capacity) + 16),
        masses(static_cast<size_t>(capacity) + 16) {
    p.band_ids = ids.data();
    p.band_scaled = scaled.data();
    p.band_mass = masses.data();
    p.capacity = capacity;
  }
};

struct Classified {
  std::vector<int32_t> ids;
  std::vector<float> scaled;
  double total = 0.0;
  std::array<double, kMaxBands> above{};
};

// The reference: each element's class by the documented float gap, and sums of std::exp in
// double.
Classified classify(const std::vector<float>& x, const ExpBandParams& p) {
  Classified c;
  for (size_t i = 0; i < x.size(); ++i) {
    const float s = p.temperature == 1.0f ? x[i] : x[i] / p.temperature;
    const float gap = p.max_scaled - s;
    const double e = std::exp(static_cast<double>(s) - p.max_scaled);
    c.total += e;
    bool in_a_band = false;
    for (int b = 0; b < p.num_bands; ++b) {
      if (gap < p.above[b]) {
        c.above[b] += e;
      } else if (gap < p.below[b]) {
        in_a_band = true;
      }
    }
    if (in_a_band) {
      c.ids.push_back(static_cast<int32_t>(i));
      c.scaled.push_back(s);
    }
  }
  return c;
}

TEST(ExpBand, ClassifiesEveryElementAndSumsWithinTheFloatBound) {
  std::mt19937 rng(7);
  for (Isa isa : supported_isas()) {
    for (int64_t n : kSizes) {
      for (int bands : {1, 2}) {
        const float temperature = bands == 1 ? 1.0f : 0.6f;
        const std::vector<float> x = make_row(rng, n, -3.0f, 1.5f, n % 2 == 1);
        ExpBandParams p;
        p.logits = x.data();
        p.n = n;
        p.temperature = temperature;
        p.max_scaled = *std::max_element(x.begin(), x.end()) / temperature;
        p.num_bands = bands;
        p.above = {0.8f, 2.0f};  // the second overlaps the first
        p.below = {n % 3 == 0 ? kInf : 2.5f, 3.5f};
        BandBuffers band(p, n);
        const std::vector<int32_t>& ids = band.ids;
        const std::vector<float>& scaled = band.scaled;
        const std::vector<double>& exps = band.masses;
        const Classified want = classify(x, p);
        const ExpBandResult got = exp_band(p, isa);
        const std::string where = std::string(isa_name(isa)) + " n=" + std::to_string(n);
        ASSERT_FALSE(got.overflow) << where;
        ASSERT_EQ(got.band_count, static_cast<int64_t>(want.ids.size())) << where;
        for (size_t k = 0; k < want.ids.size(); ++k) {
          ASSERT_EQ(ids[k], want.ids[k]) << where;
          ASSERT_EQ(scaled[k], want.scaled[k]) << where;
          const double exact = std::exp(static_cast<double>(scaled[k]) - p.max_scaled);
          EXPECT_NEAR(exps[k], exact, kBandMassError * exact) << where;
        }
        // The sums within the bound the pass reports: a few 2^-24 at most.
        EXPECT_GE(got.mass_error, kBandMassError) << where;
        EXPECT_LE(got.mass_error, 6 * 0x1.0p-24) << where;
        EXPECT_NEAR(got.total, want.total, got.mass_error * want.total) << where;
        for (int b = 0; b < bands; ++b) {
          EXPECT_NEAR(got.mass_above[b], want.above[b], got.mass_error * want.above[b] + 1e-300)
              << where;
        }

        // Exact: the same classes, sums of double exps (each within ~2 ulp of std::exp).
        p.exact = true;
        const ExpBandResult exact = exp_band(p, isa);
        EXPECT_NEAR(exact.total, want.total, 1e-15 * static_cast<double>(n + 4) * want.total)
            << where;
        for (int b = 0; b < bands; ++b) {
          EXPECT_NEAR(exact.mass_above[b], want.above[b],
                      1e-15 * static_cast<double>(n + 4) * want.total)
              << where;
        }
        EXPECT_EQ(exact.band_count, 0) << where;
      }
    }
  }
}

// The float masses' bound does not grow with the gap, nor with the row's offset: rows whose
// gaps reach 87 nats, at scaled maxima from -1000 to 1000 (the pass shifts them exactly), every
// element in the band, each mass and the total against std::exp in double. A float exp of the
// rounded float gap is up to gap * 2^-24 off and fails this.
TEST(ExpBand, FloatMassesAreWithinTheirBoundWhateverTheGapAndOffset) {
  std::mt19937 rng(11);
  for (Isa isa : supported_isas()) {
    for (float top :
         {0.0f, 5.5f, 60.25f, 127.9f, 128.5f, 300.7f, -40.9f, -41.3f, -99.0f, 1000.3f, -1000.3f}) {
      for (float temperature : {1.0f, 0.37f}) {
        const int64_t n = 4099;
        std::uniform_real_distribution<float> gap(0.0f, 86.9f);
        std::vector<float> x(static_cast<size_t>(n));
        for (float& v : x) v = (top - gap(rng)) * temperature;
        x[17] = top * temperature;
        ExpBandParams p;
        p.logits = x.data();
        p.n = n;
        p.temperature = temperature;
        float max_scaled = -kInf;
        for (float v : x)
          max_scaled = std::max(max_scaled, temperature == 1.0f ? v : v / temperature);
        p.max_scaled = max_scaled;
        p.above = {0.0f, 0.0f};
        p.below = {kInf, kInf};
        BandBuffers band(p, n);
        const std::vector<float>& scaled = band.scaled;
        const std::vector<double>& masses = band.masses;
        const std::string where = std::string(isa_name(isa)) + " top=" + std::to_string(top) +
                                  " T=" + std::to_string(temperature);
        const ExpBandResult got = exp_band(p, isa);
        ASSERT_EQ(got.band_count, n) << where;
        double total = 0.0;
        for (int64_t k = 0; k < n; ++k) {
          const double exact = std::exp(static_cast<double>(scaled[static_cast<size_t>(k)]) -
                                        static_cast<double>(max_scaled));
          total += exact;
          ASSERT_NEAR(masses[static_cast<size_t>(k)], exact, kBandMassError * exact)
              << where << " gap " << max_scaled - scaled[static_cast<size_t>(k)];
        }
        EXPECT_NEAR(got.total, total, got.mass_error * total) << where;
      }
    }
  }
}

TEST(ExpBand, ABandPastItsCapacityOverflows) {
  std::mt19937 rng(9);
  for (Isa isa : supported_isas()) {
    const std::vector<float> x = make_row(rng, 5000, 0.0f, 1.0f, false);
    ExpBandParams p;
    p.logits = x.data();
    p.n = 5000;
    p.max_scaled = *std::max_element(x.begin(), x.end());
    p.above = {0.0f, 0.0f};
    p.below = {kInf, kInf};  // everything is in the band
    std::vector<int32_t> ids(116);
    std::vector<float> scaled(116);
    std::vector<double> exps(116);
    p.band_ids = ids.data();
    p.band_scaled = scaled.data();
    p.band_mass = exps.data();
    p.capacity = 100;
    EXPECT_TRUE(exp_band(p, isa).overflow) << isa_name(isa);
    p.capacity = 5000;
    ids.resize(5016);
    scaled.resize(5016);
    exps.resize(5016);
    p.band_ids = ids.data();
    p.band_scaled = scaled.data();
    p.band_mass = exps.data();
    const ExpBandResult all = exp_band(p, isa);
    EXPECT_FALSE(all.overflow) << isa_name(isa);
    EXPECT_EQ(all.band_count, 5000) << isa_name(isa);
    EXPECT_EQ(all.mass_above[0], 0.0) << isa_name(isa);
  }
}

TEST(ExpBand, ShiftedDoubleExpsMatchStdExp) {
  std::mt19937 rng(13);
  for (Isa isa : supported_isas()) {
    for (int64_t n : {1, 7, 8, 9, 100}) {
      const std::vector<float> s = make_row(rng, n, -2.0f, 3.0f, false);
      std::vector<double> out(static_cast<size_t>(n));
      shifted_exp_f64(s.data(), n, 1.25, out.data(), isa);
      for (int64_t i = 0; i < n; ++i) {
        const double want = std::exp(static_cast<double>(s[static_cast<size_t>(i)]) - 1.25);
        EXPECT_NEAR(out[static_cast<size_t>(i)], want, 4.5e-16 * want) << isa_name(isa);
      }
    }
  }
}

TEST(ExpBand, SplitByGapSumsAndCollectsEachElementByItsClass) {
  std::mt19937 rng(17);
  std::uniform_real_distribution<double> any_mass(0.0, 1.0);
  for (Isa isa : supported_isas()) {
    for (int64_t n : {0, 1, 7, 8, 9, 100, 1001}) {
      const std::vector<float> s = make_row(rng, n, 0.0f, 1.0f, true);  // ties on the edges
      std::vector<double> mass(static_cast<size_t>(n));
      std::vector<int32_t> ids(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        mass[static_cast<size_t>(i)] = any_mass(rng);
        ids[static_cast<size_t>(i)] = static_cast<int32_t>(3 * i + 1);
      }
      const float top = 2.5f;
      for (auto [from, to] : {std::pair{2.0f, 2.75f}, std::pair{-kInf, 2.5f}, std::pair{2.5f, kInf},
                              std::pair{3.0f, 3.0f}}) {
        std::vector<float> out_s(static_cast<size_t>(n) + 8, -1.0f);
        std::vector<double> out_m(static_cast<size_t>(n) + 8, -1.0);
        std::vector<int32_t> out_id(static_cast<size_t>(n) + 8, -1);
        const GapSplit got = split_by_gap(s.data(), mass.data(), ids.data(), n, top, from, to,
                                          out_s.data(), out_m.data(), out_id.data(), isa);
        double before = 0.0, between = 0.0;
        std::vector<int32_t> want_ids;
        for (int64_t i = 0; i < n; ++i) {
          const float gap = top - s[static_cast<size_t>(i)];
          if (gap < from) before += mass[static_cast<size_t>(i)];
          if (gap >= from && gap < to) {
            between += mass[static_cast<size_t>(i)];
            want_ids.push_back(ids[static_cast<size_t>(i)]);
          }
        }
        const std::string where = std::string(isa_name(isa)) + " n=" + std::to_string(n) +
                                  " from=" + std::to_string(from) + " to=" + std::to_string(to);
        EXPECT_NEAR(got.mass_before, before, 1e-12 * std::max(1.0, before)) << where;
        EXPECT_NEAR(got.mass_between, between, 1e-12 * std::max(1.0, between)) << where;
        ASSERT_EQ(got.count, static_cast<int64_t>(want_ids.size())) << where;
        for (size_t j = 0; j < want_ids.size(); ++j) {
          ASSERT_EQ(out_id[j], want_ids[j]) << where;
          const size_t i = static_cast<size_t>((want_ids[j] - 1) / 3);
          EXPECT_EQ(out_s[j], s[i]) << where;
          EXPECT_EQ(out_m[j], mass[i]) << where;
        }
      }
    }
  }
}

}  // namespace
}  // namespace pagedserve::kernels
