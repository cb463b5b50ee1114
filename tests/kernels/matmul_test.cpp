// Tests matmul_nt against a naive double-precision x * w^T over odd and blocked shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/kernels/kernel_test_util.h"

namespace pagedserve::kernels {
namespace {

using testing::random_floats;

struct Shape {
  int m, n, k;
};

// The rounding error of a float dot product scales with the magnitudes summed, not with the
// result (which may cancel to near zero); with random signs it grows like sqrt(k), so the
// tolerance is relative to sum(|x_i * w_i|) / sqrt(k).
void check_shape(const Shape& s, std::mt19937& rng) {
  SCOPED_TRACE(::testing::Message() << "m=" << s.m << " n=" << s.n << " k=" << s.k);
  const auto x = random_floats(rng, static_cast<size_t>(s.m) * s.k);
  const auto w = random_floats(rng, static_cast<size_t>(s.n) * s.k);
  std::vector<float> out(static_cast<size_t>(s.m) * s.n, std::nanf(""));
  matmul_nt(x.data(), w.data(), out.data(), s.m, s.n, s.k);
  // Split over threads by whole blocks of w rows: bitwise the same result.
  static ThreadPool pool(3, /*min_parallel_flops=*/0.0);
  std::vector<float> pooled(out.size(), std::nanf(""));
  matmul_nt(x.data(), w.data(), pooled.data(), s.m, s.n, s.k, &pool);
  EXPECT_TRUE(out.empty() ||
              std::memcmp(pooled.data(), out.data(), out.size() * sizeof(float)) == 0)
      << "threaded result differs from the single-threaded one";
  for (int i = 0; i < s.m; ++i) {
    for (int j = 0; j < s.n; ++j) {
      double sum = 0.0, magnitude = 0.0;
      for (int kk = 0; kk < s.k; ++kk) {
        const double prod = static_cast<double>(x[i * s.k + kk]) * w[j * s.k + kk];
        sum += prod;
        magnitude += std::fabs(prod);
      }
      const double got = out[static_cast<size_t>(i) * s.n + j];
      ASSERT_LE(std::fabs(got - sum), 1e-5 * (1.0 + magnitude / std::sqrt(s.k)))
          << "out[" << i << ", " << j << "] = " << got << ", expected " << sum;
    }
  }
}

TEST(MatmulNt, OddAndBlockedShapes) {
  std::mt19937 rng(1234);
  // Edges of every tile and block: m around the 2-row tile and the packing threshold, n around
  // the 8-wide tile and the 64-row block, k around the lane counts and the 256 slice.
  const Shape shapes[] = {
      {1, 1, 1},     {1, 7, 3},     {2, 9, 5},     {3, 5, 9},      {4, 8, 8},      {5, 65, 257},
      {6, 64, 256},  {7, 63, 255},  {2, 130, 513}, {17, 33, 1000}, {33, 100, 300}, {64, 72, 64},
      {1, 300, 600}, {1, 2048, 96}, {9, 1, 700},   {4, 3, 1},      {1, 2048, 768}, {48, 192, 768}};
  for (const Shape& s : shapes) {
    check_shape(s, rng);
    if (HasFatalFailure()) return;
  }
}

TEST(MatmulNt, RandomShapes) {
  std::mt19937 rng(99);
  for (int trial = 0; trial < 60; ++trial) {
    const Shape s{testing::random_int(rng, 1, 40), testing::random_int(rng, 1, 150),
                  testing::random_int(rng, 1, 600)};
    check_shape(s, rng);
    if (HasFatalFailure()) return;
  }
}

TEST(MatmulNt, ZeroKYieldsZeros) {
  std::vector<float> out(12, 5.0f);
  const float dummy = 0.0f;
  matmul_nt(&dummy, &dummy, out.data(), 3, 4, 0);
  for (float v : out) EXPECT_EQ(v, 0.0f);
}

TEST(MatmulNt, EmptyOutputsAreFine) {
  const float dummy = 1.0f;
  float out = 7.0f;
  matmul_nt(&dummy, &dummy, &out, 0, 1, 1);
  matmul_nt(&dummy, &dummy, &out, 1, 0, 1);
  EXPECT_EQ(out, 7.0f);
}

}  // namespace
}  // namespace pagedserve::kernels
