// PagedKvCache: its byte size per block follows the element type, and block copies (within a
// pool for copy-on-write, between pools for swap) move every layer's K and V bytes unchanged
// and nothing else, for float32 and the 16-bit dtypes.
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

}  // namespace
}  // namespace pagedserve::model
