// KV-cache sizing arithmetic and the max_model_len refusal message (see kv_cache_sizing.h).
#include "cache/kv_cache_sizing.h"

#include <climits>
#include <cstdio>
#include <stdexcept>

namespace pagedserve::cache {

int kv_dtype_bytes(std::string_view dtype) {
  if (dtype == "float32" || dtype == "fp32") return 4;
  if (dtype == "float16" || dtype == "fp16" || dtype == "half" || dtype == "bfloat16" ||
      dtype == "bf16") {
    return 2;
  }
  if (dtype == "fp8" || dtype == "fp8_e4m3" || dtype == "fp8_e5m2" || dtype == "int8") return 1;
  throw std::invalid_argument("unknown KV-cache dtype '" + std::string(dtype) + "'");
}

int64_t kv_bytes_per_block(const KvCacheShape& shape) {
  if (shape.num_layers <= 0 || shape.num_kv_heads <= 0 || shape.head_dim <= 0 ||
      shape.dtype_bytes <= 0 || shape.block_size <= 0 || shape.row_scale_bytes < 0) {
    throw std::invalid_argument(
        "KV-cache shape needs positive layers, KV heads, head_dim, dtype size and block size");
  }
  return int64_t{2} * shape.num_layers * shape.num_kv_heads * shape.block_size *
         (int64_t{shape.head_dim} * shape.dtype_bytes + shape.row_scale_bytes);
}

int num_blocks_for_memory(const KvCacheShape& shape, int64_t memory_bytes) {
  const int64_t per_block = kv_bytes_per_block(shape);
  if (memory_bytes <= 0) return 0;
  const int64_t blocks = memory_bytes / per_block;
  return blocks > INT_MAX ? INT_MAX : static_cast<int>(blocks);
}

int num_blocks_for_tokens(const KvCacheShape& shape, int64_t num_tokens) {
  kv_bytes_per_block(shape);  // validates the shape
  if (num_tokens <= 0) return 0;
  return static_cast<int>((num_tokens + shape.block_size - 1) / shape.block_size);
}

std::string format_bytes(int64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes) / 1024.0;
  int unit = 0;
  while (value >= 1024.0 && unit < 3) {
    value /= 1024.0;
    ++unit;
  }
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.2f %s", value, kUnits[unit]);
  return buffer;
}

std::string max_model_len_error(const KvCacheShape& shape, int num_blocks, int max_model_len) {
  const int needed = num_blocks_for_tokens(shape, max_model_len);
  if (needed <= num_blocks) return {};
  const int64_t per_block = kv_bytes_per_block(shape);
  const int64_t needed_bytes = per_block * needed;
  const int64_t have_tokens = int64_t{num_blocks < 0 ? 0 : num_blocks} * shape.block_size;
  return "max_model_len " + std::to_string(max_model_len) + " needs " + std::to_string(needed) +
         " KV blocks of " + std::to_string(shape.block_size) + " tokens (" +
         format_bytes(needed_bytes) + " at " + format_bytes(per_block) +
         " per block), but the KV cache has " + std::to_string(num_blocks) + " blocks (" +
         format_bytes(per_block * (num_blocks < 0 ? 0 : num_blocks)) + ", " +
         std::to_string(have_tokens) + " tokens); give --kv-cache-memory at least " +
         std::to_string(needed_bytes) + " bytes or --num-kv-blocks at least " +
         std::to_string(needed) + ", or lower --max-model-len to " + std::to_string(have_tokens);
}

void check_max_model_len_fits(const KvCacheShape& shape, int num_blocks, int max_model_len) {
  if (std::string error = max_model_len_error(shape, num_blocks, max_model_len); !error.empty()) {
    throw std::invalid_argument(error);
  }
}

}  // namespace pagedserve::cache
