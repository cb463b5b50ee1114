// PagedKvAllocator: planning arithmetic over the BlockManager's blocks, and its accounting.
#include "cache/paged_kv_allocator.h"

#include "cache/reserving_kv_allocator.h"

namespace pagedserve::cache {
namespace {

int blocks_for(int64_t num_tokens, int block_size) {
  return static_cast<int>((num_tokens + block_size - 1) / block_size);
}

}  // namespace

AllocStatus PagedKvAllocator::check_admission(std::span<const int32_t> tokens,
                                              const SeqReservation&) const {
  return blocks_.check_allocate(tokens);
}

int PagedKvAllocator::cached_prefix_tokens(std::span<const int32_t> tokens) const {
  return blocks_.cached_prefix_tokens(tokens);
}

// A new sequence: any max_blocks blocks hold max_blocks * block_size tokens (prefix hits are
// counted as taken: a cached-free hit leaves the free queue). A held one: the rest of its last
// block, plus whole blocks, less one block for the copy-on-write of a shared partial last block.
int PagedKvAllocator::max_end_tokens(SeqId seq, bool held, int max_blocks,
                                     const SeqReservation&) const {
  const int bs = blocks_.block_size();
  if (!held) return max_blocks * bs;
  const int start = blocks_.num_tokens(seq);
  const auto table = blocks_.block_table(seq);
  const int cow = start % bs != 0 && blocks_.device_ref_count(table.back()) > 1 ? 1 : 0;
  return max_blocks < cow ? 0 : (blocks_for(start, bs) + max_blocks - cow) * bs;
}

int PagedKvAllocator::blocks_to_hold(SeqId seq, bool held, int end, const SeqReservation&) const {
  const int bs = blocks_.block_size();
  if (!held) return blocks_for(end, bs);
  const int start = blocks_.num_tokens(seq);
  const auto table = blocks_.block_table(seq);
  const int cow = start % bs != 0 && blocks_.device_ref_count(table.back()) > 1 ? 1 : 0;
  return cow + blocks_for(end, bs) - blocks_for(start, bs);
}

AllocationResult PagedKvAllocator::allocate(SeqId seq, std::span<const int32_t> tokens) {
  AllocationResult result = blocks_.allocate(seq, tokens);
  live_.insert(seq);
  return result;
}

std::vector<BlockCopy> PagedKvAllocator::append_token(SeqId seq, int32_t token) {
  return blocks_.append_token(seq, token);
}

std::vector<BlockCopy> PagedKvAllocator::fork(SeqId parent, SeqId child) {
  blocks_.fork(parent, child);
  live_.insert(child);
  return {};
}

void PagedKvAllocator::free(SeqId seq) {
  blocks_.free(seq);
  live_.erase(seq);
}

KvMemoryBreakdown PagedKvAllocator::memory_breakdown() const {
  const BlockManagerStats stats = blocks_.stats();
  KvMemoryBreakdown out;
  const int64_t bs = blocks_.block_size();
  out.total_slots = int64_t{stats.num_total_device_blocks} * bs;
  out.token_slots = stats.num_stored_tokens;
  out.internal_fragment_slots = stats.num_reserved_slots - stats.num_stored_tokens;
  out.free_slots = int64_t{stats.num_free_device_blocks} * bs;
  return out;
}

int64_t PagedKvAllocator::num_logical_blocks() const {
  int64_t total = 0;
  for (SeqId seq : live_) {
    if (blocks_.is_swapped(seq)) continue;
    for (BlockId id : blocks_.block_table(seq)) total += id != kNoBlock ? 1 : 0;
  }
  return total;
}

}  // namespace pagedserve::cache

namespace pagedserve::cache {

std::unique_ptr<KvAllocator> make_kv_allocator(KvAllocatorKind kind,
                                               const BlockManagerConfig& config) {
  if (kind == KvAllocatorKind::kPaged) return std::make_unique<PagedKvAllocator>(config);
  return std::make_unique<ReservingKvAllocator>(kind, config);
}

}  // namespace pagedserve::cache
