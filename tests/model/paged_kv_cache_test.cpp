// PagedKvCache: its byte size per block follows the element type, and block copies (within a
// pool for copy-on-write, between pools for swap) move every layer's K and V bytes unchanged
// and nothing else, for float32 and the 16-bit dtypes; int8 blocks carry their rows' scales.
#include "model/paged_kv_cache.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace pagedserve::model {
namespace {

using kernels::KvDtype;

constexpr int kLayers = 3, kBlockSize = 4, kKvHeads = 2, kHeadDim = 8;

// Fills every byte of every layer with random data; returns the view's bytes per layer.
size_t fill_random(PagedKvCache& cache, std::mt19937& rng) {
  const size_t bytes = static_cast<size_t>(cache.num_blocks()) * cache.elements_per_block() *
                       kernels::kv_dtype_size(cache.dtype());
  for (int l = 0; l < cache.num_layers(); ++l) {
    const kernels::KvCacheView view = cache.layer(l);
    for (void* buffer : {view.key, view.value}) {
      auto* p = static_cast<unsigned char*>(buffer);
      for (size_t i = 0; i < bytes; ++i) p[i] = static_cast<unsigned char>(rng());
    }
  }
  return bytes;
}

std::vector<unsigned char> snapshot(PagedKvCache& cache, size_t bytes) {
  std::vector<unsigned char> all;
  for (int l = 0; l < cache.num_layers(); ++l) {
    const kernels::KvCacheView view = cache.layer(l);
    for (const void* buffer : {view.key, view.value}) {
      const auto* p = static_cast<const unsigned char*>(buffer);
      all.insert(all.end(), p, p + bytes);
    }
  }
  return all;
}

TEST(PagedKvCache, BytesPerBlockFollowTheDtype) {
  for (KvDtype dtype : {KvDtype::kFloat32, KvDtype::kFloat16, KvDtype::kBFloat16}) {
    PagedKvCache cache(kLayers, 5, kBlockSize, kKvHeads, kHeadDim, dtype);
    const size_t elements = static_cast<size_t>(kKvHeads) * kBlockSize * kHeadDim;
    EXPECT_EQ(cache.elements_per_block(), elements);
    EXPECT_EQ(cache.bytes_per_block(),
              2 * kLayers * elements * (dtype == KvDtype::kFloat32 ? 4 : 2));
    EXPECT_EQ(cache.layer(1).dtype, dtype);
  }
}

TEST(PagedKvCache, CopiesMoveRawBytesOfOneBlockInEveryLayer) {
  std::mt19937 rng(9);
  for (KvDtype dtype : {KvDtype::kFloat32, KvDtype::kFloat16, KvDtype::kBFloat16}) {
    SCOPED_TRACE(kernels::kv_dtype_name(dtype));
    PagedKvCache device(kLayers, 6, kBlockSize, kKvHeads, kHeadDim, dtype);
    PagedKvCache swap(kLayers, 3, kBlockSize, kKvHeads, kHeadDim, dtype);
    const size_t device_bytes = fill_random(device, rng);
    const size_t swap_bytes = fill_random(swap, rng);
    const size_t block_bytes = device.bytes_per_block() / (2 * kLayers);  // one layer, K or V

    // Copy-on-write: block 4 -> block 1 of the same pool.
    std::vector<unsigned char> expected = snapshot(device, device_bytes);
    for (int part = 0; part < 2 * kLayers; ++part) {
      unsigned char* base = expected.data() + part * device_bytes;
      std::memcpy(base + 1 * block_bytes, base + 4 * block_bytes, block_bytes);
    }
    device.copy_block(4, 1);
    EXPECT_EQ(snapshot(device, device_bytes), expected);

    // Swap out: device block 5 -> swap block 2; swap in: swap block 0 -> device block 3.
    std::vector<unsigned char> expected_swap = snapshot(swap, swap_bytes);
    for (int part = 0; part < 2 * kLayers; ++part) {
      std::memcpy(expected_swap.data() + part * swap_bytes + 2 * block_bytes,
                  expected.data() + part * device_bytes + 5 * block_bytes, block_bytes);
    }
    device.copy_block_to(5, swap, 2);
    EXPECT_EQ(snapshot(swap, swap_bytes), expected_swap);
    for (int part = 0; part < 2 * kLayers; ++part) {
      std::memcpy(expected.data() + part * device_bytes + 3 * block_bytes,
                  expected_swap.data() + part * swap_bytes + 0 * block_bytes, block_bytes);
    }
    swap.copy_block_to(0, device, 3);
    EXPECT_EQ(snapshot(device, device_bytes), expected);
  }
}

// Everything an int8 block is, per layer: its K and V quants and its rows' scales.
struct Int8Block {
  std::vector<int8_t> quants;
  std::vector<float> scales;
  bool operator==(const Int8Block&) const = default;
};

Int8Block int8_block(PagedKvCache& cache, int block) {
  Int8Block out;
  const size_t elements = cache.elements_per_block();
  const size_t rows = elements / kHeadDim;
  for (int l = 0; l < cache.num_layers(); ++l) {
    const kernels::KvCacheView view = cache.layer(l);
    for (const void* quants : {view.key, view.value}) {
      const auto* p = static_cast<const int8_t*>(quants) + block * elements;
      out.quants.insert(out.quants.end(), p, p + elements);
    }
    for (const float* scales : {view.key_scales, view.value_scales}) {
      out.scales.insert(out.scales.end(), scales + block * rows, scales + (block + 1) * rows);
    }
  }
  return out;
}

void fill_random_int8(PagedKvCache& cache, std::mt19937& rng) {
  const size_t elements = cache.num_blocks() * cache.elements_per_block();
  for (int l = 0; l < cache.num_layers(); ++l) {
    const kernels::KvCacheView view = cache.layer(l);
    for (void* quants : {view.key, view.value}) {
      auto* p = static_cast<int8_t*>(quants);
      for (size_t i = 0; i < elements; ++i) p[i] = static_cast<int8_t>(rng());
    }
    for (float* scales : {view.key_scales, view.value_scales}) {
      for (size_t i = 0; i < elements / kHeadDim; ++i) scales[i] = static_cast<float>(rng());
    }
  }
}

TEST(PagedKvCache, Int8BlocksCarryTheirScales) {
  std::mt19937 rng(4);
  PagedKvCache device(kLayers, 6, kBlockSize, kKvHeads, kHeadDim, KvDtype::kInt8);
  PagedKvCache swap(kLayers, 3, kBlockSize, kKvHeads, kHeadDim, KvDtype::kInt8);
  const size_t elements = static_cast<size_t>(kKvHeads) * kBlockSize * kHeadDim;
  EXPECT_EQ(device.bytes_per_block(), 2 * kLayers * (elements + kKvHeads * kBlockSize * 4));
  ASSERT_NE(device.layer(0).key_scales, nullptr);
  ASSERT_NE(device.layer(2).value_scales, nullptr);
  fill_random_int8(device, rng);
  fill_random_int8(swap, rng);
  std::vector<Int8Block> before;
  for (int b = 0; b < 6; ++b) before.push_back(int8_block(device, b));

  device.copy_block(4, 1);  // copy-on-write
  for (int b = 0; b < 6; ++b) EXPECT_EQ(int8_block(device, b), before[b == 1 ? 4 : b]) << b;

  const Int8Block swap_0 = int8_block(swap, 0);
  device.copy_block_to(5, swap, 2);  // swap out
  EXPECT_EQ(int8_block(swap, 2), before[5]);
  swap.copy_block_to(0, device, 3);  // swap in
  EXPECT_EQ(int8_block(device, 3), swap_0);
  EXPECT_EQ(int8_block(device, 0), before[0]);
}

}  // namespace
}  // namespace pagedserve::model
