// matmul_quantized against (1) the documented per-block float contract, recomputed here from
// ggml's block layout (bit for bit, for every m, row position, thread count and ISA), (2) a
// double product of the dequantized weights with the exactly reproduced quantized activations,
// and (3) the float product of the unquantized inputs with a tolerance from the formats.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/quant.h"
#include "kernels/cpu/quant_kernels.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/kernels/quant_test_util.h"

#include "tests/kernels/kernel_test_util.h"

namespace pagedserve::kernels {
namespace {

using testing::kAllQuantTypes;
using testing::parse_block;
using testing::RefActs;
using testing::RefBlock;

using testing::supported_isas;

// The contract of quant_matmul.cpp for one output, in ggml's signed terms.
float contract_output(QuantType type, const uint8_t* row, int k, const RefActs& a) {
  const int n = quant_block_elements(type);
  float acc = 0.0f;
  for (int b = 0; b < k / n; ++b) {
    const RefBlock w = parse_block(type, row + b * quant_block_bytes(type));
    const int* q = &a.q[b * n];
    const float ad = a.d[b];
    const int groups = type == QuantType::kQ6_K ? 16 : n / 32;
    const int size = n / groups;
    int32_t i = 0, sum_min = 0, sum_a = 0;
    for (int g = 0; g < groups; ++g) {
      int32_t dot = 0, s = 0;
      for (int l = g * size; l < (g + 1) * size; ++l) {
        dot += w.q[l] * q[l];
        s += q[l];
      }
      const bool k_type = testing::is_k_quant(type);
      i += k_type ? w.sc[g] * dot : dot;
      if (k_type && type != QuantType::kQ6_K) sum_min += w.mn[g] * s;
      sum_a += s;
    }
    acc = std::fma(w.d * ad, static_cast<float>(i), acc);
    if (type == QuantType::kQ5_1) acc = std::fma(w.m * ad, static_cast<float>(sum_a), acc);
    if (type == QuantType::kQ4_K || type == QuantType::kQ5_K) {
      acc = std::fma(-(w.m * ad), static_cast<float>(sum_min), acc);
    }
  }
  return acc;
}

// Activation rows with magnitudes from 2^-8 to 2^8 and a few outliers and zero blocks.
std::vector<float> random_activations(std::mt19937& rng, int m, int k) {
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(m) * k);
  for (int r = 0; r < m; ++r) {
    const float scale = std::ldexp(1.0f, r % 17 - 8);
    for (int i = 0; i < k; ++i) x[r * k + i] = scale * uniform(rng);
    if (r % 5 == 1) x[r * k + (r * 7) % k] = 100.0f * scale;
    if (r % 7 == 2) std::fill(x.begin() + r * k, x.begin() + r * k + 32, 0.0f);
  }
  return x;
}

struct Case {
  std::vector<uint8_t> bytes;  // ggml rows
  std::vector<float> floats;   // what was quantized (empty for random blocks)
  QuantizedWeight w;
};

Case quantized_case(std::mt19937& rng, QuantType type, int n, int k) {
  Case c;
  std::normal_distribution<float> normal(0.0f, 0.05f);
  c.floats.resize(static_cast<size_t>(n) * k);
  for (float& v : c.floats) v = normal(rng);
  c.bytes.resize(n * quant_row_bytes(type, k));
  for (int r = 0; r < n; ++r) {
    quantize_row(type, &c.floats[r * k], &c.bytes[r * quant_row_bytes(type, k)], k);
  }
  c.w = QuantizedWeight::quantize(c.floats.data(), type, n, k);
  return c;
}

// (d) Every row, in every batch size, position, thread split and ISA, gives exactly the
// contract's bits; random ggml blocks and quantized floats alike.
TEST(QuantMatmulTest, BitExactContractAcrossBatchThreadsAndIsa) {
  std::mt19937 rng(10);
  const int n = 37, rows = 64;
  std::vector<std::unique_ptr<ThreadPool>> pools;
  for (int t : {1, 2, 3}) pools.push_back(std::make_unique<ThreadPool>(t, 0.0));
  for (QuantType type : kAllQuantTypes) {
    SCOPED_TRACE(quant_type_name(type));
    const int k = 512;
    const std::vector<float> x = random_activations(rng, rows, k);
    for (bool random_bytes : {true, false}) {
      Case c = quantized_case(rng, type, n, k);
      if (random_bytes) {
        c.bytes = testing::random_blocks(rng, type, n * k / quant_block_elements(type));
        c.w = QuantizedWeight::pack(c.bytes.data(), type, n, k);
      }
      std::vector<float> expected(rows * n);
      for (int r = 0; r < rows; ++r) {
        const RefActs a =
            testing::ref_quantize_activations(&x[r * k], k, quant_block_elements(type));
        for (int col = 0; col < n; ++col) {
          expected[r * n + col] =
              contract_output(type, &c.bytes[col * quant_row_bytes(type, k)], k, a);
        }
      }
      for (Isa isa : supported_isas()) {
        for (int m : {1, 3, 17, 64}) {
          for (int start : {0, rows - m, (rows - m) / 2}) {
            for (int p = -1; p < 3; ++p) {
              ThreadPool* pool = p < 0 ? nullptr : pools[p].get();
              std::vector<float> out(m * n);
              matmul_quantized(&x[start * k], c.w, out.data(), m, n, pool, isa);
              ASSERT_EQ(std::memcmp(out.data(), &expected[start * n], out.size() * 4), 0)
                  << "isa " << isa_name(isa) << " m " << m << " start " << start << " pool " << p
                  << " random " << random_bytes;
            }
          }
        }
      }
    }
  }
}

// Every SIMD tile kernel, including the ones matmul_quantized does not pick on this CPU (AVX-512
// without VNNI, AVX2 where AVX-512 is there), gives the portable kernel's bits for every row
// count of its register tiles (AVX-512: 8 rows, AVX2: 4) and a partial last tile.
TEST(QuantMatmulTest, SimdTileKernelsMatchPortable) {
  struct Kernel {
    const char* name;
    bool supported;
    detail::QuantTileFn (*get)(QuantType type, bool vnni);
    bool vnni;
  };
  const bool avx512 = isa_supported(Isa::kAvx512);
  const bool avx2 = isa_supported(Isa::kAvx2);
  const Kernel kernels[] = {
      {"avx512", avx512, detail::quant_tile_avx512, false},
      {"avx512-vnni", avx512 && detail::cpu_has_avx512_vnni(), detail::quant_tile_avx512, true},
      {"avx2", avx2, detail::quant_tile_avx2, false},
      {"avx2-vnni", avx2 && detail::cpu_has_avx_vnni(), detail::quant_tile_avx2, true},
  };
  if (!avx2 && !avx512) GTEST_SKIP() << "no AVX2 or AVX-512";
  std::mt19937 rng(14);
  const int n = 35;
  for (QuantType type : kAllQuantTypes) {
    SCOPED_TRACE(quant_type_name(type));
    const int block = quant_block_elements(type);
    const int k = 3 * block;
    const std::vector<uint8_t> bytes = testing::random_blocks(rng, type, n * k / block);
    const QuantizedWeight w = QuantizedWeight::pack(bytes.data(), type, n, k);
    for (const Kernel& kernel : kernels) {
      if (!kernel.supported) continue;
      const detail::QuantTileFn fn = kernel.get(type, kernel.vnni);
      if (fn == nullptr) continue;
      for (int m : {1, 2, 3, 5, 8, 9, 17, 19}) {
        const std::vector<float> x = random_activations(rng, m, k);
        std::vector<std::byte> scratch(detail::activation_scratch_bytes(m, k, block) + 64);
        auto* aligned = reinterpret_cast<std::byte*>(
            (reinterpret_cast<uintptr_t>(scratch.data()) + 63) / 64 * 64);
        const detail::QuantizedActs acts =
            detail::quantize_activations(x.data(), m, k, block, aligned);
        std::vector<float> want(m * n), got(m * n);
        for (int tile = 0; tile < (n + 15) / 16; ++tile) {
          const detail::TileLayout layout = detail::tile_layout(type, k);
          detail::quant_tile_portable(acts, w, layout, want.data(), n, tile);
          fn(acts, w, layout, got.data(), n, tile);
        }
        ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * 4), 0)
            << kernel.name << " m " << m;
      }
    }
  }
}

// An AVX-512 CPU without VNNI gets a SIMD kernel for every type (Q8_0: the AVX2 one), not the
// portable loop; the kernel test above holds each of them to the portable kernel's bits.
TEST(QuantMatmulTest, Avx512WithoutVnniHasASimdKernelForEveryType) {
  if (!isa_supported(Isa::kAvx512)) GTEST_SKIP() << "no AVX-512";
  for (QuantType type : kAllQuantTypes) {
    for (bool avx_vnni : {false, detail::cpu_has_avx_vnni()}) {
      EXPECT_NE(detail::quant_tile_fn(type, Isa::kAvx512, false, avx_vnni),
                &detail::quant_tile_portable)
          << quant_type_name(type) << " avx-vnni " << avx_vnni;
    }
  }
}

// (c) Against double products: of the dequantized weights with the exactly reproduced
// activations (only float accumulation separates them), and of the original floats (the
// formats' rounding: the activations' half step plus the weights' measured error).
TEST(QuantMatmulTest, MatchesDoubleProducts) {
  std::mt19937 rng(11);
  const int m = 9, n = 50;
  for (QuantType type : kAllQuantTypes) {
    SCOPED_TRACE(quant_type_name(type));
    const int block = quant_block_elements(type);
    const int k = testing::is_k_quant(type) ? 1024 : 352;
    const std::vector<float> x = random_activations(rng, m, k);
    const Case c = quantized_case(rng, type, n, k);
    std::vector<float> out(m * n);
    matmul_quantized(x.data(), c.w, out.data(), m, n);
    const std::vector<float> w = testing::ref_dequantize_row(type, c.bytes);
    std::vector<double> min_terms(static_cast<size_t>(n) * k);  // |the min's part| of each w
    for (int col = 0; col < n; ++col) {
      for (int b = 0; b < k / block; ++b) {
        const RefBlock wb = parse_block(
            type, &c.bytes[col * quant_row_bytes(type, k) + b * quant_block_bytes(type)]);
        for (int i = 0; i < block; ++i) {
          double term = type == QuantType::kQ5_1 ? std::fabs(wb.m) : 0.0;
          if (type == QuantType::kQ4_K || type == QuantType::kQ5_K) {
            term = static_cast<double>(wb.m) * wb.mn[i / 32];
          }
          min_terms[col * k + b * block + i] = term;
        }
      }
    }
    for (int r = 0; r < m; ++r) {
      const RefActs a = testing::ref_quantize_activations(&x[r * k], k, block);
      for (int col = 0; col < n; ++col) {
        const float* wrow = &w[col * k];
        const float* frow = &c.floats[col * k];
        double quantized = 0, magnitude = 0, exact = 0, bound = 0;
        for (int i = 0; i < k; ++i) {
          const double min_term = min_terms[col * k + i];
          const double ad = a.d[i / block];
          const double aq = ad * a.q[i];
          quantized += wrow[i] * aq;
          magnitude += std::fabs(aq) * (std::fabs(wrow[i]) + min_term);
          exact += static_cast<double>(x[r * k + i]) * frow[i];
          bound += ad / 2 * (1 + 0x1p-12) * std::fabs(wrow[i]) +
                   std::fabs(x[r * k + i]) * std::fabs(static_cast<double>(wrow[i]) - frow[i]);
        }
        const double float_tol = (k / block + 4) * 0x1p-23 * magnitude + 1e-30;
        const double got = out[r * n + col];
        ASSERT_NEAR(got, quantized, float_tol) << "row " << r << " col " << col;
        ASSERT_NEAR(got, exact, bound + float_tol) << "row " << r << " col " << col;
      }
    }
  }
}

// (e) ldo > n writes only the first n columns of each of the m rows; m = 0 writes nothing;
// n of 1, 15, 16, 17 and 33 (partial tiles); one block per row; an empty weight.
TEST(QuantMatmulTest, OddShapesAndStridedOutput) {
  std::mt19937 rng(12);
  const float sentinel = -12345.0f;
  for (QuantType type : kAllQuantTypes) {
    SCOPED_TRACE(quant_type_name(type));
    const int block = quant_block_elements(type);
    for (int n : {1, 15, 16, 17, 33}) {
      for (int k : {block, 3 * block}) {
        const int m = 5, ldo = n + 7;
        const Case c = quantized_case(rng, type, n, k);
        const std::vector<float> x = random_activations(rng, m, k);
        std::vector<float> out((m + 1) * ldo, sentinel);
        matmul_quantized(x.data(), c.w, out.data(), m, ldo);
        for (int r = 0; r <= m; ++r) {
          const RefActs a =
              r < m ? testing::ref_quantize_activations(&x[r * k], k, block) : RefActs{};
          for (int col = 0; col < ldo; ++col) {
            const float got = out[r * ldo + col];
            if (r == m || col >= n) {
              ASSERT_EQ(got, sentinel) << "row " << r << " col " << col;
              continue;
            }
            const float want =
                contract_output(type, &c.bytes[col * quant_row_bytes(type, k)], k, a);
            ASSERT_EQ(std::memcmp(&got, &want, 4), 0) << "n " << n << " k " << k;
          }
        }
        std::vector<float> untouched(4, sentinel);
        matmul_quantized(nullptr, c.w, untouched.data(), 0, ldo);
        matmul_quantized(x.data(), c.w, nullptr, 0, ldo);
        EXPECT_EQ(untouched, std::vector<float>(4, sentinel));
      }
    }
    const QuantizedWeight empty = QuantizedWeight::pack(nullptr, type, 0, block);
    EXPECT_EQ(empty.rows(), 0);
    std::vector<float> x(block, 1.0f);
    matmul_quantized(x.data(), empty, nullptr, 1, 0);
  }
}

// matmul_quantized_stacked: the bits of one matmul_quantized call per weight into its columns,
// for stacks that mix block sizes (x quantized twice) and types, any m, thread count and ISA;
// columns past the stack are not written.
TEST(QuantMatmulTest, StackedEqualsOneCallPerWeight) {
  std::mt19937 rng(21);
  const int k = 512;
  const std::vector<std::vector<std::pair<QuantType, int>>> stacks = {
      {{QuantType::kQ8_0, 40}, {QuantType::kQ8_0, 17}, {QuantType::kQ8_0, 16}},
      {{QuantType::kQ4_K, 33}, {QuantType::kQ6_K, 16}},
      {{QuantType::kQ6_K, 5},
       {QuantType::kQ8_0, 48},
       {QuantType::kQ4_K, 20},
       {QuantType::kQ5_0, 9}},
  };
  const float sentinel = -12345.0f;
  for (const auto& stack : stacks) {
    std::vector<QuantizedWeight> ws;
    int rows = 0;
    for (const auto& [type, n] : stack) {
      ws.push_back(std::move(quantized_case(rng, type, n, k).w));
      rows += n;
    }
    const int ldo = rows + 3;
    for (Isa isa : supported_isas()) {
      for (int threads : {1, 3}) {
        ThreadPool pool(threads, 0.0);
        for (int m : {1, 3, 9}) {
          SCOPED_TRACE(::testing::Message()
                       << isa_name(isa) << " threads " << threads << " m " << m);
          const std::vector<float> x = random_activations(rng, m, k);
          std::vector<float> want(m * ldo, sentinel), got(m * ldo, sentinel);
          int first = 0;
          for (const QuantizedWeight& w : ws) {
            matmul_quantized(x.data(), w, want.data() + first, m, ldo, &pool, isa);
            first += w.rows();
          }
          matmul_quantized_stacked(x.data(), ws, got.data(), m, ldo, &pool, isa);
          ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0);
        }
      }
    }
  }
}

// A quantized LM head's chunk maxima (greedy rows): each out row's 16-column chunks, the
// largest of what the call wrote there, by a scan of the output here; any type, width, m,
// thread count and ISA.
TEST(QuantMatmulTest, OneWeightsCallTakesEachChunksMaximum) {
  std::mt19937 rng(31);
  for (QuantType type : {QuantType::kQ8_0, QuantType::kQ4_K, QuantType::kQ6_K}) {
    const int k = quant_block_elements(type) * 2;
    for (int n : {1, 15, 16, 17, 100}) {
      const Case c = quantized_case(rng, type, n, k);
      const int tiles = (n + kQuantChunkColumns - 1) / kQuantChunkColumns;
      for (Isa isa : supported_isas()) {
        for (int threads : {1, 3}) {
          ThreadPool pool(threads, 0.0);
          const int m = 3, ldo = n + 3;
          const std::vector<float> x = random_activations(rng, m, k);
          std::vector<float> out(m * ldo, 0.0f), maxima(m * tiles, 123.0f);
          matmul_quantized_stacked(x.data(), std::span(&c.w, 1), out.data(), m, ldo, &pool, isa,
                                   maxima.data());
          for (int r = 0; r < m; ++r) {
            for (int t = 0; t < tiles; ++t) {
              float want = -std::numeric_limits<float>::infinity();
              for (int col = t * kQuantChunkColumns;
                   col < std::min(n, (t + 1) * kQuantChunkColumns); ++col) {
                want = std::max(want, out[r * ldo + col]);
              }
              EXPECT_EQ(maxima[r * tiles + t], want)
                  << quant_type_name(type) << " n " << n << " " << isa_name(isa) << " row " << r
                  << " chunk " << t;
            }
          }
        }
      }
    }
  }
}

// quantize() is quantize_row + pack(); the packed weight reports its shape and ggml size.
TEST(QuantMatmulTest, QuantizeEqualsQuantizeRowThenPack) {
  std::mt19937 rng(13);
  for (QuantType type : kAllQuantTypes) {
    const int n = 20, k = 2 * quant_block_elements(type);
    const Case c = quantized_case(rng, type, n, k);
    QuantizedWeight packed = QuantizedWeight::pack(c.bytes.data(), type, n, k);
    EXPECT_EQ(c.w.rows(), n);
    EXPECT_EQ(c.w.cols(), k);
    EXPECT_EQ(c.w.type(), type);
    EXPECT_EQ(c.w.weight_bytes(), c.bytes.size());
    ASSERT_EQ(packed.storage_bytes(), c.w.storage_bytes());
    EXPECT_EQ(std::memcmp(packed.data(), c.w.data(), packed.storage_bytes()), 0)
        << quant_type_name(type);
    QuantizedWeight moved = std::move(packed);
    EXPECT_EQ(moved.rows(), n);
  }
}

// A weight big enough that pack and quantize split it across threads (over 8 MB a thread),
// with a partial last tile: every row reads back as the scalar dequantize_row of its ggml
// bytes, from both, and the two packings are the same bytes (padding columns zero in both).
TEST(QuantMatmulTest, LargeWeightsPackTheSameOnSeveralThreads) {
  const QuantType type = QuantType::kQ8_0;
  const int n = 8192 + 5, k = 2048;
  std::mt19937 rng(17);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> w(static_cast<size_t>(n) * k);
  for (float& v : w) v = dist(rng);
  const size_t row_bytes = quant_row_bytes(type, k);
  std::vector<std::byte> bytes(row_bytes * n);
  for (int row = 0; row < n; ++row) {
    quantize_row(type, w.data() + static_cast<size_t>(row) * k, bytes.data() + row * row_bytes, k);
  }
  const QuantizedWeight packed = QuantizedWeight::pack(bytes.data(), type, n, k);
  const QuantizedWeight quantized = QuantizedWeight::quantize(w.data(), type, n, k);
  ASSERT_EQ(packed.storage_bytes(), quantized.storage_bytes());
  EXPECT_EQ(std::memcmp(packed.data(), quantized.data(), packed.storage_bytes()), 0);
  std::vector<float> want(k), got(k);
  for (int row = 0; row < n; ++row) {
    dequantize_row(type, bytes.data() + row * row_bytes, want.data(), k);
    packed.dequantize_row_to(row, got.data());
    ASSERT_EQ(std::memcmp(want.data(), got.data(), k * sizeof(float)), 0) << "row " << row;
  }
  // The last tile's 11 padding columns are zero.
  const size_t tile_bytes = packed.storage_bytes() / ((n + 15) / 16);
  const std::byte* last = packed.data() + packed.storage_bytes() - tile_bytes;
  for (int b = 0; b < k / 32; ++b) {
    const std::byte* scales = last + detail::tile_scale_offset(type, b);
    for (int col = 5; col < 16; ++col) {
      EXPECT_EQ(std::to_integer<int>(scales[2 * col]) | std::to_integer<int>(scales[2 * col + 1]),
                0)
          << "block " << b << " column " << col;
    }
  }
}

// quantize_rows with a row source that throws on a row the second thread packs: the call
// throws that error (not std::terminate from the thread), and a source that does not throw
// gives quantize's bytes.
TEST(QuantMatmulTest, QuantizeRowsPassesOnARowSourcesError) {
  const QuantType type = QuantType::kQ8_0;
  const int n = 8192 + 5, k = 2048;
  const auto row_value = [](int row, int i) { return std::sin(0.001f * row + 0.37f * i); };
  const auto throwing = [&](int row, float* out) {
    if (row == n - 3) throw std::runtime_error("row source failed");
    for (int i = 0; i < k; ++i) out[i] = row_value(row, i);
  };
  EXPECT_THROW(QuantizedWeight::quantize_rows(throwing, type, n, k), std::runtime_error);
  std::vector<float> w(static_cast<size_t>(n) * k);
  for (int row = 0; row < n; ++row) {
    for (int i = 0; i < k; ++i) w[static_cast<size_t>(row) * k + i] = row_value(row, i);
  }
  const QuantizedWeight from_rows = QuantizedWeight::quantize_rows(
      [&](int row, float* out) {
        for (int i = 0; i < k; ++i) out[i] = row_value(row, i);
      },
      type, n, k);
  const QuantizedWeight whole = QuantizedWeight::quantize(w.data(), type, n, k);
  ASSERT_EQ(from_rows.storage_bytes(), whole.storage_bytes());
  EXPECT_EQ(std::memcmp(from_rows.data(), whole.data(), whole.storage_bytes()), 0);
}

}  // namespace
}  // namespace pagedserve::kernels
