// PagedKvCache: the executor's KV memory for every layer, as one pool of fixed-size blocks.
// The block manager (cache/) decides which block holds which tokens; this class only owns the
// bytes and performs the block copies it is told to (copy-on-write, swap in and out).
// Elements are float32, float16, bfloat16 or int8 (--kv-cache-dtype; int8 with a float scale
// per (token, KV head) row in arrays beside the elements); copies move raw bytes.
// Owned by the executor; not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/cpu/huge_page_allocator.h"
#include "kernels/cpu/kernels.h"

namespace pagedserve::model {

class PagedKvCache {
 public:
  PagedKvCache(int num_layers, int num_blocks, int block_size, int num_kv_heads, int head_dim,
               kernels::KvDtype dtype = kernels::KvDtype::kFloat32);

  kernels::KvCacheView layer(int layer_index);

  // Copies block `src` to block `dst` in every layer (keys and values), within this pool.
  void copy_block(int32_t src, int32_t dst);
  // Copies block `src` of this pool to block `dst` of `other` (same shape and dtype except
  // block count); swap out and swap in are this between the device pool and the CPU swap pool.
  void copy_block_to(int32_t src, PagedKvCache& other, int32_t dst) const;

  int num_layers() const { return num_layers_; }
  int num_blocks() const { return num_blocks_; }
  int block_size() const { return block_size_; }
  kernels::KvDtype dtype() const { return dtype_; }
  // Elements of one block in one layer, for keys or for values alone.
  size_t elements_per_block() const { return elements_per_block_; }
  // Bytes one block takes across all layers, keys and values (int8's scales included).
  size_t bytes_per_block() const {
    return 2 * num_layers_ * (elements_per_block_ * kernels::kv_dtype_size(dtype_) + scale_bytes_);
  }

 private:
  int num_layers_;
  int num_blocks_;
  int block_size_;
  int num_kv_heads_;
  int head_dim_;
  kernels::KvDtype dtype_;
  size_t elements_per_block_;
  size_t scale_bytes_;  // per block and layer, of keys or of values: 0 but for int8
  // Huge pages where available: attention walks scattered blocks of these every step. Raw
  // bytes, 2 MiB aligned (so every element type is aligned).
  std::vector<kernels::HugePageBuffer>
      keys_;  // per layer: [num_blocks, num_kv_heads, block_size, head_dim]
  std::vector<kernels::HugePageBuffer> values_;  // same layout as keys_
  // int8 only, per layer: float [num_blocks, num_kv_heads, block_size]; empty otherwise.
  std::vector<kernels::HugePageBuffer> key_scales_;
  std::vector<kernels::HugePageBuffer> value_scales_;
};

}  // namespace pagedserve::model
