// Shared helpers for the CPU kernel tests: seeded random fills and an element-wise comparison
// against a double-precision reference that reports the first failing index.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/isa.h"

namespace pagedserve::kernels::testing {

// Every ISA this CPU runs, the portable one first: kernels are tested on each.
inline std::vector<Isa> supported_isas() {
  std::vector<Isa> isas;
  for (Isa isa : {Isa::kPortable, Isa::kAvx2, Isa::kAvx512}) {
    if (isa_supported(isa)) isas.push_back(isa);
  }
  return isas;
}

inline std::vector<float> random_floats(std::mt19937& rng, std::size_t n, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline int random_int(std::mt19937& rng, int lo, int hi) {  // inclusive bounds
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

// Checks |actual - expected| <= abs_tol + rel_tol * |expected| for every element. Stops at the
// first failure so that a broken kernel does not flood the log.
inline ::testing::AssertionResult all_close(const float* actual,
                                            const std::vector<double>& expected, double abs_tol,
                                            double rel_tol) {
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const double a = actual[i];
    const double e = expected[i];
    if (!(std::fabs(a - e) <= abs_tol + rel_tol * std::fabs(e))) {  // also rejects NaN
      return ::testing::AssertionFailure()
             << "element " << i << ": got " << a << ", expected " << e << " (diff " << a - e << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace pagedserve::kernels::testing
