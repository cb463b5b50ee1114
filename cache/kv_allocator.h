// KvAllocator: the interface through which the scheduler manages KV memory, so that the same
// scheduler can run over different memory managers (`--kv-allocator`):
//  - paged (PagedKvAllocator): the PagedAttention BlockManager, blocks taken on demand;
//  - reserve-max / reserve-pow2 / reserve-oracle (ReservingKvAllocator): Orca-style baselines
//    that give each sequence one contiguous region of the same block pool, reserved at
//    admission, taken from a first-fit allocator (so external fragmentation is real).
// Pure logic: no threads, no I/O; lives on the thread of its owner (the prefix-cache actor in the
// async engine, the Scheduler in the synchronous one). BlockManager's own interface
// is unchanged: the paged allocator wraps it.
//
// Reservation contract: a region allocator must take a whole region when the scheduler decides
// to admit a sequence (planning), not when allocate() runs later in the step, or two
// admissions planned in one step could both be promised the same hole. The scheduler calls
// reserve() for every sequence its plan allocates, before carrying the plan out; the paged
// allocator takes nothing there. When the allocator lives in the prefix-cache actor the
// scheduler asks a replica (a reserving allocator's state is a pure function of its calls) and
// the step's memory-op list repeats the reservation (cache/kv_memory_ops.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "cache/block_manager.h"
#include "cache/block_types.h"

namespace pagedserve::cache {

// max_blocks meaning "no limit": a sequence that can only grow beyond its region asks for this
// many blocks, so the scheduler preempts (a region cannot grow in place).
inline constexpr int kUnboundedBlocks = 1 << 20;

enum class KvAllocatorKind { kPaged, kReserveMax, kReservePow2, kReserveOracle };

// "paged", "reserve-max", "reserve-pow2", "reserve-oracle".
const char* kv_allocator_name(KvAllocatorKind kind);
// Throws std::invalid_argument naming the known allocators for anything else.
KvAllocatorKind parse_kv_allocator(std::string_view name);

// What the scheduler knows about a sequence's future, for allocators that reserve ahead.
struct SeqReservation {
  uint64_t group = 0;       // the request id: sequences of one group share spare regions
  int prompt_len = 0;       // the request's prompt (without generated tokens)
  int current_len = 0;      // tokens the sequence has now (prompt + tokens generated so far)
  int max_output_len = 0;   // the request's max_tokens
  int output_len_hint = 0;  // its true output length when known (a trace), else 0
  int max_model_len = 0;    // the engine's context limit
  int num_regions = 1;      // regions the group may hold at once (best_of; 2 * width - 1 beams)
};

// Where the device pool's token slots are, at one instant. The five parts sum to total_slots.
struct KvMemoryBreakdown {
  int64_t total_slots = 0;
  int64_t token_slots = 0;     // holding a token's K/V (shared slots counted once)
  int64_t reserved_slots = 0;  // held by a sequence for tokens it will still generate
  // Held but never to be used: the unused tail of a partly filled block (paged), or of a
  // region larger than the sequence will grow (reserve-*). Without a hint about the true
  // output length a reserve-* allocator counts a region's unfilled slots as reserved.
  int64_t internal_fragment_slots = 0;
  // Free slots no waiting request can use: for the region allocators, the free slots outside
  // the largest free hole; always 0 for paged (any free block serves any sequence).
  int64_t external_fragment_slots = 0;
  int64_t free_slots = 0;  // the rest: free and usable
};

class KvAllocator {
 public:
  virtual ~KvAllocator() = default;
  virtual KvAllocatorKind kind() const = 0;
  virtual int block_size() const = 0;
  virtual int watermark_blocks() const = 0;

  // ---- admission and planning ----
  // kNever when the sequence could not be admitted even into an empty pool.
  virtual AllocStatus check_admission(std::span<const int32_t> tokens,
                                      const SeqReservation& future) const = 0;
  // Prompt tokens allocate() would find in a prefix cache (0 without one).
  virtual int cached_prefix_tokens(std::span<const int32_t> tokens) const = 0;
  // The most tokens a sequence may hold after this step if it may take `max_blocks` more
  // blocks: `held` is whether it holds blocks already (else it is allocated this step).
  virtual int max_end_tokens(SeqId seq, bool held, int max_blocks,
                             const SeqReservation& future) const = 0;
  // Blocks the sequence takes to hold `end` tokens (an upper bound, copy-on-write included).
  virtual int blocks_to_hold(SeqId seq, bool held, int end, const SeqReservation& future) const = 0;
  // Whether reserve() takes the memory (then the plan's blocks are no longer pending).
  virtual bool reserves_ahead() const = 0;
  // Takes the memory of a sequence the plan allocates this step; false when it fits nowhere
  // (the sequence must wait). Undone by free(). The paged allocator takes nothing here.
  virtual bool reserve(SeqId seq, const SeqReservation& future) = 0;
  // The group is finished or preempted: spare regions it kept go back to the pool.
  virtual void release_group(uint64_t group) = 0;

  // ---- sequence lifetime (as BlockManager) ----
  virtual AllocationResult allocate(SeqId seq, std::span<const int32_t> tokens) = 0;
  virtual std::vector<BlockCopy> append_token(SeqId seq, int32_t token) = 0;
  // Overlap scheduling (BlockManager::append_pending_token): the slot of a token the step in
  // flight has not sampled yet, named later by resolve_pending_token. Allocators without a
  // prefix cache have nothing to hash, so for them a pending token is an ordinary slot.
  virtual std::vector<BlockCopy> append_pending_token(SeqId seq) = 0;
  virtual void resolve_pending_token(SeqId seq, int32_t token) = 0;
  virtual bool has_pending_token(SeqId seq) const = 0;
  // Sliding windows (BlockManager::release_blocks_before_window): the next slot appended is the
  // earliest query of the step; blocks wholly before its window may go back to the pool, their
  // table entries becoming kNoBlock. The reserving allocators keep their regions: nothing.
  virtual int release_blocks_before_window(SeqId) { return 0; }
  // Speculative decoding (BlockManager::append_speculative_token / settle_speculative_tokens):
  // slots for proposed tokens, unhashed until the step's verification keeps the accepted ones
  // and truncates the rest. Only the paged allocator has them; the others throw.
  virtual bool supports_speculation() const { return false; }
  virtual std::vector<BlockCopy> append_speculative_token(SeqId, int32_t) {
    throw std::logic_error(std::string("speculative tokens need the paged KV allocator, not ") +
                           kv_allocator_name(kind()));
  }
  // num_later: slots of a step planned ahead that stay speculative (see BlockManager).
  virtual int settle_speculative_tokens(SeqId seq, int, std::span<const int32_t>, int) {
    append_speculative_token(seq, 0);  // throws the same error
    return 0;
  }
  // `child` gets `parent`'s tokens. Returns device copies the next step must run first (none
  // when the blocks are shared).
  virtual std::vector<BlockCopy> fork(SeqId parent, SeqId child) = 0;
  virtual void free(SeqId seq) = 0;
  virtual std::vector<BlockCopy> swap_out(SeqId seq) = 0;
  virtual std::vector<BlockCopy> swap_in(SeqId seq) = 0;

  // ---- queries ----
  virtual bool has_sequence(SeqId seq) const = 0;
  virtual std::span<const BlockId> block_table(SeqId seq) const = 0;
  virtual std::span<const BlockId> cpu_block_table(SeqId seq) const = 0;
  virtual int num_tokens(SeqId seq) const = 0;
  virtual int num_total_device_blocks() const = 0;
  virtual int num_free_device_blocks() const = 0;  // free in total, contiguous or not
  virtual int num_used_device_blocks() const = 0;
  virtual int num_free_cpu_blocks() const = 0;  // 0: preemption always recomputes
  virtual int64_t prefix_cache_hits_tokens() const = 0;
  virtual KvMemoryBreakdown memory_breakdown() const = 0;
  // Blocks the live sequences' tables name (released entries not counted), a shared block once
  // per table (what the same
  // sequences would hold without sharing) and distinct blocks held.
  virtual int64_t num_logical_blocks() const = 0;
  // The paged allocator's BlockManager; nullptr for the others.
  virtual const BlockManager* block_manager() const { return nullptr; }

  // ---- KV-cache events (cache/kv_cache_events.h) ----
  // Records the prefix-cache index's changes (BlockManager::set_event_recorder); allocators
  // without a prefix cache record nothing. Attach before the first allocate.
  virtual void set_event_recorder(KvEventRecorder*) {}
  // The hashes in the prefix-cache index (empty without one).
  virtual std::vector<BlockHash> cached_block_hashes() const { return {}; }
};

std::unique_ptr<KvAllocator> make_kv_allocator(KvAllocatorKind kind,
                                               const BlockManagerConfig& config);

}  // namespace pagedserve::cache
