// Tests the KV cache's scalar conversions (kernels/cpu/kv_dtype.h) against independent
// references: the F16C instructions where the CPU has them, every half widened and compared
// with its hand-decoded value, and round-to-nearest-even checked in double against the two
// neighbouring representable values.
#include <gtest/gtest.h>

#include <immintrin.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/kv_dtype.h"

namespace pagedserve::kernels {
namespace {

__attribute__((target("f16c"))) uint16_t hardware_f32_to_f16(float x) {
  return _cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
__attribute__((target("f16c"))) float hardware_f16_to_f32(uint16_t h) { return _cvtsh_ss(h); }

// Floats that exercise every branch: zeros, subnormal-half range and its ties, the largest
// half and the overflow tie, infinities, NaN, and random bit patterns of every exponent.
std::vector<float> interesting_floats() {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.5f,
                          65504.0f,
                          65519.99f,
                          65520.0f,
                          -65520.0f,
                          1e10f,
                          std::ldexp(1.0f, -14),
                          std::ldexp(1.0f, -24),
                          std::ldexp(1.0f, -25),
                          std::ldexp(1.5f, -25),
                          std::ldexp(3.0f, -25),
                          std::ldexp(1.0f, -26),
                          std::ldexp(1.0f, -14) - std::ldexp(1.0f, -25),
                          std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::denorm_min(),
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity()};
  // Ties: a float exactly halfway between two halves, both parities.
  for (uint32_t mantissa : {0x1000u, 0x3000u, 0x0fffu, 0x1001u}) {
    v.push_back(std::bit_cast<float>(0x3f800000u | mantissa));
    v.push_back(std::bit_cast<float>(0x38800000u | mantissa));  // near the smallest normal
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    const float x = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    if (!std::isnan(x)) v.push_back(x);
  }
  std::uniform_real_distribution<float> small(-4.0f, 4.0f);
  for (int i = 0; i < 100000; ++i) v.push_back(small(rng));
  return v;
}

TEST(KvDtype, Float16MatchesF16cInstructions) {
  if (!isa_supported(Isa::kAvx2)) GTEST_SKIP() << "no F16C on this CPU";
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float expected = hardware_f16_to_f32(static_cast<uint16_t>(h));
    const float actual = f16_to_f32(static_cast<uint16_t>(h));
    ASSERT_EQ(std::bit_cast<uint32_t>(expected), std::bit_cast<uint32_t>(actual))
        << "half 0x" << std::hex << h;
  }
  for (float x : interesting_floats()) {
    ASSERT_EQ(hardware_f32_to_f16(x), f32_to_f16(x)) << "float " << x;
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(nan))));
  EXPECT_EQ(hardware_f32_to_f16(nan), f32_to_f16(nan));
}

// Round to nearest even, checked in double: the result is the nearest representable value,
// and on a tie the one with an even last bit.
template <class Narrow, class Widen>
void check_nearest_even(float x, Narrow narrow, Widen widen, double max_finite) {
  const uint16_t r = narrow(x);
  const double got = widen(r);
  if (std::fabs(static_cast<double>(x)) > max_finite) {
    // Only the overflow rounding may leave the finite range; then it must be infinity.
    if (std::isinf(got)) return;
  }
  ASSERT_TRUE(std::isfinite(got)) << x;
  // Neighbours of r away from and towards zero.
  const uint16_t magnitude = r & 0x7fffu;
  const double up = std::fabs(widen(static_cast<uint16_t>((r & 0x8000u) | (magnitude + 1))));
  const double down =
      magnitude == 0 ? 0.0
                     : std::fabs(widen(static_cast<uint16_t>((r & 0x8000u) | (magnitude - 1))));
  const double error = std::fabs(got - static_cast<double>(x));
  const double ax = std::fabs(static_cast<double>(x));
  if (std::isfinite(up)) {
    ASSERT_LE(error, std::fabs(up - ax)) << x;
  }
  ASSERT_LE(error, std::fabs(ax - down)) << x;
  if (std::isfinite(up) && error == std::fabs(up - ax) && error > 0) {
    ASSERT_EQ(0, r & 1) << "tie not to even: " << x;
  }
  if (error == std::fabs(ax - down) && error > 0) {
    ASSERT_EQ(0, r & 1) << "tie not to even: " << x;
  }
}

TEST(KvDtype, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(0x3f80, f32_to_bf16(1.0f));
  EXPECT_EQ(0x3f80, f32_to_bf16(std::bit_cast<float>(0x3f808000u)));  // tie, even below
  EXPECT_EQ(0x3f82, f32_to_bf16(std::bit_cast<float>(0x3f818000u)));  // tie, even above
  EXPECT_EQ(0x3f81, f32_to_bf16(std::bit_cast<float>(0x3f808001u)));
  EXPECT_EQ(0xbf80, f32_to_bf16(-1.0f));
  EXPECT_EQ(0x7f80, f32_to_bf16(std::numeric_limits<float>::max()));  // rounds up to infinity
  EXPECT_EQ(0xff80, f32_to_bf16(-std::numeric_limits<float>::infinity()));
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(1.0f, bf16_to_f32(0x3f80));
  EXPECT_EQ(-2.0f, bf16_to_f32(0xc000));
  for (float x : interesting_floats()) {
    check_nearest_even(x, f32_to_bf16, bf16_to_f32, bf16_to_f32(0x7f7f));
    if (HasFatalFailure()) return;
  }
}

TEST(KvDtype, Float16RoundsToNearestEven) {
  for (float x : interesting_floats()) {
    check_nearest_even(x, f32_to_f16, f16_to_f32, 65504.0);
    if (HasFatalFailure()) return;
  }
}

TEST(KvDtype, NamesAndSizes) {
  EXPECT_EQ(KvDtype::kFloat16, parse_kv_dtype("float16"));
  EXPECT_EQ(KvDtype::kFloat16, parse_kv_dtype("half"));
  EXPECT_EQ(KvDtype::kBFloat16, parse_kv_dtype("bf16"));
  EXPECT_EQ(KvDtype::kFloat32, parse_kv_dtype("float32"));
  EXPECT_EQ(KvDtype::kInt8, parse_kv_dtype("int8"));
  EXPECT_EQ(1, kv_dtype_size(KvDtype::kInt8));
  EXPECT_EQ(4, kv_dtype_row_scale_bytes(KvDtype::kInt8));
  EXPECT_EQ(0, kv_dtype_row_scale_bytes(KvDtype::kFloat16));
  EXPECT_STREQ("int8", kv_dtype_name(KvDtype::kInt8));
  EXPECT_FALSE(parse_kv_dtype("auto").has_value());
  EXPECT_FALSE(parse_kv_dtype("fp8").has_value());
  EXPECT_EQ(4, kv_dtype_size(KvDtype::kFloat32));
  EXPECT_EQ(2, kv_dtype_size(KvDtype::kFloat16));
  EXPECT_EQ(2, kv_dtype_size(KvDtype::kBFloat16));
  EXPECT_STREQ("bfloat16", kv_dtype_name(KvDtype::kBFloat16));
}

}  // namespace
}  // namespace pagedserve::kernels
