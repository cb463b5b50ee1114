// The block formats of kernels/cpu/quant.h: names and sizes, dequantization bit for bit against
// a reference written here from ggml's block layouts, the packed layout's round trip, and the
// error of quantize_row against bounds derived from each format.
#include "kernels/cpu/quant.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/quant_kernels.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/quant_test_util.h"

namespace pagedserve::kernels {
namespace {

using testing::kAllQuantTypes;

::testing::AssertionResult same_bits(const std::vector<float>& a, const float* b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], 4) != 0) {
      return ::testing::AssertionFailure() << "element " << i << ": " << a[i] << " vs " << b[i];
    }
  }
  return ::testing::AssertionSuccess();
}

TEST(QuantFormatTest, NamesSizesAndParsing) {
  const char* names[] = {"Q8_0", "Q4_0", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K"};
  const size_t bytes[] = {34, 18, 22, 24, 144, 176, 210};
  const int elements[] = {32, 32, 32, 32, 256, 256, 256};
  for (int i = 0; i < 7; ++i) {
    const QuantType type = kAllQuantTypes[i];
    EXPECT_STREQ(quant_type_name(type), names[i]);
    EXPECT_EQ(quant_block_bytes(type), bytes[i]);
    EXPECT_EQ(quant_block_elements(type), elements[i]);
    EXPECT_EQ(parse_quant_type(names[i]), type);
    std::string lower = names[i];
    for (char& c : lower) c = static_cast<char>(std::tolower(c));
    EXPECT_EQ(parse_quant_type(lower), type);
    EXPECT_EQ(quant_row_bytes(type, 4096), 4096 / elements[i] * bytes[i]);
  }
  EXPECT_EQ(parse_quant_type("q4_k_m"), std::nullopt);
  EXPECT_EQ(parse_quant_type("Q4_1"), std::nullopt);
  EXPECT_EQ(parse_quant_type(""), std::nullopt);
  EXPECT_EQ(parse_quant_type("F16"), std::nullopt);
}

// (a) Random blocks, byte by byte: dequantize_row is ggml's dequantization bit for bit; the
// packed weight gives the same values back, and ggml's bytes survive decode + encode.
TEST(QuantFormatTest, DequantizeMatchesGgmlReferenceBitForBit) {
  std::mt19937 rng(1);
  for (QuantType type : kAllQuantTypes) {
    SCOPED_TRACE(quant_type_name(type));
    const int blocks = 40;
    const std::vector<uint8_t> bytes = testing::random_blocks(rng, type, blocks);
    const std::vector<float> expected = testing::ref_dequantize_row(type, bytes);
    std::vector<float> got(expected.size());
    dequantize_row(type, bytes.data(), got.data(), static_cast<int64_t>(got.size()));
    EXPECT_TRUE(same_bits(expected, got.data()));

    std::vector<std::byte> reencoded(quant_block_bytes(type));
    for (int b = 0; b < blocks; ++b) {
      detail::DecodedBlock decoded;
      const auto* src = reinterpret_cast<const std::byte*>(bytes.data()) + b * reencoded.size();
      detail::decode_block(type, src, decoded);
      detail::encode_block(type, decoded, reencoded.data());
      ASSERT_EQ(std::memcmp(src, reencoded.data(), reencoded.size()), 0) << "block " << b;
    }

    // As a [rows, k] weight: 19 rows (two tiles, the second partial) of `per_row` blocks.
    const int rows = 19;
    const int k = quant_block_elements(type) * 2;
    const std::vector<uint8_t> weight = testing::random_blocks(rng, type, rows * 2);
    const QuantizedWeight packed = QuantizedWeight::pack(weight.data(), type, rows, k);
    EXPECT_EQ(packed.weight_bytes(), weight.size());
    const std::vector<float> all = testing::ref_dequantize_row(type, weight);
    std::vector<float> row(k);
    for (int r = 0; r < rows; ++r) {
      packed.dequantize_row_to(r, row.data());
      EXPECT_TRUE(
          same_bits(std::vector<float>(all.begin() + r * k, all.begin() + (r + 1) * k), row.data()))
          << "row " << r;
    }
  }
}

// The bytes a tile holds: no more than ggml's rows for the 32-value blocks; 3% more for Q4_K /
// Q5_K (the sub-block scales a byte each), 1% for Q6_K (its scale line half padding).
TEST(QuantFormatTest, PackedLayoutSize) {
  for (QuantType type : kAllQuantTypes) {
    const int k = quant_block_elements(type) * 16;
    const detail::TileLayout layout = detail::tile_layout(type, k);
    EXPECT_EQ(layout.tile_bytes % 64, 0u) << quant_type_name(type);
    const double ratio =
        static_cast<double>(layout.tile_bytes) / (detail::kTileCols * quant_row_bytes(type, k));
    EXPECT_LE(ratio, 1.03) << quant_type_name(type);
  }
}

// Where the packed tile puts each block, read from the bytes against the layout that
// quant_kernels.h documents (written out here, not taken from its offset functions): groups of a
// 64-byte scale line, then the quants of 2 blocks (Q8_0, Q4_0, Q5_0) or 1, so that a tile reads
// front to back as one stream. Each block gets its own d (and m) so a misplaced one shows.
TEST(QuantFormatTest, PackedTileIsGroupsOfAScaleLineThenQuants) {
  struct Expected {
    QuantType type;
    int group_blocks;    // blocks a scale line serves
    int scale_bytes;     // a block's part of the line
    size_t quant_bytes;  // a block's quants after the line
  };
  const Expected kLayouts[] = {{QuantType::kQ8_0, 2, 32, 512},  {QuantType::kQ4_0, 2, 32, 256},
                               {QuantType::kQ5_0, 2, 32, 320},  {QuantType::kQ5_1, 1, 64, 320},
                               {QuantType::kQ4_K, 1, 64, 2304}, {QuantType::kQ5_K, 1, 64, 2816},
                               {QuantType::kQ6_K, 1, 64, 3328}};
  std::mt19937 rng(7);
  for (const Expected& e : kLayouts) {
    const bool has_min =
        e.type == QuantType::kQ5_1 || e.type == QuantType::kQ4_K || e.type == QuantType::kQ5_K;
    const int bits = e.type == QuantType::kQ8_0                                 ? 8
                     : e.type == QuantType::kQ4_0 || e.type == QuantType::kQ4_K ? 4
                     : e.type == QuantType::kQ6_K                               ? 6
                                                                                : 5;
    for (int nb : {1, 2, 3, 5}) {
      const int n = 16;
      const int k = nb * quant_block_elements(e.type);
      const auto d_bits = [](int b, int c) { return static_cast<uint16_t>(0x3c00 + 32 * b + c); };
      const auto m_bits = [](int b, int c) { return static_cast<uint16_t>(0x3800 + 32 * b + c); };
      std::vector<std::byte> rows(n * quant_row_bytes(e.type, k));
      std::vector<uint8_t> first_quants(static_cast<size_t>(n) * nb * 4);
      for (int c = 0; c < n; ++c) {
        for (int b = 0; b < nb; ++b) {
          detail::DecodedBlock block;
          block.d = d_bits(b, c);
          block.m = has_min ? m_bits(b, c) : 0;
          for (int j = 0; j < 16; ++j) block.sc[j] = static_cast<int8_t>(rng() % 32);
          for (int j = 0; j < 8; ++j) block.mn[j] = static_cast<uint8_t>(rng() % 32);
          for (auto& u : block.u) u = static_cast<uint8_t>(rng() % (1u << bits));
          std::memcpy(&first_quants[(static_cast<size_t>(c) * nb + b) * 4], block.u, 4);
          detail::encode_block(
              e.type, block,
              rows.data() + c * quant_row_bytes(e.type, k) + b * quant_block_bytes(e.type));
        }
      }
      const QuantizedWeight w = QuantizedWeight::pack(rows.data(), e.type, n, k);
      const size_t group_bytes = 64 + e.group_blocks * e.quant_bytes;
      const int groups = (nb + e.group_blocks - 1) / e.group_blocks;
      ASSERT_EQ(w.storage_bytes(), groups * size_t{64} + nb * e.quant_bytes)
          << quant_type_name(e.type) << " nb " << nb;
      const std::byte* tile = w.data();
      for (int b = 0; b < nb; ++b) {
        const std::byte* line = tile + (b / e.group_blocks) * group_bytes;
        const std::byte* scales = line + (b % e.group_blocks) * e.scale_bytes;
        const std::byte* quants = line + 64 + (b % e.group_blocks) * e.quant_bytes;
        for (int c = 0; c < n; ++c) {
          uint16_t d = 0, m = 0;
          std::memcpy(&d, scales + 2 * c, 2);
          std::memcpy(&m, scales + 32 + 2 * c, 2);
          EXPECT_EQ(d, d_bits(b, c)) << quant_type_name(e.type) << " nb " << nb << " b " << b;
          if (has_min) {
            EXPECT_EQ(m, m_bits(b, c)) << quant_type_name(e.type) << " b " << b;
          }
          if (e.type == QuantType::kQ8_0) {  // vector 0: byte 4c + i is u[c][i]
            for (int i = 0; i < 4; ++i) {
              EXPECT_EQ(std::to_integer<uint8_t>(quants[4 * c + i]),
                        first_quants[(static_cast<size_t>(c) * nb + b) * 4 + i]);
            }
          }
        }
      }
    }
  }
}

// ---- (b) quantize_row round trips ------------------------------------------------------------

// Largest per-element error the format allows where the quant is not clamped: half a step
// (plus the float rounding of the dequantized product), and for the affine types the f16
// rounding of the stored minimum.
struct Bounds {
  double element_slack = 0;  // relative, on top of step / 2
  double rms_of_amax = 0;    // block RMS error <= this * block amax
};

Bounds format_bounds(QuantType type) {
  switch (type) {
    case QuantType::kQ8_0:  // (plus the stored scale's rounding: check_block)
      return {1e-6, 0.5 / 127};
    case QuantType::kQ4_0:
      return {1e-6, 0.5 / 7};
    case QuantType::kQ5_0:
      return {1e-6, 0.5 / 15};
    case QuantType::kQ5_1:
      return {0.02, 1.05 * 0.5 * 2 / 31};  // d rounded to f16 may clamp the max by 31 * 2^-11 steps
    case QuantType::kQ4_K:                 // range <= 2 amax in 15 steps, +10% for the 6-bit scales
      return {1e-5, 1.1 * 0.5 * 2 / 15};
    case QuantType::kQ5_K:
      return {1e-5, 1.1 * 0.5 * 2 / 31};
    case QuantType::kQ6_K:  // amax in 32 steps, +10% for the 8-bit scales
      return {1e-5, 1.1 * 0.5 / 31};
  }
  return {};
}

// Checks one block's round trip: per element, |y - x| <= step/2 (1 + slack) + |x| 2^-22
// wherever x / step lies inside the quant range (step and range from the stored block); the
// block's RMS error against the format bound.
void check_block(QuantType type, const float* x, const uint8_t* bytes, const float* y) {
  const int n = quant_block_elements(type);
  const testing::RefBlock r = testing::parse_block(type, bytes);
  const Bounds bounds = format_bounds(type);
  const int qmax = type == QuantType::kQ8_0   ? 127
                   : type == QuantType::kQ4_0 ? 7
                   : type == QuantType::kQ5_0 ? 15
                   : type == QuantType::kQ6_K ? 31
                   : type == QuantType::kQ4_K ? 15
                                              : 31;
  const int qmin = type == QuantType::kQ5_1 || type == QuantType::kQ4_K || type == QuantType::kQ5_K
                       ? 0
                       : -(qmax + 1);
  double amax = 0, sse = 0;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(static_cast<double>(x[i])));
  // Q8_0 rounds x / (amax / 127) as ggml does but stores d in f16: each value may be off by
  // |q| <= 127 times d's rounding on top of half a step.
  const double q8_scale_slack =
      type == QuantType::kQ8_0
          ? 127 * std::fabs(static_cast<double>(static_cast<float>(amax) / 127.0f) - r.d)
          : 0.0;
  for (int i = 0; i < n; ++i) {
    const double err = std::fabs(static_cast<double>(y[i]) - x[i]);
    sse += err * err;
    double step = r.d, lo = 0;  // x ~ step * q + lo
    if (type == QuantType::kQ5_1) lo = r.m;
    if (type == QuantType::kQ4_K || type == QuantType::kQ5_K) {
      step = static_cast<double>(r.d) * r.sc[i / 32];
      lo = -static_cast<double>(r.m) * r.mn[i / 32];
    }
    if (type == QuantType::kQ6_K) step = static_cast<double>(r.d) * r.sc[i / 16];
    const double t = step == 0 ? 0 : (x[i] - lo) / step;
    step = std::fabs(step);
    const double abs_slack = std::fabs(x[i]) * 0x1p-22 + std::fabs(lo) * 0x1p-10 + q8_scale_slack;
    if (step == 0 || t < qmin - 0.5 || t > qmax + 0.5) continue;  // clamped
    ASSERT_LE(err, step / 2 * (1 + bounds.element_slack) + abs_slack)
        << "element " << i << ": x " << x[i] << " y " << y[i] << " step " << step;
  }
  EXPECT_LE(std::sqrt(sse / n), bounds.rms_of_amax * amax + 1e-30) << "amax " << amax;
}

std::vector<float> round_trip(QuantType type, const std::vector<float>& x) {
  std::vector<uint8_t> bytes(quant_row_bytes(type, static_cast<int64_t>(x.size())));
  quantize_row(type, x.data(), bytes.data(), static_cast<int64_t>(x.size()));
  std::vector<float> y(x.size());
  dequantize_row(type, bytes.data(), y.data(), static_cast<int64_t>(y.size()));
  EXPECT_TRUE(same_bits(testing::ref_dequantize_row(type, bytes), y.data()));
  const int n = quant_block_elements(type);
  for (size_t b = 0; b < x.size() / n; ++b) {
    check_block(type, x.data() + b * n, bytes.data() + b * quant_block_bytes(type),
                y.data() + b * n);
  }
  return y;
}

// Inputs: uniform, Gaussian, outliers, all zeros, one huge value, negative-only, positive-only,
// constant blocks and values spanning magnitudes.
std::vector<std::vector<float>> round_trip_inputs(std::mt19937& rng, int n) {
  std::vector<std::vector<float>> inputs;
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  auto make = [&](auto&& f) {
    std::vector<float> v(n);
    for (int i = 0; i < n; ++i) v[i] = f(i);
    inputs.push_back(v);
  };
  make([&](int) { return uniform(rng); });
  make([&](int) { return normal(rng); });
  make([&](int i) { return i % 97 == 5 ? 50.0f * uniform(rng) : normal(rng); });
  make([&](int) { return 0.0f; });
  make([&](int i) { return i == 3 ? 3.0e4f : 1e-3f * uniform(rng); });
  make([&](int) { return -std::fabs(uniform(rng)) - 0.25f; });
  make([&](int) { return std::fabs(uniform(rng)) + 0.25f; });
  make([&](int) { return 0.375f; });
  make([&](int i) { return std::ldexp(uniform(rng), (i / 32) % 20 - 10); });
  return inputs;
}

TEST(QuantFormatTest, QuantizeRoundTripWithinFormatBounds) {
  std::mt19937 rng(2);
  for (QuantType type : kAllQuantTypes) {
    SCOPED_TRACE(quant_type_name(type));
    int index = 0;
    for (const std::vector<float>& x : round_trip_inputs(rng, 1024)) {
      SCOPED_TRACE(index++);
      const std::vector<float> y = round_trip(type, x);
      if (std::all_of(x.begin(), x.end(), [](float v) { return v == 0.0f; })) {
        EXPECT_TRUE(std::all_of(y.begin(), y.end(), [](float v) { return v == 0.0f; }));
      }
    }
  }
}

// A block of values on the grid of its extreme round-trips exactly: d = max / -offset for
// Q4_0 and Q5_0 (the extreme maps to the most negative quant, as ggml does); for Q8_0, ggml's
// d = amax / 127.
TEST(QuantFormatTest, RepresentableValuesRoundTripExactly) {
  std::mt19937 rng(5);
  for (QuantType type : {QuantType::kQ8_0, QuantType::kQ4_0, QuantType::kQ5_0}) {
    const int offset = type == QuantType::kQ8_0 ? 127 : detail::offset_of(type);
    const int top = type == QuantType::kQ8_0 ? 127 : offset - 1;
    std::vector<float> x(64);
    for (int i = 0; i < 64; ++i) {
      const int q = i % 32 == 0 ? -offset : testing::random_int(rng, -offset, top);
      x[i] = 0.25f * static_cast<float>(q);
    }
    EXPECT_EQ(round_trip(type, x), x) << quant_type_name(type);
  }
}

// Mean error on Gaussian rows, relative to the row's RMS: each format's 4/5/6/8 bits.
TEST(QuantFormatTest, GaussianErrorPerFormat) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(256 * 64);
  for (float& v : x) v = normal(rng);
  // llama.cpp's reference quantizers (quantize_row_*_ref) give 0.0054, 0.085, 0.043, 0.038,
  // 0.072, 0.036, 0.018 on N(0, 1); these quantizers must stay within 10% of that.
  const double limits[] = {0.0060, 0.094, 0.047, 0.042, 0.079, 0.040, 0.0195};
  for (int t = 0; t < 7; ++t) {
    const QuantType type = kAllQuantTypes[t];
    const std::vector<float> y = round_trip(type, x);
    double sse = 0;
    for (size_t i = 0; i < x.size(); ++i) sse += (y[i] - x[i]) * (y[i] - x[i]);
    const double rms = std::sqrt(sse / x.size());
    EXPECT_LE(rms, limits[t]) << quant_type_name(type);
    RecordProperty(std::string("rms_") + quant_type_name(type), std::to_string(rms));
  }
}

// The activation quantization: exactly the definition in quant_kernels.h, sums included.
TEST(QuantFormatTest, ActivationQuantizationMatchesDefinition) {
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> uniform(-3.0f, 3.0f);
  for (int block : {32, 256}) {
    const int m = 3, k = 512;
    std::vector<float> x(m * k);
    for (float& v : x) v = uniform(rng);
    std::fill(x.begin() + k, x.begin() + k + 256, 0.0f);           // zero blocks
    std::fill(x.begin() + 2 * k, x.begin() + 2 * k + 32, 1e-35f);  // below the threshold
    x[2 * k + 300] = 1e-20f;
    std::vector<std::byte> scratch(detail::activation_scratch_bytes(m, k, block) + 64);
    auto* aligned =
        reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(scratch.data()) + 63) / 64 * 64);
    for (Isa isa : {Isa::kPortable, Isa::kAvx2, Isa::kAvx512}) {
      if (!isa_supported(isa)) continue;
      SCOPED_TRACE(isa_name(isa));
      std::fill(scratch.begin(), scratch.end(), std::byte{0x5a});
      const detail::QuantizedActs acts =
          isa == Isa::kAvx512 ? detail::quantize_activations_avx512(x.data(), m, k, block, aligned)
          : isa == Isa::kAvx2 ? detail::quantize_activations_avx2(x.data(), m, k, block, aligned)
                              : detail::quantize_activations(x.data(), m, k, block, aligned);
      for (int r = 0; r < m; ++r) {
        const testing::RefActs ref = testing::ref_quantize_activations(&x[r * k], k, block);
        for (int b = 0; b < k / block; ++b) {
          ASSERT_EQ(std::bit_cast<uint32_t>(acts.d[r * (k / block) + b]),
                    std::bit_cast<uint32_t>(ref.d[b]));
        }
        for (int i = 0; i < k; ++i) ASSERT_EQ(acts.q[r * k + i], ref.q[i]) << r << " " << i;
        for (int j = 0; j < k / 16; ++j) {
          int sum = 0;
          for (int i = 0; i < 16; ++i) sum += ref.q[16 * j + i];
          ASSERT_EQ(acts.sums[r * (k / 16) + j], sum);
        }
      }
    }
  }
}

}  // namespace
}  // namespace pagedserve::kernels
