// Tests for KV-cache sizing: bytes per block, blocks from bytes, and the max_model_len refusal.
#include "cache/kv_cache_sizing.h"

#include <gtest/gtest.h>

#include <climits>
#include <stdexcept>

namespace pagedserve::cache {
namespace {

// Llama-3-8B-like: 32 layers, 8 KV heads, head_dim 128, bf16, 16-token blocks.
KvCacheShape llama8b() { return KvCacheShape{32, 8, 128, 2, 16}; }

TEST(KvCacheSizing, BytesPerBlockCountsKAndVForEveryLayer) {
  EXPECT_EQ(kv_bytes_per_block(llama8b()), 2LL * 32 * 8 * 128 * 2 * 16);  // 2 MiB
  EXPECT_THROW(kv_bytes_per_block(KvCacheShape{0, 8, 128, 2, 16}), std::invalid_argument);
  // The CPU's int8 cache: one byte per element plus a float32 scale per (token, head) row of
  // K and of V.
  EXPECT_EQ(kv_bytes_per_block(KvCacheShape{32, 8, 128, 1, 16, 4}), 2LL * 32 * 8 * 16 * (128 + 4));
}

TEST(KvCacheSizing, BlocksFromMemoryRoundDown) {
  const int64_t per_block = kv_bytes_per_block(llama8b());
  EXPECT_EQ(num_blocks_for_memory(llama8b(), 10 * per_block), 10);
  EXPECT_EQ(num_blocks_for_memory(llama8b(), 10 * per_block + per_block - 1), 10);
  EXPECT_EQ(num_blocks_for_memory(llama8b(), per_block - 1), 0);
  EXPECT_EQ(num_blocks_for_memory(llama8b(), 0), 0);
  EXPECT_EQ(num_blocks_for_memory(llama8b(), -5), 0);
  EXPECT_EQ(num_blocks_for_memory(KvCacheShape{1, 1, 1, 1, 1}, INT64_MAX), INT_MAX);
  EXPECT_EQ(num_blocks_for_tokens(llama8b(), 8192), 512);
  EXPECT_EQ(num_blocks_for_tokens(llama8b(), 8193), 513);
}

TEST(KvCacheSizing, DtypeNames) {
  EXPECT_EQ(kv_dtype_bytes("float32"), 4);
  EXPECT_EQ(kv_dtype_bytes("bfloat16"), 2);
  EXPECT_EQ(kv_dtype_bytes("float16"), 2);
  EXPECT_EQ(kv_dtype_bytes("fp8"), 1);
  EXPECT_THROW(kv_dtype_bytes("float64x"), std::invalid_argument);
}

TEST(KvCacheSizing, RefusesAModelWhoseMaxLenDoesNotFitAndSaysHowMuchItNeeds) {
  EXPECT_EQ(max_model_len_error(llama8b(), 512, 8192), "");
  EXPECT_NO_THROW(check_max_model_len_fits(llama8b(), 512, 8192));
  const std::string error = max_model_len_error(llama8b(), 256, 8192);
  EXPECT_EQ(error,
            "max_model_len 8192 needs 512 KV blocks of 16 tokens (1.00 GiB at 2.00 MiB per "
            "block), but the KV cache has 256 blocks (512.00 MiB, 4096 tokens); give "
            "--kv-cache-memory at least 1073741824 bytes or --num-kv-blocks at least 512, or "
            "lower --max-model-len to 4096");
  try {
    check_max_model_len_fits(llama8b(), 256, 8192);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), error);
  }
}

TEST(KvCacheSizing, FormatBytes) {
  EXPECT_EQ(format_bytes(12), "12 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(3LL << 30), "3.00 GiB");
}

}  // namespace
}  // namespace pagedserve::cache
