// write_kv: scatters a step's new keys and values into their paged KV cache slots, rounding
// them to the cache's element type.
#include <algorithm>
#include <cassert>
#include <cstdint>

#include "kernels/cpu/kernels.h"

namespace pagedserve::kernels {
namespace {

inline void store_row(const float* src, int n, float* dst) { std::copy_n(src, n, dst); }

// Scalar conversions on purpose: they are exact specifications (round to nearest even), the
// same on every CPU, and a step writes only a few KiB of K/V per layer.
template <KvDtype kDtype>
inline void store_row(const float* src, int n, uint16_t* dst) {
  for (int i = 0; i < n; ++i) {
    dst[i] = kDtype == KvDtype::kFloat16 ? f32_to_f16(src[i]) : f32_to_bf16(src[i]);
  }
}

template <KvDtype kDtype, class Element>
void write_kv_typed(const float* key, const float* value, const int64_t* slot_mapping,
                    int num_tokens, const KvCacheView& cache) {
  const long row = static_cast<long>(cache.num_kv_heads) * cache.head_dim;  // one token
  const long head_stride = static_cast<long>(cache.block_size) * cache.head_dim;
  Element* key_cache = static_cast<Element*>(cache.key);
  Element* value_cache = static_cast<Element*>(cache.value);
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
      if constexpr (kDtype == KvDtype::kFloat32) {
        store_row(k_src, cache.head_dim, key_cache + base + h * head_stride);
        store_row(v_src, cache.head_dim, value_cache + base + h * head_stride);
      } else {
        store_row<kDtype>(k_src, cache.head_dim, key_cache + base + h * head_stride);
        store_row<kDtype>(v_src, cache.head_dim, value_cache + base + h * head_stride);
      }
    }
  }
}

}  // namespace

void write_kv(const float* key, const float* value, const int64_t* slot_mapping, int num_tokens,
              const KvCacheView& cache) {
  assert(num_tokens >= 0);
  assert(num_tokens == 0 || (key != nullptr && value != nullptr && slot_mapping != nullptr));
  assert(cache.key != nullptr && cache.value != nullptr);
  assert(cache.block_size > 0 && cache.num_kv_heads > 0 && cache.head_dim > 0);
  switch (cache.dtype) {
    case KvDtype::kFloat16:
      return write_kv_typed<KvDtype::kFloat16, uint16_t>(key, value, slot_mapping, num_tokens,
                                                         cache);
    case KvDtype::kBFloat16:
      return write_kv_typed<KvDtype::kBFloat16, uint16_t>(key, value, slot_mapping, num_tokens,
                                                          cache);
    default:
      return write_kv_typed<KvDtype::kFloat32, float>(key, value, slot_mapping, num_tokens, cache);
  }
}

}  // namespace pagedserve::kernels
