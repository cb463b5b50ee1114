// Tests the kernels of the model families beyond Llama (RoPE from given frequencies and partial
// rotary, per-head RMSNorm, biases, soft-capping, GeGLU) against double-precision references
// written out here, on every ISA a kernel has, and bit for bit across thread splits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
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

constexpr Isa kAllIsas[] = {Isa::kPortable, Isa::kAvx2, Isa::kAvx512};

// Frequencies as a scaled RoPE leaves them: theta^(-2i/d) times arbitrary per-pair factors.
std::vector<float> scaled_inv_freq(std::mt19937& rng, int half, float theta) {
  std::vector<float> freq(half);
  for (int i = 0; i < half; ++i) {
    freq[i] = static_cast<float>(std::pow(static_cast<double>(theta), -1.0 * i / half) *
                                 std::uniform_real_distribution<double>(0.05, 1.0)(rng));
  }
  return freq;
}

// The cos/sin table of token t: cos(pos * f) * factor and sin(pos * f) * factor in double.
std::vector<double> cos_sin_reference(const std::vector<int32_t>& pos,
                                      const std::vector<const float*>& freq_of_token,
                                      int rotary_dim, double factor) {
  const int half = rotary_dim / 2;
  std::vector<double> out(pos.size() * rotary_dim);
  for (size_t t = 0; t < pos.size(); ++t) {
    for (int i = 0; i < half; ++i) {
      const double angle = pos[t] * static_cast<double>(freq_of_token[t][i]);
      out[t * rotary_dim + i] = std::cos(angle) * factor;
      out[t * rotary_dim + half + i] = std::sin(angle) * factor;
    }
  }
  return out;
}

TEST(RopeCosSinInvFreq, SharedAndPerTokenTables) {
  std::mt19937 rng(41);
  ThreadPool pool(2, /*min_parallel_flops=*/0.0);
  const int tokens = 29;
  for (int rotary_dim : {2, 32, 128}) {
    for (float factor : {1.0f, 1.3f}) {
      SCOPED_TRACE(::testing::Message() << "rotary_dim=" << rotary_dim << " factor=" << factor);
      const auto short_freq = scaled_inv_freq(rng, rotary_dim / 2, 10000.0f);
      const auto long_freq = scaled_inv_freq(rng, rotary_dim / 2, 500000.0f);
      std::vector<int32_t> pos(tokens);
      for (auto& p : pos) p = random_int(rng, 0, 131072);
      std::vector<const float*> shared(tokens, short_freq.data());
      std::vector<const float*> per_token(tokens);
      for (int t = 0; t < tokens; ++t) per_token[t] = t % 3 ? long_freq.data() : short_freq.data();
      std::vector<float> table(static_cast<size_t>(tokens) * rotary_dim, std::nanf(""));
      // Relative to the factor: the float result of cos of an exact double angle.
      rope_cos_sin_inv_freq(pos.data(), tokens, rotary_dim, short_freq.data(), nullptr, factor,
                            table.data());
      EXPECT_TRUE(all_close(table.data(), cos_sin_reference(pos, shared, rotary_dim, factor),
                            1e-7 * factor, 1e-7));
      std::vector<float> pooled(table.size(), std::nanf(""));
      rope_cos_sin_inv_freq(pos.data(), tokens, rotary_dim, nullptr, per_token.data(), factor,
                            pooled.data(), &pool);
      EXPECT_TRUE(all_close(pooled.data(), cos_sin_reference(pos, per_token, rotary_dim, factor),
                            1e-7 * factor, 1e-7));
    }
  }
}

// Rotates pairs (i, i + rotary_dim/2) of every head by pos * freq[i] with cos and sin in double
// scaled by factor; dims from rotary_dim on stay as they are.
std::vector<double> partial_rope_reference(const std::vector<float>& x,
                                           const std::vector<int32_t>& pos,
                                           const std::vector<float>& freq, double factor, int heads,
                                           int d, int rotary_dim) {
  std::vector<double> out(x.begin(), x.end());
  const int half = rotary_dim / 2;
  for (size_t t = 0; t < pos.size(); ++t) {
    for (int h = 0; h < heads; ++h) {
      const size_t base = (t * heads + h) * d;
      for (int i = 0; i < half; ++i) {
        const double angle = pos[t] * static_cast<double>(freq[i]);
        const double c = std::cos(angle) * factor, s = std::sin(angle) * factor;
        const double a = x[base + i], b = x[base + half + i];
        out[base + i] = a * c - b * s;
        out[base + half + i] = b * c + a * s;
      }
    }
  }
  return out;
}

TEST(RopeRotateHalfPartial, RotatesTheFirstRotaryDimsOnly) {
  std::mt19937 rng(42);
  ThreadPool pool(2, /*min_parallel_flops=*/0.0);
  struct Case {
    int tokens, heads, kv_heads, d, rotary_dim;
    float factor;
  };
  for (const Case c :
       {Case{3, 2, 1, 8, 2, 1.0f}, Case{7, 4, 2, 96, 32, 1.0f}, Case{5, 8, 2, 128, 64, 1.19f},
        Case{4, 3, 3, 80, 80, 1.0f}, Case{6, 4, 1, 64, 48, 0.9f}}) {
    SCOPED_TRACE(::testing::Message() << "d=" << c.d << " rotary_dim=" << c.rotary_dim);
    std::vector<int32_t> pos(c.tokens);
    for (auto& p : pos) p = random_int(rng, 0, 60000);
    const auto freq = scaled_inv_freq(rng, c.rotary_dim / 2, 10000.0f);
    std::vector<float> table(static_cast<size_t>(c.tokens) * c.rotary_dim);
    rope_cos_sin_inv_freq(pos.data(), c.tokens, c.rotary_dim, freq.data(), nullptr, c.factor,
                          table.data());
    auto q = random_floats(rng, static_cast<size_t>(c.tokens) * c.heads * c.d);
    auto k = random_floats(rng, static_cast<size_t>(c.tokens) * c.kv_heads * c.d);
    const auto q_in = q, k_in = k;
    const auto q_expected =
        partial_rope_reference(q, pos, freq, c.factor, c.heads, c.d, c.rotary_dim);
    const auto k_expected =
        partial_rope_reference(k, pos, freq, c.factor, c.kv_heads, c.d, c.rotary_dim);
    rope_rotate_half_partial(q.data(), k.data(), table.data(), c.tokens, c.heads, c.kv_heads, c.d,
                             c.rotary_dim, &pool);
    EXPECT_TRUE(all_close(q.data(), q_expected, 2e-6, 1e-5));
    EXPECT_TRUE(all_close(k.data(), k_expected, 2e-6, 1e-5));
    for (size_t i = 0; i < q.size(); ++i) {  // the pass-through dims keep their bits
      if (static_cast<int>(i % c.d) >= c.rotary_dim) {
        ASSERT_EQ(q[i], q_in[i]) << i;
      }
    }
    // k null: q alone rotates the same, and nothing else is touched.
    auto q_only = q_in;
    rope_rotate_half_partial(q_only.data(), nullptr, table.data(), c.tokens, c.heads, 0, c.d,
                             c.rotary_dim);
    EXPECT_EQ(0, std::memcmp(q_only.data(), q.data(), q.size() * sizeof(float)));
    if (c.rotary_dim == c.d) {  // the whole-head form is the same function
      auto q_table = q_in, k_table = k_in;
      rope_rotate_half_table(q_table.data(), k_table.data(), table.data(), c.tokens, c.heads,
                             c.kv_heads, c.d);
      EXPECT_EQ(0, std::memcmp(q_table.data(), q.data(), q.size() * sizeof(float)));
      EXPECT_EQ(0, std::memcmp(k_table.data(), k.data(), k.size() * sizeof(float)));
    }
  }
}

TEST(RmsNormHeads, NormalisesEachHeadSliceWithTheSharedWeight) {
  std::mt19937 rng(43);
  for (const int d : {1, 8, 64, 128, 100}) {
    const int rows = 3, heads = 5;
    SCOPED_TRACE(::testing::Message() << "d=" << d);
    auto x = random_floats(rng, static_cast<size_t>(rows) * heads * d, -4.0f, 4.0f);
    for (int i = 0; i < d; ++i)
      x[static_cast<size_t>(heads + 1) * d + i] *= 100.0f;  // one loud head
    const auto w = random_floats(rng, d, 0.5f, 1.5f);
    std::vector<double> expected(x.size());
    for (size_t slice = 0; slice < x.size() / d; ++slice) {
      double sum_sq = 0.0;
      for (int i = 0; i < d; ++i)
        sum_sq += static_cast<double>(x[slice * d + i]) * x[slice * d + i];
      const double inv_rms = 1.0 / std::sqrt(sum_sq / d + 1e-6);
      for (int i = 0; i < d; ++i) expected[slice * d + i] = x[slice * d + i] * inv_rms * w[i];
    }
    rms_norm_heads(x.data(), w.data(), rows, heads, d, 1e-6f);
    EXPECT_TRUE(all_close(x.data(), expected, 1e-6, 1e-5));
  }
}

TEST(AddBias, AddsTheBiasToEveryRow) {
  std::mt19937 rng(44);
  for (const int width : {1, 7, 64, 1000}) {
    const int rows = 4;
    auto x = random_floats(rng, static_cast<size_t>(rows) * width);
    const auto bias = random_floats(rng, width, -5.0f, 5.0f);
    std::vector<double> expected(x.size());
    for (size_t i = 0; i < x.size(); ++i) expected[i] = static_cast<double>(x[i]) + bias[i % width];
    add_bias(x.data(), bias.data(), rows, width);
    EXPECT_TRUE(all_close(x.data(), expected, 1e-6, 1e-6)) << "width=" << width;
  }
}

TEST(SoftCap, MatchesCapTimesTanhOnEveryIsaAndSplit) {
  std::mt19937 rng(45);
  ThreadPool pool(3, /*min_parallel_flops=*/0.0);
  for (const float cap : {0.5f, 30.0f, 50.0f}) {
    for (const int64_t n : {1, 15, 17, 10000}) {
      SCOPED_TRACE(::testing::Message() << "cap=" << cap << " n=" << n);
      auto x = random_floats(rng, n, -4.0f * cap, 4.0f * cap);
      // Tails and the neighbourhood of 0, where tanh's forms switch.
      const float specials[] = {1e4f * cap,    -1e4f * cap,  std::numeric_limits<float>::infinity(),
                                -0.0f,         1e-30f,       0.2499f * cap,
                                0.2501f * cap, -0.25f * cap, 1e-3f * cap};
      for (size_t i = 0; i < std::size(specials) && i < x.size(); ++i)
        x[i * x.size() / 9] = specials[i];
      std::vector<double> expected(x.size());
      for (size_t i = 0; i < x.size(); ++i)
        expected[i] = cap * std::tanh(static_cast<double>(x[i]) / cap);
      for (Isa isa : kAllIsas) {
        if (!isa_supported(isa)) continue;
        SCOPED_TRACE(isa_name(isa));
        auto capped = x;
        soft_cap(capped.data(), n, cap, nullptr, isa);
        EXPECT_TRUE(all_close(capped.data(), expected, 2e-7 * cap, 1e-6));
        auto pooled = x;
        soft_cap(pooled.data(), n, cap, &pool, isa);
        EXPECT_EQ(0, std::memcmp(pooled.data(), capped.data(), x.size() * sizeof(float)));
      }
    }
  }
}

// Below |x| = cap / 4, where 1 - 2 / (e^2x + 1) would cancel, the result keeps its relative
// precision down to tiny magnitudes.
TEST(SoftCap, SmallArgumentsKeepTheirRelativePrecision) {
  std::mt19937 rng(47);
  const float cap = 30.0f;
  std::vector<float> x(1000);
  for (float& v : x) {
    const double magnitude =
        std::pow(10.0, std::uniform_real_distribution<double>(-30, -0.61)(rng));
    v = static_cast<float>((random_int(rng, 0, 1) ? cap : -cap) * magnitude);  // |v| < cap / 4
  }
  std::vector<double> expected(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    expected[i] = cap * std::tanh(static_cast<double>(x[i]) / cap);
  for (Isa isa : kAllIsas) {
    if (!isa_supported(isa)) continue;
    SCOPED_TRACE(isa_name(isa));
    auto capped = x;
    soft_cap(capped.data(), static_cast<int64_t>(capped.size()), cap, nullptr, isa);
    EXPECT_TRUE(all_close(capped.data(), expected, 0.0, 1e-6));
  }
}

double gelu_tanh_reference(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

TEST(GeluTanhAndMulStacked, MatchesReferenceOnEveryIsaSplitAndBatch) {
  std::mt19937 rng(46);
  ThreadPool pool(2, /*min_parallel_flops=*/0.0);
  for (const int ffn : {1, 15, 16, 17, 100, 2048}) {
    const int rows = 5;
    SCOPED_TRACE(::testing::Message() << "ffn=" << ffn);
    auto gate_up = random_floats(rng, static_cast<size_t>(rows) * 2 * ffn, -6.0f, 6.0f);
    gate_up[0] = -100.0f;                                      // gelu ~ -0: no inf / inf
    gate_up[static_cast<size_t>(2) * ffn] = 100.0f;            // row 1: gelu = x
    gate_up[static_cast<size_t>(4) * ffn + ffn - 1] = -0.0f;   // row 2's last gate
    gate_up[static_cast<size_t>(6) * ffn + ffn / 2] = 1e-30f;  // row 3, a tiny gate
    std::vector<double> expected(static_cast<size_t>(rows) * ffn);
    for (int r = 0; r < rows; ++r) {
      for (int i = 0; i < ffn; ++i) {
        const size_t g = static_cast<size_t>(r) * 2 * ffn + i;
        expected[static_cast<size_t>(r) * ffn + i] =
            gelu_tanh_reference(gate_up[g]) * gate_up[g + ffn];
      }
    }
    for (Isa isa : kAllIsas) {
      if (!isa_supported(isa)) continue;
      SCOPED_TRACE(isa_name(isa));
      std::vector<float> out(expected.size(), std::nanf(""));
      gelu_tanh_and_mul_stacked(gate_up.data(), out.data(), rows, ffn, nullptr, isa);
      EXPECT_TRUE(all_close(out.data(), expected, 1e-6, 1e-5));
      std::vector<float> pooled(out.size(), std::nanf(""));
      gelu_tanh_and_mul_stacked(gate_up.data(), pooled.data(), rows, ffn, &pool, isa);
      EXPECT_EQ(0, std::memcmp(pooled.data(), out.data(), out.size() * sizeof(float)));
      std::vector<float> alone(ffn, std::nanf(""));  // row 3 by itself
      gelu_tanh_and_mul_stacked(gate_up.data() + static_cast<size_t>(3) * 2 * ffn, alone.data(), 1,
                                ffn, nullptr, isa);
      EXPECT_EQ(0, std::memcmp(alone.data(), out.data() + static_cast<size_t>(3) * ffn,
                               alone.size() * sizeof(float)));
    }
  }
}

}  // namespace
}  // namespace pagedserve::kernels
