// Chunk maxima: the LM head's matmul takes, for greedy rows, the largest non-NaN value of each
// 64-column tile of each output row; a greedy draw then reads one tile of the row. Checked
// against a scalar scan of the output written here, on every ISA, dtype, odd widths and a
// forced thread split; and argmax_from_chunk_maxima against the first maximum by a scan and
// row_argmax, on rows with ties, signed zeros, infinities and NaNs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/packed_matmul.h"
#include "kernels/cpu/sampling_rows.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/kernels/kernel_test_util.h"

namespace pagedserve::kernels {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

using testing::supported_isas;

// The largest non-NaN element of each chunk of x, by a plain scan (-inf when none).
std::vector<float> scan_maxima(const std::vector<float>& x, int64_t width) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> out;
  for (int64_t first = 0; first < n; first += width) {
    float top = -kInf;
    for (int64_t i = first; i < std::min(n, first + width); ++i) {
      if (!std::isnan(x[static_cast<size_t>(i)])) top = std::max(top, x[static_cast<size_t>(i)]);
    }
    out.push_back(top);
  }
  return out;
}

TEST(ChunkMaxima, TheMatmulTakesEachTilesMaximumOfWhatItWrote) {
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  ThreadPool pool(2, /*min_parallel_flops=*/0.0);
  for (Isa isa : supported_isas()) {
    for (WeightDtype dtype : {WeightDtype::kF32, WeightDtype::kBF16}) {
      for (int n : {1, 63, 64, 65, 1000, 3001}) {
        const int k = 40;
        const int m = 5;
        std::vector<float> w_f32(static_cast<size_t>(n) * k);
        for (float& v : w_f32) v = uniform(rng);
        std::vector<uint16_t> w_bf16(w_f32.size());
        for (size_t i = 0; i < w_f32.size(); ++i) {  // eighths: exact in BF16, its top half
          w_f32[i] = std::round(w_f32[i] * 8.0f) / 8.0f;
          uint32_t bits;
          std::memcpy(&bits, &w_f32[i], 4);
          w_bf16[i] = static_cast<uint16_t>(bits >> 16);
        }
        const PackedWeight w = dtype == WeightDtype::kF32
                                   ? PackedWeight::pack(w_f32.data(), dtype, n, k)
                                   : PackedWeight::pack(w_bf16.data(), dtype, n, k);
        std::vector<float> x(static_cast<size_t>(m) * k);
        for (float& v : x) v = uniform(rng);
        x[2 * k + 7] = kNaN;  // row 2's outputs are all NaN
        std::vector<float> out(static_cast<size_t>(m) * n);
        std::vector<float> maxima(static_cast<size_t>(m) * w.num_tiles(), 123.0f);
        matmul_packed(x.data(), w, out.data(), m, &pool, isa, maxima.data());
        for (int r = 0; r < m; ++r) {
          const std::vector<float> row(out.begin() + static_cast<int64_t>(r) * n,
                                       out.begin() + static_cast<int64_t>(r + 1) * n);
          const std::vector<float> want = scan_maxima(row, PackedWeight::kTileRows);
          ASSERT_EQ(want.size(), static_cast<size_t>(w.num_tiles()));
          for (int t = 0; t < w.num_tiles(); ++t) {
            EXPECT_EQ(maxima[static_cast<size_t>(r) * w.num_tiles() + t], want[t])
                << isa_name(isa) << " n=" << n << " row " << r << " tile " << t;
          }
        }
        EXPECT_EQ(maxima[2 * static_cast<size_t>(w.num_tiles())], -kInf);  // all NaN
      }
    }
  }
}

// Rows with ties, signed zeros, infinities and NaNs, and the degenerate ones.
std::vector<std::vector<float>> awkward_rows(std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<std::vector<float>> rows;
  for (int64_t n : {1, 16, 100, 256, 1000, 4097, 32000}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = std::round(normal(rng) * 4.0f) / 4.0f;  // many ties, many zeros
    rows.push_back(x);
    if (n < 100) continue;
    std::vector<float> y = x;
    y[static_cast<size_t>(n / 3)] = kNaN;
    y[static_cast<size_t>(n / 2)] = -kInf;
    rows.push_back(y);
    std::vector<float> top = x;  // the maximum twice, in different chunks, and a -0 tie
    top[static_cast<size_t>(n - 1)] = 50.0f;
    top[static_cast<size_t>(n / 2)] = 50.0f;
    rows.push_back(top);
    std::vector<float> zeros(static_cast<size_t>(n), -1.0f);
    zeros[static_cast<size_t>(n / 2)] = 0.0f;
    zeros[static_cast<size_t>(n / 4)] = -0.0f;
    rows.push_back(zeros);
    std::vector<float> inf = x;
    inf[static_cast<size_t>(n - 2)] = kInf;
    rows.push_back(inf);
  }
  rows.push_back(std::vector<float>(300, -kInf));
  rows.push_back(std::vector<float>(300, kNaN));
  std::vector<float> mixed(300, -kInf);
  mixed[10] = kNaN;
  rows.push_back(mixed);
  return rows;
}

TEST(ChunkMaxima, GiveTheFirstMaximumOfTheRow) {
  std::mt19937 rng(5);
  for (const std::vector<float>& x : awkward_rows(rng)) {
    const int64_t n = static_cast<int64_t>(x.size());
    for (int64_t width : {16, 64, 256}) {
      const std::vector<float> maxima = scan_maxima(x, width);
      const RowChunkMaxima row{maxima.data(), width};
      const std::string where = "n=" + std::to_string(n) + " width " + std::to_string(width);
      for (size_t c = 0; c < maxima.size(); ++c) {
        const int64_t first = static_cast<int64_t>(c) * width;
        for (Isa isa : supported_isas()) {
          EXPECT_EQ(chunk_max(x.data() + first, std::min(width, n - first), isa), maxima[c])
              << where << " chunk " << c << " " << isa_name(isa);
        }
      }
      // The first largest element above -inf, by a scan; -1 when there is none.
      int64_t first_max = -1;
      for (int64_t i = 0; i < n; ++i) {
        const float v = x[static_cast<size_t>(i)];
        if (v > -kInf && (first_max < 0 || v > x[static_cast<size_t>(first_max)])) first_max = i;
      }
      EXPECT_EQ(argmax_from_chunk_maxima(x.data(), n, row), first_max) << where;
      if (first_max >= 0) {
        EXPECT_EQ(row_argmax(x.data(), n), first_max) << where;
      }
    }
  }
}

}  // namespace
}  // namespace pagedserve::kernels
