// PagedKvMirror: the scheduler's own view of the paged allocator's memory, which it plans from
// while the real BlockManager (and its prefix cache) lives elsewhere (the PrefixCacheActor).
// Per sequence: tokens and blocks held (device or CPU table), whether a token is pending; per
// block: how many mirrored tables hold it (so "the last block is shared" and "freeing this
// sequence returns these blocks" are exact); plus the free device/CPU block counts.
//
// Exact after every reply: reconcile() takes the tables of every sequence the op list touched
// and the pool snapshot. Between replies the scheduler applies each op it emits to the mirror
// as well (through the same KvMemoryApplier), and the mirror changes conservatively: it never
// counts a block as free that the real allocator would not have free.
//  - fork / free / resolve / append on a known table: exact (same reference counting).
//  - allocate: takes blocks for every token handed to it (no prefix hits: the mirror has no
//    cache, so cached_prefix_tokens() is 0), an upper bound; its blocks get placeholder ids.
//  - swap_out / swap_in: take a new CPU / device block for every distinct block (the real
//    manager may reuse a still-valid twin or prefix-cache entry); placeholder ids again.
//  - release_blocks_before_window: exact (the same arithmetic over the same table shape).
//  - append_speculative_token / settle_speculative_tokens: exact (the truncated tail's blocks,
//    held by this table alone, go back).
// Placeholder ids are negative, so they never collide with real ones, and below kNoBlock (a
// sliding window's released entry, which holds nothing); reconcile() replaces every one (each
// belongs to a sequence the list touched).
// Not memory_breakdown()/num_logical_blocks(): metrics read the real allocator's snapshot.
// Pure logic; lives on the scheduler's thread.
#pragma once

#include <unordered_map>
#include <vector>

#include "cache/kv_allocator.h"
#include "cache/kv_memory_ops.h"

namespace pagedserve::cache {

class PagedKvMirror final : public KvAllocator {
 public:
  explicit PagedKvMirror(const BlockManagerConfig& config);

  // The real allocator's state after an op list (see the class comment).
  void reconcile(const KvMemoryResult& result);

  KvAllocatorKind kind() const override { return KvAllocatorKind::kPaged; }
  int block_size() const override { return block_size_; }
  int watermark_blocks() const override { return watermark_blocks_; }

  AllocStatus check_admission(std::span<const int32_t> tokens,
                              const SeqReservation& future) const override;
  int cached_prefix_tokens(std::span<const int32_t>) const override { return 0; }
  int max_end_tokens(SeqId seq, bool held, int max_blocks,
                     const SeqReservation& future) const override;
  int blocks_to_hold(SeqId seq, bool held, int end, const SeqReservation& future) const override;
  bool reserves_ahead() const override { return false; }
  bool reserve(SeqId, const SeqReservation&) override { return true; }
  void release_group(uint64_t) override {}

  AllocationResult allocate(SeqId seq, std::span<const int32_t> tokens) override;
  std::vector<BlockCopy> append_token(SeqId seq, int32_t token) override;
  std::vector<BlockCopy> append_pending_token(SeqId seq) override;
  void resolve_pending_token(SeqId seq, int32_t token) override;
  bool has_pending_token(SeqId seq) const override;
  int release_blocks_before_window(SeqId seq) override;
  bool supports_speculation() const override { return true; }
  std::vector<BlockCopy> append_speculative_token(SeqId seq, int32_t token) override;
  int settle_speculative_tokens(SeqId seq, int num_accepted,
                                std::span<const int32_t> accepted_tokens, int num_later) override;
  std::vector<BlockCopy> fork(SeqId parent, SeqId child) override;
  void free(SeqId seq) override;
  std::vector<BlockCopy> swap_out(SeqId seq) override;
  std::vector<BlockCopy> swap_in(SeqId seq) override;

  bool has_sequence(SeqId seq) const override { return seqs_.count(seq) != 0; }
  std::span<const BlockId> block_table(SeqId seq) const override;
  std::span<const BlockId> cpu_block_table(SeqId seq) const override;
  int num_tokens(SeqId seq) const override;
  int num_total_device_blocks() const override { return num_device_blocks_; }
  int num_free_device_blocks() const override { return num_free_device_; }
  int num_used_device_blocks() const override { return num_device_blocks_ - num_free_device_; }
  int num_free_cpu_blocks() const override { return num_free_cpu_; }
  int64_t prefix_cache_hits_tokens() const override { return prefix_hits_tokens_; }
  KvMemoryBreakdown memory_breakdown() const override { return {}; }
  int64_t num_logical_blocks() const override { return 0; }

 private:
  struct Seq {
    std::vector<BlockId> blocks;  // device ids, or CPU ids while swapped
    int num_tokens = 0;
    bool swapped = false;
    bool pending = false;
    int num_speculative = 0;  // trailing proposed tokens not settled yet
  };
  Seq& known(SeqId seq, const char* op);
  const Seq& known(SeqId seq, const char* op) const;
  // Copy-on-write before the next write: the last block is partly filled and shared.
  bool last_block_shared(const Seq& s) const;
  std::vector<BlockCopy> append_slot(SeqId seq, bool pending);
  BlockId new_device_block();
  BlockId new_cpu_block();
  void hold(const Seq& s);
  void release(const Seq& s);

  int block_size_;
  int watermark_blocks_;
  int sliding_window_;
  int num_device_blocks_;
  int num_free_device_ = 0;
  int num_free_cpu_ = 0;
  int64_t prefix_hits_tokens_ = 0;
  std::unordered_map<SeqId, Seq> seqs_;
  std::unordered_map<BlockId, int> device_refs_;  // tables holding each device block
  std::unordered_map<BlockId, int> cpu_refs_;
  // Within one op list: a block swapped out (in) by one sharer is not counted again for the
  // next sharer; its placeholder twin is reused.
  std::unordered_map<BlockId, BlockId> cpu_twin_;
  std::unordered_map<BlockId, BlockId> device_twin_;
  BlockId next_placeholder_ = kNoBlock - 1;
};

}  // namespace pagedserve::cache
