// BlockManager::check_invariants: the whole-state consistency check the tests run after every
// operation. Kept apart from the hot paths in block_manager.cpp; O(blocks + table entries).
#include <algorithm>

#include "cache/block_manager.h"

namespace pagedserve::cache {

std::string BlockManager::check_sequences() const {
  std::vector<int> device_refs(static_cast<size_t>(device_.num_blocks()), 0);
  std::vector<int> cpu_refs(static_cast<size_t>(cpu_.num_blocks()), 0);
  for (const auto& [id, s] : seqs_) {
    const std::string who = "sequence " + std::to_string(id) + ": ";
    const BlockPool& pool = s.swapped ? cpu_ : device_;
    std::vector<int>& refs = s.swapped ? cpu_refs : device_refs;
    if (s.num_tokens <= 0) return who + "no tokens";
    const int num_blocks = static_cast<int>(s.blocks.size());
    if (num_blocks != num_blocks_for(s.num_tokens)) return who + "table size does not fit tokens";
    if (s.num_speculative < 0 || s.num_speculative > s.num_tokens ||
        (s.pending && s.num_speculative > 0)) {
      return who + "bad number of speculative tokens";
    }
    if (enable_prefix_caching_) {
      // Blocks holding a pending token (waiting for its value) or a speculative one (waiting
      // for verification) stay unhashed in the tail: only accepted, known tokens are hashed.
      const int settled = s.num_tokens - s.num_speculative - (s.pending ? 1 : 0);
      if (static_cast<int>(s.block_hashes.size()) != settled / block_size_) {
        return who + "wrong number of block hashes";
      }
      if (static_cast<int>(s.tail_tokens.size()) !=
          s.num_tokens - static_cast<int>(s.block_hashes.size()) * block_size_) {
        return who + "wrong number of tail tokens";
      }
      const size_t kept_tokens = events_ == nullptr ? 0 : s.block_hashes.size() * block_size_;
      if (s.full_tokens.size() != kept_tokens) return who + "wrong number of full-block tokens";
    }
    // Released entries (kNoBlock) are a prefix, never the last block, and only ever blocks
    // wholly before the window of the next query (at position num_tokens).
    if (s.num_released < 0 || s.num_released >= std::max(num_blocks, 1)) {
      return who + "released entries out of range";
    }
    if (s.num_released > 0 && (sliding_window_ == 0 ||
                               s.num_released * block_size_ > s.num_tokens - sliding_window_ + 1)) {
      return who + "released a block the window still covers";
    }
    for (int i = 0; i < num_blocks; ++i) {
      if ((s.blocks[i] == kNoBlock) != (i < s.num_released)) {
        return who + "released entries are not exactly the first " + std::to_string(s.num_released);
      }
    }
    std::vector<BlockId> sorted(s.blocks.begin() + s.num_released, s.blocks.end());
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
      return who + "holds a block twice";
    }
    for (int i = s.num_released; i < num_blocks; ++i) {
      const BlockId b = s.blocks[i];
      if (b < 0 || b >= pool.num_blocks()) return who + "block id out of range";
      ++refs[b];
      const int expected_fill = i + 1 < num_blocks ? block_size_ : s.num_tokens - i * block_size_;
      if (pool.block(b).num_tokens != expected_fill) {
        return who + "block " + std::to_string(b) + " holds " +
               std::to_string(pool.block(b).num_tokens) + " tokens, expected " +
               std::to_string(expected_fill);
      }
      if (!s.swapped && pool.block(b).has_hash &&
          (i >= static_cast<int>(s.block_hashes.size()) ||
           !(pool.block(b).hash == s.block_hashes[i]))) {
        return who + "block " + std::to_string(b) + " is indexed under another prefix's hash";
      }
    }
  }
  for (BlockId b = 0; b < device_.num_blocks(); ++b) {
    if (device_.block(b).ref_count != device_refs[b]) {
      return "device block " + std::to_string(b) + " has ref_count " +
             std::to_string(device_.block(b).ref_count) + " but " + std::to_string(device_refs[b]) +
             " tables hold it";
    }
  }
  for (BlockId c = 0; c < cpu_.num_blocks(); ++c) {
    if (cpu_.block(c).ref_count != cpu_refs[c]) {
      return "cpu block " + std::to_string(c) + " has ref_count " +
             std::to_string(cpu_.block(c).ref_count) + " but " + std::to_string(cpu_refs[c]) +
             " tables hold it";
    }
  }
  return {};
}

std::string BlockManager::check_invariants() const {
  if (std::string e = device_.check_invariants(); !e.empty()) return "device pool: " + e;
  if (std::string e = cpu_.check_invariants(); !e.empty()) return "cpu pool: " + e;
  if (std::string e = check_sequences(); !e.empty()) return e;
  for (BlockId d = 0; d < device_.num_blocks(); ++d) {
    const BlockId c = cpu_twin_of_device_[d];
    if (c == kNoBlock) continue;
    if (device_twin_of_cpu_[c] != d) return "swap twins of device block " + std::to_string(d);
    if (device_.block(d).ref_count == 0 || cpu_.block(c).ref_count == 0) {
      return "swap twin link on a free block " + std::to_string(d) + "/" + std::to_string(c);
    }
    if (device_.block(d).num_tokens != cpu_.block(c).num_tokens) {
      return "swap twins " + std::to_string(d) + "/" + std::to_string(c) + " differ in fill";
    }
  }
  for (BlockId c = 0; c < cpu_.num_blocks(); ++c) {
    const BlockId d = device_twin_of_cpu_[c];
    if (d != kNoBlock && cpu_twin_of_device_[d] != c) {
      return "swap twins of cpu block " + std::to_string(c);
    }
  }
  if (device_.num_free_blocks() + device_.num_used_blocks() != device_.num_blocks()) {
    return "device free + used != total";
  }
  return {};
}

}  // namespace pagedserve::cache
