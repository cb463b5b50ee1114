// PagedKvCache: per-layer key/value block pools and block copies.
#include "model/paged_kv_cache.h"

#include <algorithm>
#include <cassert>
#include <cstring>

namespace pagedserve::model {

PagedKvCache::PagedKvCache(int num_layers, int num_blocks, int block_size, int num_kv_heads,
                           int head_dim, kernels::KvDtype dtype)
    : num_layers_(num_layers),
      num_blocks_(num_blocks),
      block_size_(block_size),
      num_kv_heads_(num_kv_heads),
      head_dim_(head_dim),
      dtype_(dtype),
      elements_per_block_(static_cast<size_t>(num_kv_heads) * block_size * head_dim),
      scale_bytes_(static_cast<size_t>(num_kv_heads) * block_size *
                   kernels::kv_dtype_row_scale_bytes(dtype)) {
  const size_t bytes_per_layer =
      elements_per_block_ * kernels::kv_dtype_size(dtype) * static_cast<size_t>(num_blocks);
  // One zeroed buffer per layer; all-zero bytes are 0.0 in every dtype.
  for (int l = 0; l < num_layers; ++l) {
    keys_.emplace_back(bytes_per_layer);
    values_.emplace_back(bytes_per_layer);
    if (scale_bytes_ > 0) {
      key_scales_.emplace_back(scale_bytes_ * static_cast<size_t>(num_blocks));
      value_scales_.emplace_back(scale_bytes_ * static_cast<size_t>(num_blocks));
    }
  }
}

namespace {
float* scales(kernels::HugePageBuffer& buffer) { return reinterpret_cast<float*>(buffer.data()); }
}  // namespace

kernels::KvCacheView PagedKvCache::layer(int layer_index) {
  assert(layer_index >= 0 && layer_index < num_layers_);
  return kernels::KvCacheView{keys_[layer_index].data(),
                              values_[layer_index].data(),
                              num_blocks_,
                              block_size_,
                              num_kv_heads_,
                              head_dim_,
                              dtype_,
                              scale_bytes_ > 0 ? scales(key_scales_[layer_index]) : nullptr,
                              scale_bytes_ > 0 ? scales(value_scales_[layer_index]) : nullptr};
}

void PagedKvCache::copy_block(int32_t src, int32_t dst) { copy_block_to(src, *this, dst); }

void PagedKvCache::copy_block_to(int32_t src, PagedKvCache& other, int32_t dst) const {
  assert(src >= 0 && src < num_blocks_ && dst >= 0 && dst < other.num_blocks_);
  assert(other.elements_per_block_ == elements_per_block_ && other.num_layers_ == num_layers_);
  assert(other.dtype_ == dtype_);
  const size_t n = elements_per_block_ * kernels::kv_dtype_size(dtype_);  // bytes
  for (int l = 0; l < num_layers_; ++l) {
    std::memcpy(other.keys_[l].data() + dst * n, keys_[l].data() + src * n, n);
    std::memcpy(other.values_[l].data() + dst * n, values_[l].data() + src * n, n);
    if (scale_bytes_ > 0) {
      const size_t m = scale_bytes_;
      std::memcpy(other.key_scales_[l].data() + dst * m, key_scales_[l].data() + src * m, m);
      std::memcpy(other.value_scales_[l].data() + dst * m, value_scales_[l].data() + src * m, m);
    }
  }
}

}  // namespace pagedserve::model
