// KV-cache events: what changed in the prefix-cache index, in the order it changed, for a
// KV-aware router (llm-d's precise prefix-cache scorer) that mirrors every replica's cache.
// The vocabulary is vLLM's (vllm/distributed/kv_events.py): BlockStored (full blocks entered the
// index, with their parent's hash and their token ids), BlockRemoved (hashes left the index:
// evicted), AllBlocksCleared (the whole cache was dropped). KvEventRecorder is the buffer the
// BlockManager records into (a plain value, no I/O); its owner drains it once per applied
// memory-op list and hands the batch on (actors/kv_event_publisher.h). Pure: no threads.
//
// Guarantees a consumer can rely on (tests/cache/kv_cache_events_test.cpp checks them):
//  - a BlockStored's parent (when not nil) is in the index when the block enters it, so the
//    chain of any stored block resolves to the root (except with a sliding window, whose
//    released blocks may leave a parent evicted: see BlockManager::set_event_recorder);
//  - every BlockRemoved hash is one stored earlier and not removed since;
//  - replaying the events gives exactly the BlockManager's index (cached_block_hashes()).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <variant>
#include <vector>

#include "cache/block_hash.h"

namespace pagedserve::cache {

// Full blocks that entered the index, in chain order: block_hashes[k]'s parent is
// block_hashes[k - 1], block_hashes[0]'s is `parent` (nullopt: a sequence's first block).
struct KvBlockStored {
  std::vector<BlockHash> block_hashes;
  std::optional<BlockHash> parent;
  std::vector<int32_t> token_ids;  // block_size per block, block after block
};

// Hashes that left the index (their block was evicted: reused for other tokens).
struct KvBlockRemoved {
  std::vector<BlockHash> block_hashes;
};

// Every block left the cache (the engine reset its KV memory after a failure).
struct KvAllBlocksCleared {};

using KvCacheEvent = std::variant<KvBlockStored, KvBlockRemoved, KvAllBlocksCleared>;

// The buffer a BlockManager records into. Consecutive stores that continue one chain merge into
// one KvBlockStored, and consecutive removals into one KvBlockRemoved (vLLM's batching), so a
// prompt of 100 blocks is one event, not 100. Lives on its BlockManager's thread.
class KvEventRecorder {
 public:
  void block_stored(const BlockHash& hash, const std::optional<BlockHash>& parent,
                    std::span<const int32_t> token_ids);
  void block_removed(const BlockHash& hash);
  void all_blocks_cleared();
  // The whole cache is dropped (a reset): a removal of every hash still `indexed`, then
  // AllBlocksCleared, so a consumer that ignores AllBlocksCleared (llm-d's indexer does) still
  // forgets every block.
  void cache_cleared(std::span<const BlockHash> indexed);

  bool empty() const { return events_.empty(); }
  const std::vector<KvCacheEvent>& events() const { return events_; }
  // The events recorded since the last take(), oldest first; leaves the recorder empty.
  std::vector<KvCacheEvent> take();

 private:
  std::vector<KvCacheEvent> events_;
};

}  // namespace pagedserve::cache
