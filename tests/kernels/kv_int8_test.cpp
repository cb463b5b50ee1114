// The int8 KV cache: the per-row quantization against its formula written out here, write_kv
// into an int8 view, and paged_attention over an int8 cache against the double reference
// attention over the dequantized K/V (the values the cache stands for), with the kernel's
// bitwise guarantees (threads, batch invariance, prefill rows equal to decode steps).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <tuple>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/paged_attention_test_util.h"

namespace pagedserve::kernels {
namespace {

using testing::AttentionCase;
using testing::describe;
using testing::PagedBatch;
using testing::random_floats;

// Round half to even of a double, written independently of the kernel's rounding.
double round_half_even(double v) {
  const double floor_v = std::floor(v);
  const double rest = v - floor_v;
  if (rest > 0.5) return floor_v + 1;
  if (rest < 0.5) return floor_v;
  return std::fmod(floor_v, 2.0) == 0.0 ? floor_v : floor_v + 1;
}

TEST(KvInt8, RowQuantizationFollowsTheFormulaAndBoundsTheError) {
  std::mt19937 rng(3);
  for (int n : {1, 7, 64, 80, 128, 256}) {
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<float> x = random_floats(rng, n);
      const float spread = std::ldexp(1.0f, trial % 9 - 4);  // rows of very different size
      for (float& v : x) v *= spread;
      std::vector<int8_t> q(n, 99);
      const float scale = quantize_kv_row_int8(x.data(), n, q.data());
      float amax = 0.0f;
      for (float v : x) amax = std::max(amax, std::abs(v));
      ASSERT_EQ(scale, amax / 127.0f);
      for (int i = 0; i < n; ++i) {
        // The formula in float32, as documented: nearbyint(x * (127 / amax)).
        const double want = round_half_even(static_cast<double>(x[i] * (127.0f / amax)));
        ASSERT_EQ(q[i], want) << "n " << n << " i " << i;
        ASSERT_LE(std::abs(q[i]), 127);
        ASSERT_LE(std::abs(q[i] * scale - x[i]), 0.5f * scale * (1 + 1e-5f) + 1e-30f);
      }
    }
  }
}

TEST(KvInt8, DegenerateRowsStoreZeros) {
  std::vector<int8_t> q(8, 5);
  const std::vector<float> zeros(8, 0.0f);
  EXPECT_EQ(0.0f, quantize_kv_row_int8(zeros.data(), 8, q.data()));
  EXPECT_EQ(std::vector<int8_t>(8, 0), q);
  // Below kKvInt8MinAmax, 127 / amax would overflow: zeros, scale 0.
  const std::vector<float> tiny(8, 1e-38f);
  EXPECT_EQ(0.0f, quantize_kv_row_int8(tiny.data(), 8, q.data()));
  EXPECT_EQ(std::vector<int8_t>(8, 0), q);
  // An infinity: no scale represents the row; zeros rather than an undefined conversion.
  std::vector<float> inf_row(8, 1.0f);
  inf_row[3] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(0.0f, quantize_kv_row_int8(inf_row.data(), 8, q.data()));
  EXPECT_EQ(std::vector<int8_t>(8, 0), q);
  // A NaN element stores 0; the others are quantized against the finite maximum.
  std::vector<float> nan_row = {1.0f, -0.5f, std::nanf(""), 0.25f};
  const float scale = quantize_kv_row_int8(nan_row.data(), 4, q.data());
  EXPECT_EQ(scale, 1.0f / 127.0f);
  EXPECT_EQ(127, q[0]);
  EXPECT_EQ(-64, q[1]);  // -63.5 rounds to even
  EXPECT_EQ(0, q[2]);
  EXPECT_EQ(32, q[3]);  // 31.75
}

TEST(KvInt8, WriteKvStoresEachRowWithItsScaleAndNothingElse) {
  std::mt19937 rng(11);
  for (int block_size : {1, 16}) {
    for (int d : {64, 80}) {
      const int num_blocks = 12, kv_heads = 3, num_tokens = 9;  // slots to spare
      const size_t rows = static_cast<size_t>(num_blocks) * kv_heads * block_size;
      std::vector<int8_t> keys(rows * d, 0x55), values(rows * d, 0x55);
      std::vector<float> key_scales(rows, -1.0f), value_scales(rows, -1.0f);
      KvCacheView view{keys.data(), values.data(),  num_blocks,        block_size,         kv_heads,
                       d,           KvDtype::kInt8, key_scales.data(), value_scales.data()};
      std::vector<int64_t> slots(static_cast<size_t>(num_blocks) * block_size);
      std::iota(slots.begin(), slots.end(), 0);
      std::shuffle(slots.begin(), slots.end(), rng);
      slots.resize(num_tokens);
      slots[4] = -1;  // padding
      const std::vector<float> k =
          random_floats(rng, static_cast<size_t>(num_tokens) * kv_heads * d);
      const std::vector<float> v =
          random_floats(rng, static_cast<size_t>(num_tokens) * kv_heads * d);
      for (Isa isa : {Isa::kPortable, best_isa()}) {
        write_kv(k.data(), v.data(), slots.data(), num_tokens, view, isa);
        std::vector<bool> written(rows, false);
        for (int t = 0; t < num_tokens; ++t) {
          if (slots[t] < 0) continue;
          const int64_t block = slots[t] / block_size, offset = slots[t] % block_size;
          for (int h = 0; h < kv_heads; ++h) {
            const size_t row = (static_cast<size_t>(block) * kv_heads + h) * block_size + offset;
            written[row] = true;
            for (const auto& [src, cache, scales] :
                 {std::tuple{&k, &keys, &key_scales}, std::tuple{&v, &values, &value_scales}}) {
              const float* x = src->data() + (static_cast<size_t>(t) * kv_heads + h) * d;
              float amax = 0.0f;
              for (int i = 0; i < d; ++i) amax = std::max(amax, std::abs(x[i]));
              ASSERT_EQ((*scales)[row], amax / 127.0f);
              for (int i = 0; i < d; ++i) {
                ASSERT_LE(std::abs((*cache)[row * d + i] * (*scales)[row] - x[i]),
                          0.5f * (*scales)[row] * (1 + 1e-5f));
              }
            }
          }
        }
        for (size_t row = 0; row < rows; ++row) {
          if (written[row]) continue;
          ASSERT_EQ(key_scales[row], -1.0f) << "row " << row;
          ASSERT_EQ(value_scales[row], -1.0f) << "row " << row;
          for (int i = 0; i < d; ++i) ASSERT_EQ(keys[row * d + i], 0x55);
        }
      }
    }
  }
}

// The vector quantization (AVX-512) gives the scalar function's bits, special rows included:
// all zero, below the minimum amax, an infinity, a NaN among finite values, ties.
TEST(KvInt8, WriteKvGivesTheSameBitsOnEveryIsa) {
  std::mt19937 rng(21);
  for (int d : {8, 64, 80, 128}) {
    const int num_tokens = 10, kv_heads = 2, block_size = 16;
    std::vector<float> k = random_floats(rng, static_cast<size_t>(num_tokens) * kv_heads * d);
    std::vector<float> v = random_floats(rng, k.size());
    const auto row = [&](std::vector<float>& x, int t, int h) {
      return x.data() + (static_cast<size_t>(t) * kv_heads + h) * d;
    };
    std::fill_n(row(k, 0, 0), d, 0.0f);
    std::fill_n(row(k, 1, 1), d, 1e-38f);
    row(k, 2, 0)[d - 1] = std::numeric_limits<float>::infinity();
    row(v, 3, 1)[d / 2] = std::nanf("");
    for (int i = 0; i < d; ++i) row(v, 4, 0)[i] = (i % 5 - 2) * 0.5f;  // x * 127 / amax ties
    std::vector<int64_t> slots(num_tokens);
    std::iota(slots.begin(), slots.end(), 3);
    std::vector<int8_t> reference_k, reference_v;
    std::vector<float> reference_scales;
    for (Isa isa : {Isa::kPortable, Isa::kAvx2, Isa::kAvx512}) {
      if (!isa_supported(isa)) continue;
      SCOPED_TRACE(::testing::Message() << isa_name(isa) << " d=" << d);
      const size_t rows = static_cast<size_t>(2) * kv_heads * block_size;
      std::vector<int8_t> keys(rows * d, 0x55), values(rows * d, 0x55);
      std::vector<float> scales(2 * rows, -1.0f);
      KvCacheView view{keys.data(),    values.data(), 2,
                       block_size,     kv_heads,      d,
                       KvDtype::kInt8, scales.data(), scales.data() + rows};
      write_kv(k.data(), v.data(), slots.data(), num_tokens, view, isa);
      if (isa == Isa::kPortable) {
        reference_k = keys;
        reference_v = values;
        reference_scales = scales;
        continue;
      }
      EXPECT_EQ(keys, reference_k);
      EXPECT_EQ(values, reference_v);
      EXPECT_EQ(0,
                std::memcmp(scales.data(), reference_scales.data(), scales.size() * sizeof(float)));
    }
  }
}

// An int8 cache of the batch: every cached row (junk too) quantized, and the contiguous K/V the
// reference reads replaced by the dequantized rows. A row the kernel must never read (the NaN
// rows before a sliding window) gets a NaN scale, so reading it would show.
struct Int8Cache {
  std::vector<int8_t> keys, values;
  std::vector<float> key_scales, value_scales;
};

Int8Cache quantize_batch(const AttentionCase& c, PagedBatch& batch) {
  const int d = c.head_dim;
  Int8Cache cache;
  const auto quantize = [d](const std::vector<float>& rows, std::vector<int8_t>& q,
                            std::vector<float>& scales) {
    const size_t n = rows.size() / d;
    q.resize(rows.size());
    scales.resize(n);
    for (size_t r = 0; r < n; ++r) {
      scales[r] = quantize_kv_row_int8(rows.data() + r * d, d, q.data() + r * d);
      if (std::isnan(rows[r * d])) scales[r] = std::nanf("");
    }
  };
  quantize(batch.key_cache, cache.keys, cache.key_scales);
  quantize(batch.value_cache, cache.values, cache.value_scales);
  for (auto* per_seq : {&batch.keys, &batch.values}) {
    for (std::vector<float>& rows : *per_seq) {
      std::vector<int8_t> q(d);
      for (size_t r = 0; r < rows.size() / d; ++r) {
        float* row = rows.data() + r * d;
        if (std::isnan(row[0])) continue;
        const float scale = quantize_kv_row_int8(row, d, q.data());
        for (int i = 0; i < d; ++i) row[i] = q[i] * scale;
      }
    }
  }
  return cache;
}

void run_int8_case(const AttentionCase& c, std::mt19937& rng) {
  SCOPED_TRACE(describe(c));
  PagedBatch batch = testing::make_batch(c, rng);
  const Int8Cache cache = quantize_batch(c, batch);
  const float scale = c.scale_factor / std::sqrt(static_cast<float>(c.head_dim));
  PagedAttentionParams params = testing::make_params(c, batch, scale);
  params.key_cache = cache.keys.data();
  params.value_cache = cache.values.data();
  params.key_scales = cache.key_scales.data();
  params.value_scales = cache.value_scales.data();
  params.kv_dtype = KvDtype::kInt8;
  const std::vector<double> expected = testing::reference_attention(c, batch, scale);
  static ThreadPool pool(3, /*min_parallel_flops=*/0.0);
  std::vector<float> out(batch.query.size(), std::nanf(""));
  for (Isa isa : {Isa::kPortable, Isa::kAvx2, Isa::kAvx512}) {
    if (!isa_supported(isa)) continue;
    SCOPED_TRACE(isa_name(isa));
    params.out = out.data();
    paged_attention(params, nullptr, isa);
    EXPECT_TRUE(testing::all_close(out.data(), expected, 1e-5, 1e-5));

    std::vector<float> pooled(batch.query.size(), std::nanf(""));
    params.out = pooled.data();
    paged_attention(params, &pool, isa);
    EXPECT_EQ(0, std::memcmp(pooled.data(), out.data(), out.size() * sizeof(float)))
        << "threaded result differs from the single-threaded one";

    testing::expect_each_sequence_alone_equal(params, batch, out.data(), isa);
  }
}

TEST(KvInt8, PagedAttentionMatchesReferenceOnDequantizedKv) {
  std::mt19937 rng(5);
  const std::vector<AttentionCase> cases = {
      {16, 2, 1, 64, 1.0f, {{1, 1}, {17, 1}, {40, 1}}},  // decodes
      {16, 2, 4, 64, 2.0f, {{33, 33}, {20, 5}}},         // prefill, chunk, GQA
      {1, 1, 2, 128, 1.0f, {{9, 3}}},                    // block size 1
      {32, 3, 3, 80, 1.5f, {{70, 1}, {45, 12}}},         // head_dim not a power of 2
      {16, 2, 20, 64, 2.0f, {{37, 9}}},                  // wide group
      {16, 2, 2, 64, 1.0f, {{60, 4}, {23, 1}}, 24},      // sliding window
      {16, 2, 2, 64, 4.0f, {{30, 6}}, 0, 20.0f},         // soft cap
      {8, 1, 1, 256, 1.0f, {{19, 2}}},                   // head_dim > 128
  };
  for (const AttentionCase& c : cases) {
    run_int8_case(c, rng);
    if (HasFailure()) return;
  }
}

// Recompute and chunked prefill rely on this for every dtype: a token's output inside a prefill
// tile equals the same token computed as a decode step, bit for bit.
TEST(KvInt8, PrefillTileRowsEqualDecodeSteps) {
  std::mt19937 rng(8);
  static ThreadPool pool(2, /*min_parallel_flops=*/0.0);
  const AttentionCase c{16, 3, 4, 64, 2.0f, {{53, 37}}};
  PagedBatch batch = testing::make_batch(c, rng);
  const Int8Cache cache = quantize_batch(c, batch);
  PagedAttentionParams params = testing::make_params(c, batch, 0.25f);
  params.key_cache = cache.keys.data();
  params.value_cache = cache.values.data();
  params.key_scales = cache.key_scales.data();
  params.value_scales = cache.value_scales.data();
  params.kv_dtype = KvDtype::kInt8;
  testing::expect_prefill_rows_equal_decode_steps(params, c.seqs[0].seq_len, c.seqs[0].q_len, pool);
}

}  // namespace
}  // namespace pagedserve::kernels
