// BlockPool: one pool of fixed-size KV blocks (the device pool or the CPU swap pool). Owns the
// block records (reference count, fill, hash), the free queue whose order is the eviction
// order, and the prefix-cache index (hash -> block). It knows nothing about sequences: the
// BlockManager decides which blocks a sequence holds. Lives on the BlockManager's thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "cache/block_hash.h"
#include "cache/block_types.h"
#include "cache/kv_cache_events.h"

namespace pagedserve::cache {

inline constexpr BlockId kNoBlock = -1;

// One physical block. A block is in exactly one state: free (ref_count == 0, in the free
// queue, maybe still holding a hash = "cached-free") or used (ref_count > 0, not queued).
struct Block {
  BlockId id = kNoBlock;
  int ref_count = 0;             // number of block tables holding this block
  int num_tokens = 0;            // filled slots (0..block_size); meaningful while used
  bool has_hash = false;         // true iff the block is the prefix-cache index's entry for `hash`
  BlockHash hash;                // valid when has_hash
  BlockId prev_free = kNoBlock;  // free-queue links, intrusive so removal is O(1)
  BlockId next_free = kNoBlock;
  bool in_free_queue = false;
};

// FreeBlockQueue: an intrusive doubly linked list of free blocks threaded through Block's
// prev_free/next_free, so push, pop and removal from the middle (a prefix hit on a cached-free
// block) are O(1) with no allocation.
//
// Eviction order: allocation always takes the FRONT. Blocks that hold no hash are pushed to
// the front (they are worthless, so they are reused before any cached block is evicted);
// blocks that keep a hash are pushed to the back when freed, so the cached-free part of the
// queue runs from least to most recently freed: least-recently-used first. The BlockManager
// frees a sequence's blocks tail first, so among one sequence's blocks the tail (the longest,
// least shareable prefix) is evicted before its parents.
class FreeBlockQueue {
 public:
  explicit FreeBlockQueue(std::vector<Block>& blocks) : blocks_(&blocks) {}

  int size() const { return size_; }
  bool empty() const { return size_ == 0; }
  BlockId front() const { return head_; }
  BlockId back() const { return tail_; }

  void push_front(BlockId id);
  void push_back(BlockId id);
  BlockId pop_front();      // precondition: !empty()
  void remove(BlockId id);  // precondition: id is queued

  // The queued ids, front to back (tests and invariant checks; O(size)).
  std::vector<BlockId> ids() const;

 private:
  std::vector<Block>* blocks_;
  BlockId head_ = kNoBlock;
  BlockId tail_ = kNoBlock;
  int size_ = 0;
};

class BlockPool {
 public:
  // All blocks start free, queued in id order. With `enable_caching` false nothing is hashed.
  BlockPool(int num_blocks, bool enable_caching);
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  // ---- counts (all O(1)) ----
  int num_blocks() const { return static_cast<int>(blocks_.size()); }
  int num_free_blocks() const { return free_queue_.size(); }  // includes cached-free
  int num_used_blocks() const { return num_blocks() - num_free_blocks(); }
  int num_cached_free_blocks() const { return num_cached_free_; }
  int num_hashed_blocks() const { return static_cast<int>(index_.size()); }
  int64_t num_stored_tokens() const { return num_stored_tokens_; }  // over used blocks
  int64_t num_evictions() const { return num_evictions_; }
  bool caching_enabled() const { return enable_caching_; }

  const Block& block(BlockId id) const { return blocks_[id]; }
  const FreeBlockQueue& free_queue() const { return free_queue_; }

  // ---- ownership ----
  // Takes the front of the free queue (evicting its hash, if any) with ref_count 1 and
  // `num_tokens` filled slots. Throws std::runtime_error when no block is free.
  BlockId allocate(int num_tokens);
  // One more holder: ref_count + 1, leaving the free queue if the block was free (a prefix hit).
  void acquire(BlockId id);
  // One holder fewer. Returns true when the block became free (ref_count reached 0).
  bool release(BlockId id);
  void set_num_tokens(BlockId id, int num_tokens);

  // ---- prefix-cache index ----
  // Registers a used, full block under `hash`. Returns false (and changes nothing) when caching
  // is off or another block already holds that hash: the first one stays the shared copy.
  bool cache(BlockId id, const BlockHash& hash);
  std::optional<BlockId> lookup(const BlockHash& hash) const;
  // Every hash in the index (any order; O(hashed blocks)).
  std::vector<BlockHash> hashes() const;
  // Evictions (allocate taking a cached-free block) are recorded there as removals; null: none.
  // The BlockManager records the stores itself (it knows the parents and the tokens).
  void set_event_recorder(KvEventRecorder* recorder) { events_ = recorder; }

  // Empty when the pool's own structures agree (queue links, counts, index); else a message.
  std::string check_invariants() const;

 private:
  std::vector<Block> blocks_;
  FreeBlockQueue free_queue_;
  std::unordered_map<BlockHash, BlockId, BlockHashHasher> index_;
  bool enable_caching_;
  KvEventRecorder* events_ = nullptr;
  int num_cached_free_ = 0;
  int64_t num_stored_tokens_ = 0;
  int64_t num_evictions_ = 0;
};

}  // namespace pagedserve::cache
