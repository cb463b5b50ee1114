// PagedKvAllocator: the KvAllocator over the PagedAttention BlockManager (blocks taken on
// demand, shared by forks with copy-on-write, prefix caching, swap). A thin adapter: the
// BlockManager decides everything; this class only answers the scheduler's planning questions
// and keeps the list of live sequences for the memory accounting. Lives on its owner's thread
// (the prefix-cache actor's, or the synchronous Scheduler's).
#pragma once

#include <unordered_set>

#include "cache/kv_allocator.h"

namespace pagedserve::cache {

class PagedKvAllocator final : public KvAllocator {
 public:
  explicit PagedKvAllocator(const BlockManagerConfig& config) : blocks_(config) {}

  KvAllocatorKind kind() const override { return KvAllocatorKind::kPaged; }
  int block_size() const override { return blocks_.block_size(); }
  int watermark_blocks() const override { return blocks_.watermark_blocks(); }

  AllocStatus check_admission(std::span<const int32_t> tokens,
                              const SeqReservation& future) const override;
  int cached_prefix_tokens(std::span<const int32_t> tokens) const override;
  int max_end_tokens(SeqId seq, bool held, int max_blocks,
                     const SeqReservation& future) const override;
  int blocks_to_hold(SeqId seq, bool held, int end, const SeqReservation& future) const override;
  bool reserves_ahead() const override { return false; }
  bool reserve(SeqId, const SeqReservation&) override { return true; }
  void release_group(uint64_t) override {}

  AllocationResult allocate(SeqId seq, std::span<const int32_t> tokens) override;
  std::vector<BlockCopy> append_token(SeqId seq, int32_t token) override;
  std::vector<BlockCopy> append_pending_token(SeqId seq) override {
    return blocks_.append_pending_token(seq);
  }
  void resolve_pending_token(SeqId seq, int32_t token) override {
    blocks_.resolve_pending_token(seq, token);
  }
  bool has_pending_token(SeqId seq) const override { return blocks_.has_pending_token(seq); }
  bool supports_speculation() const override { return true; }
  std::vector<BlockCopy> append_speculative_token(SeqId seq, int32_t token) override {
    return blocks_.append_speculative_token(seq, token);
  }
  int settle_speculative_tokens(SeqId seq, int num_accepted,
                                std::span<const int32_t> accepted_tokens, int num_later) override {
    return blocks_.settle_speculative_tokens(seq, num_accepted, accepted_tokens, num_later);
  }
  int release_blocks_before_window(SeqId seq) override {
    return blocks_.release_blocks_before_window(seq);
  }
  std::vector<BlockCopy> fork(SeqId parent, SeqId child) override;
  void free(SeqId seq) override;
  std::vector<BlockCopy> swap_out(SeqId seq) override { return blocks_.swap_out(seq); }
  std::vector<BlockCopy> swap_in(SeqId seq) override { return blocks_.swap_in(seq); }

  bool has_sequence(SeqId seq) const override { return blocks_.has_sequence(seq); }
  std::span<const BlockId> block_table(SeqId seq) const override {
    return blocks_.block_table(seq);
  }
  std::span<const BlockId> cpu_block_table(SeqId seq) const override {
    return blocks_.cpu_block_table(seq);
  }
  int num_tokens(SeqId seq) const override { return blocks_.num_tokens(seq); }
  int num_total_device_blocks() const override { return blocks_.num_total_device_blocks(); }
  int num_free_device_blocks() const override { return blocks_.num_free_device_blocks(); }
  int num_used_device_blocks() const override { return blocks_.num_used_device_blocks(); }
  int num_free_cpu_blocks() const override { return blocks_.num_free_cpu_blocks(); }
  int64_t prefix_cache_hits_tokens() const override { return blocks_.prefix_cache_hits_tokens(); }
  KvMemoryBreakdown memory_breakdown() const override;
  int64_t num_logical_blocks() const override;
  const BlockManager* block_manager() const override { return &blocks_; }
  void set_event_recorder(KvEventRecorder* recorder) override {
    blocks_.set_event_recorder(recorder);
  }
  std::vector<BlockHash> cached_block_hashes() const override {
    return blocks_.cached_block_hashes();
  }

 private:
  BlockManager blocks_;
  std::unordered_set<SeqId> live_;  // sequences the manager knows, on the device or swapped
};

}  // namespace pagedserve::cache
