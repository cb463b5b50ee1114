// write_kv: scatters a step's new keys and values into their paged KV cache slots.
#include <algorithm>
#include <cassert>

#include "kernels/cpu/kernels.h"

namespace pagedserve::kernels {

void write_kv(const float* key, const float* value, const int64_t* slot_mapping, int num_tokens,
              const KvCacheView& cache) {
  assert(num_tokens >= 0);
  assert(num_tokens == 0 || (key != nullptr && value != nullptr && slot_mapping != nullptr));
  assert(cache.key != nullptr && cache.value != nullptr);
  assert(cache.block_size > 0 && cache.num_kv_heads > 0 && cache.head_dim > 0);
  const long row = static_cast<long>(cache.num_kv_heads) * cache.head_dim;  // one token
  const long head_stride = static_cast<long>(cache.block_size) * cache.head_dim;
  for (int t = 0; t < num_tokens; ++t) {
    const int64_t slot = slot_mapping[t];
    if (slot < 0) continue;  // padding token: nothing to store
    const int64_t block = slot / cache.block_size;
    const int64_t offset = slot % cache.block_size;
    assert(block < cache.num_blocks);
    // Within a block the layout is [num_kv_heads, block_size, head_dim], so one token's heads
    // are block_size * head_dim apart.
    const int64_t base = block * cache.num_kv_heads * head_stride + offset * cache.head_dim;
    for (int h = 0; h < cache.num_kv_heads; ++h) {
      const float* k_src = key + t * row + static_cast<long>(h) * cache.head_dim;
      const float* v_src = value + t * row + static_cast<long>(h) * cache.head_dim;
      std::copy(k_src, k_src + cache.head_dim, cache.key + base + h * head_stride);
      std::copy(v_src, v_src + cache.head_dim, cache.value + base + h * head_stride);
    }
  }
}

}  // namespace pagedserve::kernels
