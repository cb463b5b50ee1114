// Chained XXH3-128 block hashing (see block_hash.h).
#include "cache/block_hash.h"

#include <xxhash.h>

#include <cstring>

namespace pagedserve::cache {

namespace {

// Serialises (parent, tokens, extra-key length, extra keys) into `out`, which must hold
// hash_input_size() bytes. One contiguous buffer and one XXH3 call is several times faster
// than the streaming API for inputs this small (~90 bytes for a 16-token block).
size_t hash_input_size(std::span<const int32_t> tokens, std::string_view extra_keys) {
  return sizeof(BlockHash) + tokens.size_bytes() + sizeof(uint64_t) + extra_keys.size();
}

void write_hash_input(std::byte* out, const BlockHash& parent, std::span<const int32_t> tokens,
                      std::string_view extra_keys) {
  std::memcpy(out, &parent.low64, sizeof(uint64_t));
  out += sizeof(uint64_t);
  std::memcpy(out, &parent.high64, sizeof(uint64_t));
  out += sizeof(uint64_t);
  if (!tokens.empty()) std::memcpy(out, tokens.data(), tokens.size_bytes());
  out += tokens.size_bytes();
  const uint64_t extra_size = extra_keys.size();
  std::memcpy(out, &extra_size, sizeof(extra_size));
  out += sizeof(extra_size);
  if (!extra_keys.empty()) std::memcpy(out, extra_keys.data(), extra_keys.size());
}

}  // namespace

BlockHash hash_block(const BlockHash& parent, std::span<const int32_t> tokens,
                     std::string_view extra_keys) {
  constexpr size_t kStackBytes = 1024;  // block sizes up to ~250 tokens without a heap buffer
  const size_t size = hash_input_size(tokens, extra_keys);
  alignas(8) std::byte stack_buffer[kStackBytes];
  std::vector<std::byte> heap_buffer;
  std::byte* buffer = stack_buffer;
  if (size > kStackBytes) {
    heap_buffer.resize(size);
    buffer = heap_buffer.data();
  }
  write_hash_input(buffer, parent, tokens, extra_keys);
  const XXH128_hash_t h = XXH3_128bits(buffer, size);
  return BlockHash{h.low64, h.high64};
}

std::vector<BlockHash> hash_full_blocks(std::span<const int32_t> tokens, int block_size,
                                        std::string_view cache_salt) {
  const size_t num_full = block_size > 0 ? tokens.size() / static_cast<size_t>(block_size) : 0;
  std::vector<BlockHash> hashes;
  hashes.reserve(num_full);
  BlockHash parent = kRootBlockHash;
  for (size_t i = 0; i < num_full; ++i) {
    parent = hash_block(parent, tokens.subspan(i * block_size, block_size),
                        i == 0 ? cache_salt : std::string_view{});
    hashes.push_back(parent);
  }
  return hashes;
}

}  // namespace pagedserve::cache
