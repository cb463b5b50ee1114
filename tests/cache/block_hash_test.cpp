// Tests for chained block hashing: stable, chained, salted, one hash per full block.
#include "cache/block_hash.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace pagedserve::cache {
namespace {

std::vector<int32_t> iota_tokens(int n, int32_t first = 0) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

TEST(BlockHash, DeterministicAndSensitiveToEveryInput) {
  const std::vector<int32_t> tokens = iota_tokens(16);
  const BlockHash h = hash_block(kRootBlockHash, tokens);
  EXPECT_EQ(h, hash_block(kRootBlockHash, tokens));

  std::vector<int32_t> changed = tokens;
  changed[15] = 99;
  EXPECT_NE(h, hash_block(kRootBlockHash, changed));
  EXPECT_NE(h, hash_block(BlockHash{1, 2}, tokens));         // parent
  EXPECT_NE(h, hash_block(kRootBlockHash, tokens, "salt"));  // extra keys
}

TEST(BlockHash, ExtraKeysAreLengthPrefixed) {
  const std::vector<int32_t> tokens = iota_tokens(4);
  EXPECT_NE(hash_block(kRootBlockHash, tokens, ""), hash_block(kRootBlockHash, tokens, "a"));
  EXPECT_NE(hash_block(kRootBlockHash, tokens, std::string_view("a\0", 2)),
            hash_block(kRootBlockHash, tokens, "a"));
}

TEST(BlockHash, LargeBlocksUseTheHeapPathConsistently) {
  const std::vector<int32_t> tokens = iota_tokens(1024);
  EXPECT_EQ(hash_block(kRootBlockHash, tokens), hash_block(kRootBlockHash, tokens));
  std::vector<int32_t> changed = tokens;
  changed[1000] = -1;
  EXPECT_NE(hash_block(kRootBlockHash, tokens), hash_block(kRootBlockHash, changed));
}

TEST(BlockHash, FullBlocksAreChainedAndPartialBlockIsSkipped) {
  const std::vector<int32_t> tokens = iota_tokens(100);
  const std::vector<BlockHash> hashes = hash_full_blocks(tokens, 16);
  ASSERT_EQ(hashes.size(), 6u);
  BlockHash parent = kRootBlockHash;
  for (size_t i = 0; i < hashes.size(); ++i) {
    parent = hash_block(parent, std::span<const int32_t>(tokens).subspan(i * 16, 16));
    EXPECT_EQ(hashes[i], parent) << "block " << i;
  }
  // Same second block after a different first block: a different hash (the chain).
  std::vector<int32_t> other = tokens;
  other[0] = 7;
  const std::vector<BlockHash> other_hashes = hash_full_blocks(other, 16);
  for (size_t i = 0; i < hashes.size(); ++i) EXPECT_NE(hashes[i], other_hashes[i]);
}

TEST(BlockHash, SaltGoesIntoTheFirstBlockAndPropagates) {
  const std::vector<int32_t> tokens = iota_tokens(32);
  const std::vector<BlockHash> plain = hash_full_blocks(tokens, 16);
  const std::vector<BlockHash> salted = hash_full_blocks(tokens, 16, "tenant-a");
  ASSERT_EQ(salted.size(), 2u);
  EXPECT_EQ(salted[0], hash_block(kRootBlockHash, std::span(tokens).first(16), "tenant-a"));
  EXPECT_EQ(salted[1], hash_block(salted[0], std::span(tokens).subspan(16, 16)));
  EXPECT_NE(plain[0], salted[0]);
  EXPECT_NE(plain[1], salted[1]);
}

}  // namespace
}  // namespace pagedserve::cache
