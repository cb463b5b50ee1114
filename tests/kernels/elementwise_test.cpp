// Tests rms_norm, rope_rotate_half and silu_and_mul against double-precision references.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/kernels/kernel_test_util.h"

namespace pagedserve::kernels {
namespace {

using testing::all_close;
using testing::random_floats;
using testing::random_int;

std::vector<double> rms_norm_reference(const std::vector<float>& x, const std::vector<float>& w,
                                       int rows, int hidden, float eps) {
  std::vector<double> out(x.size());
  for (int r = 0; r < rows; ++r) {
    double sum_sq = 0.0;
    for (int i = 0; i < hidden; ++i)
      sum_sq += static_cast<double>(x[r * hidden + i]) * x[r * hidden + i];
    const double inv_rms = 1.0 / std::sqrt(sum_sq / hidden + eps);
    for (int i = 0; i < hidden; ++i) out[r * hidden + i] = x[r * hidden + i] * inv_rms * w[i];
  }
  return out;
}

TEST(RmsNorm, MatchesReference) {
  std::mt19937 rng(7);
  struct Case {
    int rows, hidden;
    float eps;
  };
  for (const Case c : {Case{1, 1, 1e-5f}, Case{3, 7, 1e-6f}, Case{2, 64, 1e-5f},
                       Case{5, 1000, 1e-6f}, Case{4, 4096, 1e-5f}, Case{1, 17, 0.5f}}) {
    SCOPED_TRACE(::testing::Message() << "rows=" << c.rows << " hidden=" << c.hidden);
    const auto x = random_floats(rng, static_cast<size_t>(c.rows) * c.hidden, -3.0f, 3.0f);
    const auto w = random_floats(rng, c.hidden, 0.5f, 1.5f);
    std::vector<float> out(x.size());
    rms_norm(x.data(), w.data(), out.data(), c.rows, c.hidden, c.eps);
    const auto expected = rms_norm_reference(x, w, c.rows, c.hidden, c.eps);
    EXPECT_TRUE(all_close(out.data(), expected, 1e-6, 1e-5));
    // In place: out aliases x.
    auto in_place = x;
    rms_norm(in_place.data(), w.data(), in_place.data(), c.rows, c.hidden, c.eps);
    EXPECT_TRUE(all_close(in_place.data(), expected, 1e-6, 1e-5));
  }
}

// Rotates pairs (i, i + d/2) of every head by pos * theta^(-2i/d), written out with explicit
// cos and sin in double.
std::vector<double> rope_reference(const std::vector<float>& x, const std::vector<int32_t>& pos,
                                   int heads, int d, float theta) {
  std::vector<double> out(x.size());
  const int half = d / 2;
  for (size_t t = 0; t < pos.size(); ++t) {
    for (int h = 0; h < heads; ++h) {
      const size_t base = (t * heads + h) * d;
      for (int i = 0; i < half; ++i) {
        const double angle = pos[t] * std::pow(static_cast<double>(theta), -2.0 * i / d);
        const double a = x[base + i], b = x[base + i + half];
        out[base + i] = a * std::cos(angle) - b * std::sin(angle);
        out[base + i + half] = b * std::cos(angle) + a * std::sin(angle);
      }
    }
  }
  return out;
}

TEST(RopeRotateHalf, MatchesExplicitRotation) {
  std::mt19937 rng(11);
  struct Case {
    int tokens, heads, kv_heads, d;
    float theta;
    int max_pos;
  };
  // head_dim 160 and 256 have more pairs than the kernel's 64-pair chunk.
  for (const Case c : {Case{1, 1, 1, 2, 10000.0f, 10}, Case{3, 4, 2, 8, 10000.0f, 100},
                       Case{5, 8, 2, 64, 10000.0f, 4096}, Case{4, 4, 1, 128, 500000.0f, 131072},
                       Case{2, 2, 2, 160, 10000.0f, 1000}, Case{3, 2, 1, 256, 1000000.0f, 50000},
                       Case{2, 3, 3, 6, 10000.0f, 7}}) {
    SCOPED_TRACE(::testing::Message() << "tokens=" << c.tokens << " d=" << c.d);
    std::vector<int32_t> pos(c.tokens);
    for (auto& p : pos) p = random_int(rng, 0, c.max_pos);
    pos[0] = 0;  // position 0 is the identity
    auto q = random_floats(rng, static_cast<size_t>(c.tokens) * c.heads * c.d);
    auto k = random_floats(rng, static_cast<size_t>(c.tokens) * c.kv_heads * c.d);
    const auto q_expected = rope_reference(q, pos, c.heads, c.d, c.theta);
    const auto k_expected = rope_reference(k, pos, c.kv_heads, c.d, c.theta);
    rope_rotate_half(q.data(), k.data(), pos.data(), c.tokens, c.heads, c.kv_heads, c.d, c.theta);
    EXPECT_TRUE(all_close(q.data(), q_expected, 1e-6, 1e-5));
    EXPECT_TRUE(all_close(k.data(), k_expected, 1e-6, 1e-5));
  }
}

std::vector<double> silu_reference(const std::vector<float>& gate, const std::vector<float>& up) {
  std::vector<double> out(gate.size());
  for (size_t i = 0; i < gate.size(); ++i) {
    const double g = gate[i];
    out[i] = g / (1.0 + std::exp(-g)) * up[i];
  }
  return out;
}

TEST(SiluAndMul, MatchesReferenceIncludingAliasing) {
  std::mt19937 rng(5);
  for (int n : {1, 7, 64, 1001}) {
    SCOPED_TRACE(::testing::Message() << "n=" << n);
    auto gate = random_floats(rng, n, -8.0f, 8.0f);
    const auto up = random_floats(rng, n, -2.0f, 2.0f);
    gate[0] = n > 1 ? -100.0f : 100.0f;  // exp(-gate) overflows to inf: silu must still be ~0
    const auto expected = silu_reference(gate, up);
    std::vector<float> out(n);
    silu_and_mul(gate.data(), up.data(), out.data(), n);
    EXPECT_TRUE(all_close(out.data(), expected, 1e-6, 1e-5));
    auto gate_alias = gate;
    silu_and_mul(gate_alias.data(), up.data(), gate_alias.data(), n);
    EXPECT_TRUE(all_close(gate_alias.data(), expected, 1e-6, 1e-5));
    auto up_alias = up;
    silu_and_mul(gate.data(), up_alias.data(), up_alias.data(), n);
    EXPECT_TRUE(all_close(up_alias.data(), expected, 1e-6, 1e-5));
  }
}

// The model's form: one cos/sin table for all layers, then the rotation, split over threads.
// Against the double reference, and bit for bit rope_rotate_half applied to one token alone.
TEST(RopeRotateHalf, TableMatchesReferenceAndSingleTokens) {
  std::mt19937 rng(12);
  ThreadPool pool(2);
  const int tokens = 37, heads = 4, kv_heads = 2;
  for (int d : {8, 64, 160}) {
    SCOPED_TRACE(::testing::Message() << "d=" << d);
    std::vector<int32_t> pos(tokens);
    for (auto& p : pos) p = random_int(rng, 0, 8000);
    auto q = random_floats(rng, static_cast<size_t>(tokens) * heads * d);
    auto k = random_floats(rng, static_cast<size_t>(tokens) * kv_heads * d);
    const auto q_expected = rope_reference(q, pos, heads, d, 10000.0f);
    const auto k_expected = rope_reference(k, pos, kv_heads, d, 10000.0f);
    auto q_alone = q;
    auto k_alone = k;
    std::vector<float> cos_sin(static_cast<size_t>(tokens) * d);
    rope_cos_sin(pos.data(), tokens, d, 10000.0f, cos_sin.data(), &pool);
    rope_rotate_half_table(q.data(), k.data(), cos_sin.data(), tokens, heads, kv_heads, d, &pool);
    EXPECT_TRUE(all_close(q.data(), q_expected, 1e-6, 1e-5));
    EXPECT_TRUE(all_close(k.data(), k_expected, 1e-6, 1e-5));
    for (int t = 0; t < tokens; ++t) {
      rope_rotate_half(q_alone.data() + static_cast<size_t>(t) * heads * d,
                       k_alone.data() + static_cast<size_t>(t) * kv_heads * d, &pos[t], 1, heads,
                       kv_heads, d, 10000.0f);
    }
    EXPECT_EQ(0, std::memcmp(q_alone.data(), q.data(), q.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(k_alone.data(), k.data(), k.size() * sizeof(float)));
  }
}

// The stacked form the model uses, on every ISA: against the double reference (including
// gates whose exp overflows or underflows), and bit for bit the same whatever the thread split
// and whichever other rows are computed with a row (batch invariance).
TEST(SiluAndMul, StackedMatchesReferenceOnEveryIsaAndSplit) {
  std::mt19937 rng(6);
  ThreadPool pool(2);
  for (int ffn : {1, 15, 16, 17, 100, 2048}) {
    const int rows = 5;
    SCOPED_TRACE(::testing::Message() << "ffn=" << ffn);
    auto gate_up = random_floats(rng, static_cast<size_t>(rows) * 2 * ffn, -12.0f, 12.0f);
    gate_up[0] = -100.0f;
    gate_up[static_cast<size_t>(2) * ffn] = 100.0f;            // row 1's first gate
    gate_up[static_cast<size_t>(4) * ffn + ffn - 1] = -0.0f;   // row 2's last gate
    gate_up[static_cast<size_t>(6) * ffn + ffn / 2] = 1e-30f;  // row 3, a tiny gate
    std::vector<double> expected;
    for (int r = 0; r < rows; ++r) {
      const auto* row = gate_up.data() + static_cast<size_t>(r) * 2 * ffn;
      const auto e = silu_reference(std::vector<float>(row, row + ffn),
                                    std::vector<float>(row + ffn, row + 2 * ffn));
      expected.insert(expected.end(), e.begin(), e.end());
    }
    for (Isa isa : {Isa::kPortable, Isa::kAvx2, Isa::kAvx512}) {
      if (!isa_supported(isa)) continue;
      SCOPED_TRACE(isa_name(isa));
      std::vector<float> out(static_cast<size_t>(rows) * ffn);
      silu_and_mul_stacked(gate_up.data(), out.data(), rows, ffn, nullptr, isa);
      EXPECT_TRUE(all_close(out.data(), expected, 1e-6, 1e-5));
      std::vector<float> pooled(out.size());
      silu_and_mul_stacked(gate_up.data(), pooled.data(), rows, ffn, &pool, isa);
      EXPECT_EQ(0, std::memcmp(pooled.data(), out.data(), out.size() * sizeof(float)));
      std::vector<float> alone(ffn);  // row 3 by itself
      silu_and_mul_stacked(gate_up.data() + static_cast<size_t>(3) * 2 * ffn, alone.data(), 1, ffn,
                           nullptr, isa);
      EXPECT_EQ(0, std::memcmp(alone.data(), out.data() + static_cast<size_t>(3) * ffn,
                               alone.size() * sizeof(float)));
    }
  }
}

}  // namespace
}  // namespace pagedserve::kernels

namespace pagedserve::kernels {
namespace {

TEST(AddRmsNorm, UpdatesTheResidualAndNormalisesTheSum) {
  std::mt19937 rng(21);
  for (int hidden : {1, 7, 8, 64, 768, 1001}) {
    SCOPED_TRACE(::testing::Message() << "hidden=" << hidden);
    const int rows = 3;
    auto x = random_floats(rng, static_cast<size_t>(rows) * hidden, -3.0f, 3.0f);
    const auto delta = random_floats(rng, x.size(), -3.0f, 3.0f);
    const auto weight = random_floats(rng, hidden, 0.5f, 1.5f);
    std::vector<double> sum_expected(x.size());
    std::vector<float> sum_as_float(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      sum_expected[i] = static_cast<double>(x[i]) + delta[i];
      sum_as_float[i] = x[i] + delta[i];
    }
    const auto norm_expected = rms_norm_reference(sum_as_float, weight, rows, hidden, 1e-5f);
    std::vector<float> out(x.size(), std::nanf(""));
    add_rms_norm(x.data(), delta.data(), weight.data(), out.data(), rows, hidden, 1e-5f);
    EXPECT_TRUE(all_close(x.data(), sum_expected, 1e-6, 1e-6));
    EXPECT_TRUE(all_close(out.data(), norm_expected, 1e-5, 1e-5));
  }
}

TEST(SiluAndMulStacked, ReadsGateThenUpHalvesOfEachRow) {
  std::mt19937 rng(22);
  for (int ffn : {1, 5, 64, 300}) {
    const int rows = 4;
    const auto gate_up = random_floats(rng, static_cast<size_t>(rows) * 2 * ffn, -8.0f, 8.0f);
    std::vector<double> expected(static_cast<size_t>(rows) * ffn);
    for (int r = 0; r < rows; ++r) {
      for (int i = 0; i < ffn; ++i) {
        const double g = gate_up[static_cast<size_t>(r) * 2 * ffn + i];
        const double u = gate_up[static_cast<size_t>(r) * 2 * ffn + ffn + i];
        expected[static_cast<size_t>(r) * ffn + i] = g / (1.0 + std::exp(-g)) * u;
      }
    }
    std::vector<float> out(expected.size(), std::nanf(""));
    silu_and_mul_stacked(gate_up.data(), out.data(), rows, ffn);
    EXPECT_TRUE(all_close(out.data(), expected, 1e-6, 1e-5)) << "ffn=" << ffn;
  }
}

}  // namespace
}  // namespace pagedserve::kernels
