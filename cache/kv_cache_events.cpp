// KvEventRecorder: records prefix-cache index changes, merging runs (see kv_cache_events.h).
#include "cache/kv_cache_events.h"

#include <utility>

namespace pagedserve::cache {

void KvEventRecorder::block_stored(const BlockHash& hash, const std::optional<BlockHash>& parent,
                                   std::span<const int32_t> token_ids) {
  if (!events_.empty() && parent) {
    if (auto* last = std::get_if<KvBlockStored>(&events_.back());
        last != nullptr && last->block_hashes.back() == *parent) {
      last->block_hashes.push_back(hash);
      last->token_ids.insert(last->token_ids.end(), token_ids.begin(), token_ids.end());
      return;
    }
  }
  events_.emplace_back(KvBlockStored{{hash}, parent, {token_ids.begin(), token_ids.end()}});
}

void KvEventRecorder::block_removed(const BlockHash& hash) {
  if (!events_.empty()) {
    if (auto* last = std::get_if<KvBlockRemoved>(&events_.back())) {
      last->block_hashes.push_back(hash);
      return;
    }
  }
  events_.emplace_back(KvBlockRemoved{{hash}});
}

void KvEventRecorder::all_blocks_cleared() { events_.emplace_back(KvAllBlocksCleared{}); }

void KvEventRecorder::cache_cleared(std::span<const BlockHash> indexed) {
  for (const BlockHash& hash : indexed) block_removed(hash);
  all_blocks_cleared();
}

std::vector<KvCacheEvent> KvEventRecorder::take() {
  std::vector<KvCacheEvent> out = std::move(events_);
  events_.clear();
  return out;
}

}  // namespace pagedserve::cache
