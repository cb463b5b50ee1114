// KV-cache sizing: how many blocks a byte budget buys, and whether the model's max_model_len
// fits in the pool. Pure arithmetic on the model's shape; the engine wires the flags
// (--num-kv-blocks, --kv-cache-memory, --swap-space) to these functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace pagedserve::cache {

// What one token's K/V costs, per layer and head: everything the pool's byte size depends on.
struct KvCacheShape {
  int num_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int dtype_bytes = 0;  // bytes per element: 4 (float32), 2 (float16/bfloat16), 1 (fp8, int8)
  int block_size = 16;  // tokens per block
  // Bytes of scale per (token, KV head) row of keys, and again of values: 4 for the CPU's
  // int8 cache (one float32 each), 0 for the others.
  int row_scale_bytes = 0;
};

// Bytes per element of a KV dtype name ("float32", "float16", "bfloat16", "fp8"...).
// Throws std::invalid_argument for an unknown name.
int kv_dtype_bytes(std::string_view dtype);

// K and V for every layer of one block:
// 2 * layers * kv_heads * block_size * (head_dim * dtype_bytes + row_scale_bytes).
// Throws std::invalid_argument when a field is not positive.
int64_t kv_bytes_per_block(const KvCacheShape& shape);

// Whole blocks that fit in `memory_bytes` (floor; 0 for a non-positive budget; at most INT_MAX).
int num_blocks_for_memory(const KvCacheShape& shape, int64_t memory_bytes);

// Blocks needed to hold `num_tokens` tokens (ceil).
int num_blocks_for_tokens(const KvCacheShape& shape, int64_t num_tokens);

// "" when one sequence of max_model_len tokens fits in `num_blocks`; otherwise the message to
// refuse the model with, saying how much memory it needs and which flags to change.
std::string max_model_len_error(const KvCacheShape& shape, int num_blocks, int max_model_len);

// Throws std::invalid_argument with max_model_len_error's message when it does not fit.
void check_max_model_len_fits(const KvCacheShape& shape, int num_blocks, int max_model_len);

// "4.00 GiB", "512.00 MiB", "12 B": for messages and logs.
std::string format_bytes(int64_t bytes);

}  // namespace pagedserve::cache
