// Tests write_kv: every written slot reads back through the [block, head, offset, dim] layout,
// and everything else (negative "padding" slots, unused slots) keeps its old contents.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "tests/kernels/kernel_test_util.h"

namespace pagedserve::kernels {
namespace {

using testing::random_floats;
using testing::random_int;

void check_write_kv(int num_blocks, int block_size, int kv_heads, int d, int num_tokens,
                    std::mt19937& rng) {
  SCOPED_TRACE(::testing::Message() << "blocks=" << num_blocks << " block_size=" << block_size
                                    << " kv_heads=" << kv_heads << " d=" << d);
  const size_t cache_size = static_cast<size_t>(num_blocks) * kv_heads * block_size * d;
  auto key_cache = random_floats(rng, cache_size);
  auto value_cache = random_floats(rng, cache_size);
  const auto key_before = key_cache;
  const auto value_before = value_cache;

  // Distinct random slots, with some tokens marked as padding.
  std::vector<int64_t> all_slots(static_cast<size_t>(num_blocks) * block_size);
  std::iota(all_slots.begin(), all_slots.end(), 0);
  std::shuffle(all_slots.begin(), all_slots.end(), rng);
  std::vector<int64_t> slots(all_slots.begin(), all_slots.begin() + num_tokens);
  for (auto& s : slots) {
    if (random_int(rng, 0, 3) == 0) s = -1;
  }
  const auto key = random_floats(rng, static_cast<size_t>(num_tokens) * kv_heads * d);
  const auto value = random_floats(rng, static_cast<size_t>(num_tokens) * kv_heads * d);

  KvCacheView view{key_cache.data(), value_cache.data(), num_blocks, block_size, kv_heads, d};
  write_kv(key.data(), value.data(), slots.data(), num_tokens, view);

  // Expected cache: the old contents with each non-negative slot overwritten, built with the
  // layout spelled out index by index.
  auto key_expected = key_before;
  auto value_expected = value_before;
  for (int t = 0; t < num_tokens; ++t) {
    if (slots[t] < 0) continue;
    const int64_t block = slots[t] / block_size, offset = slots[t] % block_size;
    for (int h = 0; h < kv_heads; ++h) {
      for (int i = 0; i < d; ++i) {
        const size_t dst = ((block * kv_heads + h) * block_size + offset) * d + i;
        const size_t src = (static_cast<size_t>(t) * kv_heads + h) * d + i;
        key_expected[dst] = key[src];
        value_expected[dst] = value[src];
      }
    }
  }
  // Exact equality: write_kv only copies.
  EXPECT_EQ(key_cache, key_expected);
  EXPECT_EQ(value_cache, value_expected);
}

TEST(WriteKv, ScattersToSlotsAndSkipsPadding) {
  std::mt19937 rng(21);
  check_write_kv(4, 1, 1, 8, 4, rng);
  check_write_kv(5, 16, 2, 64, 37, rng);
  check_write_kv(3, 128, 4, 8, 200, rng);
  check_write_kv(9, 7, 3, 5, 40, rng);
  check_write_kv(2, 32, 8, 128, 64, rng);
}

// A 16-bit cache stores each value rounded to nearest even (the conversions are tested against
// the F16C instructions and in double in kv_dtype_test), at the same slots, nothing else moved.
TEST(WriteKv, RoundsIntoSixteenBitCaches) {
  std::mt19937 rng(22);
  const int num_blocks = 5, block_size = 16, kv_heads = 2, d = 64, num_tokens = 30;
  for (KvDtype dtype : {KvDtype::kFloat16, KvDtype::kBFloat16}) {
    SCOPED_TRACE(kv_dtype_name(dtype));
    const size_t cache_size = static_cast<size_t>(num_blocks) * kv_heads * block_size * d;
    std::vector<uint16_t> key_cache(cache_size), value_cache(cache_size);
    for (size_t i = 0; i < cache_size; ++i) {
      key_cache[i] = static_cast<uint16_t>(rng());
      value_cache[i] = static_cast<uint16_t>(rng());
    }
    auto key_expected = key_cache;
    auto value_expected = value_cache;
    std::vector<int64_t> slots(num_tokens);
    std::iota(slots.begin(), slots.end(), 7);
    slots[3] = -1;
    const auto key = random_floats(rng, static_cast<size_t>(num_tokens) * kv_heads * d, -70000.0f,
                                   70000.0f);  // past float16's range: rounds to infinity
    const auto value = random_floats(rng, static_cast<size_t>(num_tokens) * kv_heads * d);
    KvCacheView view{
        key_cache.data(), value_cache.data(), num_blocks, block_size, kv_heads, d, dtype};
    write_kv(key.data(), value.data(), slots.data(), num_tokens, view);
    const auto narrow = [&](float x) {
      return dtype == KvDtype::kFloat16 ? f32_to_f16(x) : f32_to_bf16(x);
    };
    for (int t = 0; t < num_tokens; ++t) {
      if (slots[t] < 0) continue;
      const int64_t block = slots[t] / block_size, offset = slots[t] % block_size;
      for (int h = 0; h < kv_heads; ++h) {
        for (int i = 0; i < d; ++i) {
          const size_t dst = ((block * kv_heads + h) * block_size + offset) * d + i;
          const size_t src = (static_cast<size_t>(t) * kv_heads + h) * d + i;
          key_expected[dst] = narrow(key[src]);
          value_expected[dst] = narrow(value[src]);
        }
      }
    }
    for (Isa isa : {Isa::kPortable, Isa::kAvx2, Isa::kAvx512}) {  // F16C or scalar: same bits
      if (!isa_supported(isa)) continue;
      SCOPED_TRACE(isa_name(isa));
      std::vector<uint16_t> keys = key_cache, values = value_cache;
      KvCacheView view{keys.data(), values.data(), num_blocks, block_size, kv_heads, d, dtype};
      write_kv(key.data(), value.data(), slots.data(), num_tokens, view, isa);
      EXPECT_EQ(keys, key_expected);
      EXPECT_EQ(values, value_expected);
    }
  }
}

TEST(WriteKv, AllPaddingLeavesCacheUntouched) {
  std::vector<float> key_cache(2 * 2 * 4 * 8, 3.0f), value_cache(key_cache.size(), 4.0f);
  const std::vector<float> key(3 * 2 * 8, 1.0f), value(key.size(), 2.0f);
  const std::vector<int64_t> slots{-1, -1, -7};
  write_kv(key.data(), value.data(), slots.data(), 3,
           KvCacheView{key_cache.data(), value_cache.data(), 2, 4, 2, 8});
  EXPECT_TRUE(std::all_of(key_cache.begin(), key_cache.end(), [](float v) { return v == 3.0f; }));
  EXPECT_TRUE(
      std::all_of(value_cache.begin(), value_cache.end(), [](float v) { return v == 4.0f; }));
}

}  // namespace
}  // namespace pagedserve::kernels
