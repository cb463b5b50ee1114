// BlockPool and its intrusive FreeBlockQueue (see block_pool.h for the eviction order).
#include "cache/block_pool.h"

#include <cassert>
#include <stdexcept>

namespace pagedserve::cache {

// ---- FreeBlockQueue ----

void FreeBlockQueue::push_front(BlockId id) {
  Block& b = (*blocks_)[id];
  assert(!b.in_free_queue);
  b.prev_free = kNoBlock;
  b.next_free = head_;
  if (head_ != kNoBlock) (*blocks_)[head_].prev_free = id;
  head_ = id;
  if (tail_ == kNoBlock) tail_ = id;
  b.in_free_queue = true;
  ++size_;
}

void FreeBlockQueue::push_back(BlockId id) {
  Block& b = (*blocks_)[id];
  assert(!b.in_free_queue);
  b.next_free = kNoBlock;
  b.prev_free = tail_;
  if (tail_ != kNoBlock) (*blocks_)[tail_].next_free = id;
  tail_ = id;
  if (head_ == kNoBlock) head_ = id;
  b.in_free_queue = true;
  ++size_;
}

BlockId FreeBlockQueue::pop_front() {
  assert(!empty());
  const BlockId id = head_;
  remove(id);
  return id;
}

void FreeBlockQueue::remove(BlockId id) {
  Block& b = (*blocks_)[id];
  assert(b.in_free_queue);
  if (b.prev_free != kNoBlock) {
    (*blocks_)[b.prev_free].next_free = b.next_free;
  } else {
    head_ = b.next_free;
  }
  if (b.next_free != kNoBlock) {
    (*blocks_)[b.next_free].prev_free = b.prev_free;
  } else {
    tail_ = b.prev_free;
  }
  b.prev_free = kNoBlock;
  b.next_free = kNoBlock;
  b.in_free_queue = false;
  --size_;
}

std::vector<BlockId> FreeBlockQueue::ids() const {
  std::vector<BlockId> out;
  out.reserve(size_);
  for (BlockId id = head_; id != kNoBlock; id = (*blocks_)[id].next_free) out.push_back(id);
  return out;
}

// ---- BlockPool ----

BlockPool::BlockPool(int num_blocks, bool enable_caching)
    : blocks_(static_cast<size_t>(num_blocks < 0 ? 0 : num_blocks)),
      free_queue_(blocks_),
      enable_caching_(enable_caching) {
  for (BlockId id = 0; id < this->num_blocks(); ++id) {
    blocks_[id].id = id;
    free_queue_.push_back(id);
  }
}

BlockId BlockPool::allocate(int num_tokens) {
  if (free_queue_.empty()) throw std::runtime_error("BlockPool: no free block");
  const BlockId id = free_queue_.pop_front();
  Block& b = blocks_[id];
  if (b.has_hash) {  // evict: the block's cached prefix is gone from now on
    if (events_ != nullptr) events_->block_removed(b.hash);
    index_.erase(b.hash);
    b.has_hash = false;
    --num_cached_free_;
    ++num_evictions_;
  }
  b.ref_count = 1;
  b.num_tokens = num_tokens;
  num_stored_tokens_ += num_tokens;
  return id;
}

void BlockPool::acquire(BlockId id) {
  Block& b = blocks_[id];
  if (b.ref_count == 0) {
    free_queue_.remove(id);
    if (b.has_hash) --num_cached_free_;
    num_stored_tokens_ += b.num_tokens;
  }
  ++b.ref_count;
}

bool BlockPool::release(BlockId id) {
  Block& b = blocks_[id];
  assert(b.ref_count > 0);
  if (--b.ref_count > 0) return false;
  num_stored_tokens_ -= b.num_tokens;
  if (b.has_hash) {
    free_queue_.push_back(id);
    ++num_cached_free_;
  } else {
    free_queue_.push_front(id);
  }
  return true;
}

void BlockPool::set_num_tokens(BlockId id, int num_tokens) {
  Block& b = blocks_[id];
  assert(b.ref_count > 0);
  num_stored_tokens_ += num_tokens - b.num_tokens;
  b.num_tokens = num_tokens;
}

bool BlockPool::cache(BlockId id, const BlockHash& hash) {
  Block& b = blocks_[id];
  assert(b.ref_count > 0 && !b.has_hash);
  if (!enable_caching_) return false;
  if (!index_.emplace(hash, id).second) return false;
  b.has_hash = true;
  b.hash = hash;
  return true;
}

std::optional<BlockId> BlockPool::lookup(const BlockHash& hash) const {
  auto it = index_.find(hash);
  if (it == index_.end()) return std::nullopt;
  return it->second;
}

std::vector<BlockHash> BlockPool::hashes() const {
  std::vector<BlockHash> out;
  out.reserve(index_.size());
  for (const auto& [hash, id] : index_) out.push_back(hash);
  return out;
}

std::string BlockPool::check_invariants() const {
  const std::vector<BlockId> queued = free_queue_.ids();
  if (static_cast<int>(queued.size()) != free_queue_.size()) return "free queue size mismatch";
  BlockId prev = kNoBlock;
  for (BlockId id : queued) {
    const Block& b = blocks_[id];
    if (!b.in_free_queue) return "block " + std::to_string(id) + " queued but not flagged";
    if (b.prev_free != prev) return "free queue back link broken at " + std::to_string(id);
    prev = id;
  }
  if (prev != free_queue_.back()) return "free queue tail mismatch";
  int flagged = 0, cached_free = 0, hashed = 0;
  int64_t stored = 0;
  for (const Block& b : blocks_) {
    if (b.in_free_queue) ++flagged;
    if (b.in_free_queue != (b.ref_count == 0)) {
      return "block " + std::to_string(b.id) + " has ref_count " + std::to_string(b.ref_count) +
             (b.in_free_queue ? " but is free" : " but is not free");
    }
    if (b.ref_count < 0) return "negative ref_count on block " + std::to_string(b.id);
    if (b.has_hash) {
      ++hashed;
      if (b.in_free_queue) ++cached_free;
      auto it = index_.find(b.hash);
      if (it == index_.end() || it->second != b.id) {
        return "block " + std::to_string(b.id) + " has a hash the index does not map to it";
      }
    }
    if (b.ref_count > 0) stored += b.num_tokens;
  }
  if (flagged != free_queue_.size()) return "in_free_queue flags disagree with the queue";
  if (hashed != static_cast<int>(index_.size())) return "index holds entries for unhashed blocks";
  if (cached_free != num_cached_free_) return "cached-free count mismatch";
  if (stored != num_stored_tokens_) return "stored-token count mismatch";
  if (!enable_caching_ && hashed != 0) return "hashed blocks with caching disabled";
  return {};
}

}  // namespace pagedserve::cache
