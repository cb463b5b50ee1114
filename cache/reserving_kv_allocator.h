// The Orca-style baselines of the PagedAttention paper: every sequence gets one contiguous
// region of the block pool, reserved at admission for its whole future, from a first-fit
// allocator over the pool's block ids (so holes between regions are real, not modelled).
//  - reserve-max:    max_model_len tokens (the most a sequence can ever hold; Orca (Max));
//  - reserve-pow2:   prompt + the next power of two of the output length (Orca (Pow2));
//  - reserve-oracle: prompt + exactly the output length (Orca (Oracle)).
// With BlockManagerConfig::buddy_regions a region is rounded up to a power of two of blocks and
// aligned to its size: the buddy allocation the paper's own Orca implementation assumed.
// The output length is the request's true length when the scheduler was told it (a trace's
// hint), else its max_tokens. A sequence never grows beyond its region: if it would (a hint
// shorter than what the model generates), the scheduler preempts it, and it is readmitted with
// a region for prompt + max_tokens. There is no sharing: a fork copies the parent's region,
// and a group with several sequences reserves a region for each at admission (parallel
// sampling: best_of; beam search: 2 * width - 1, because beams fork before the losers free).
// There is no swap space: preemption recomputes. Pure logic; lives on its owner's thread.
#pragma once

#include <map>
#include <optional>
#include <unordered_map>
#include <vector>

#include "cache/kv_allocator.h"

namespace pagedserve::cache {

// A run of consecutive block ids.
struct Region {
  BlockId start = 0;
  int num_blocks = 0;
  friend bool operator==(const Region&, const Region&) = default;
};

// First-fit allocation of block runs from [0, num_blocks): the lowest-addressed hole that is
// large enough is split; freed runs merge with free neighbours. With an alignment, a run
// starts at a multiple of it (power-of-two runs aligned to their size: a buddy allocator's
// placement, whose coalescing makes every free aligned run available).
class FirstFitRegions {
 public:
  explicit FirstFitRegions(int num_blocks);

  // nullopt when no hole holds num_blocks starting at a multiple of alignment.
  std::optional<Region> allocate(int num_blocks, int alignment = 1);
  // Throws std::logic_error when the run is not wholly allocated.
  void free(Region region);

  int num_blocks() const { return num_blocks_; }
  int num_free_blocks() const { return num_free_; }
  int largest_hole() const;
  bool fits(int num_blocks, int alignment = 1) const;
  // The holes in address order (tests).
  std::vector<Region> holes() const;

 private:
  int num_blocks_;
  int num_free_;
  std::map<BlockId, int> holes_;  // start -> length, disjoint and never adjacent
};

class ReservingKvAllocator final : public KvAllocator {
 public:
  ReservingKvAllocator(KvAllocatorKind kind, const BlockManagerConfig& config);

  KvAllocatorKind kind() const override { return kind_; }
  int block_size() const override { return block_size_; }
  int watermark_blocks() const override { return watermark_blocks_; }

  // The region's size in tokens for this policy (at least current_len, at most max_model_len
  // when that is set).
  int region_tokens(const SeqReservation& future) const;

  AllocStatus check_admission(std::span<const int32_t> tokens,
                              const SeqReservation& future) const override;
  int cached_prefix_tokens(std::span<const int32_t>) const override { return 0; }
  int max_end_tokens(SeqId seq, bool held, int max_blocks,
                     const SeqReservation& future) const override;
  int blocks_to_hold(SeqId seq, bool held, int end, const SeqReservation& future) const override;
  bool reserves_ahead() const override { return true; }
  bool reserve(SeqId seq, const SeqReservation& future) override;
  void release_group(uint64_t group) override;

  AllocationResult allocate(SeqId seq, std::span<const int32_t> tokens) override;
  std::vector<BlockCopy> append_token(SeqId seq, int32_t token) override;
  // No prefix cache, so nothing waits for the token's value.
  std::vector<BlockCopy> append_pending_token(SeqId seq) override { return append_token(seq, 0); }
  void resolve_pending_token(SeqId, int32_t) override {}
  bool has_pending_token(SeqId) const override { return false; }
  std::vector<BlockCopy> fork(SeqId parent, SeqId child) override;
  void free(SeqId seq) override;
  std::vector<BlockCopy> swap_out(SeqId seq) override;
  std::vector<BlockCopy> swap_in(SeqId seq) override;

  bool has_sequence(SeqId seq) const override;
  std::span<const BlockId> block_table(SeqId seq) const override;
  std::span<const BlockId> cpu_block_table(SeqId seq) const override;
  int num_tokens(SeqId seq) const override;
  int num_total_device_blocks() const override { return regions_.num_blocks(); }
  int num_free_device_blocks() const override { return regions_.num_free_blocks(); }
  int num_used_device_blocks() const override {
    return regions_.num_blocks() - regions_.num_free_blocks();
  }
  int num_free_cpu_blocks() const override { return 0; }
  int64_t prefix_cache_hits_tokens() const override { return 0; }
  KvMemoryBreakdown memory_breakdown() const override;
  int64_t num_logical_blocks() const override;

  // The region a sequence holds (tests); nullopt when unknown.
  std::optional<Region> region_of(SeqId seq) const;
  // Spare regions a group keeps for its future forks (tests).
  int num_spare_regions(uint64_t group) const;

 private:
  struct SeqRegion {
    Region region;
    uint64_t group = 0;
    int num_tokens = 0;
    int final_tokens = 0;    // slots the sequence will hold at its end; 0 when unknown
    bool allocated = false;  // false between reserve() and allocate()
    std::vector<BlockId> table;
  };
  struct Group {
    std::vector<Region> spares;
    int final_tokens = 0;
  };

  int blocks_for(int64_t num_tokens) const {
    return static_cast<int>((num_tokens + block_size_ - 1) / block_size_);
  }
  // Blocks of the region reserved for `future` (a power of two under buddy allocation).
  int region_blocks(const SeqReservation& future) const;
  int alignment(int region_blocks) const { return buddy_ ? region_blocks : 1; }
  SeqRegion& known(SeqId seq, const char* op);
  const SeqRegion& known(SeqId seq, const char* op) const;
  void place(SeqId seq, Region region, uint64_t group, int final_tokens);

  KvAllocatorKind kind_;
  bool buddy_;
  int block_size_;
  int watermark_blocks_;
  FirstFitRegions regions_;
  std::unordered_map<SeqId, SeqRegion> seqs_;
  std::unordered_map<uint64_t, Group> groups_;
};

}  // namespace pagedserve::cache
