// Block hashing for automatic prefix caching: a full block's hash is XXH3-128 over (its parent
// block's hash, its token ids, extra keys such as a cache salt), so a hash names the whole
// prefix up to and including that block. Owns BlockHash and the functions that compute it;
// nothing here keeps state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace pagedserve::cache {

// 128 bits so that two different prefixes sharing a hash (and so one request reading another's
// K/V) is out of reach in practice; the index trusts hashes and never compares tokens.
struct BlockHash {
  uint64_t low64 = 0;
  uint64_t high64 = 0;
  friend bool operator==(const BlockHash&, const BlockHash&) = default;
};

// For unordered containers: the low half of an XXH3 value is already well mixed.
struct BlockHashHasher {
  size_t operator()(const BlockHash& hash) const noexcept { return hash.low64; }
};

// The parent of every sequence's first block: a fixed seed, so hashes are stable across runs.
inline constexpr BlockHash kRootBlockHash{0x9e3779b97f4a7c15ULL, 0xc2b2ae3d27d4eb4fULL};

// Hash of one full block chained to `parent`. `extra_keys` are bytes that must also match for
// a reuse (the cache salt); they are length-prefixed so ("ab", "") and ("a", "b") differ.
BlockHash hash_block(const BlockHash& parent, std::span<const int32_t> tokens,
                     std::string_view extra_keys = {});

// Hashes of every full block of `tokens` in order (a trailing partial block gets none). The
// salt goes into the first block only: chaining carries it into every later hash.
std::vector<BlockHash> hash_full_blocks(std::span<const int32_t> tokens, int block_size,
                                        std::string_view cache_salt = {});

}  // namespace pagedserve::cache
