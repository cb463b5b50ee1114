// The scheduler's KV-memory protocol: one ordered list of memory operations per step
// (KvMemoryOps) and the one result of applying it to a KvAllocator (KvMemoryResult). The
// scheduler plans a step from its own view of memory (cache/paged_kv_mirror.h, or a replica for
// the reserving allocators) and emits the ops in the order it decided them: the forks, frees and
// pending-token resolutions its last update() made, then every swap_out (and recompute free),
// every swap_in, then allocate / append for the sequences the step runs (with a sliding window
// on every layer, each running sequence's appends come after a release_before_window op:
// BlockManager::release_blocks_before_window). Whoever owns the allocator (the synchronous
// LlmEngine's Scheduler, or the PrefixCacheActor) applies the list with KvMemoryApplier and
// returns the result: the copies the executor must run, what each new sequence found in the
// prefix cache, the block tables of the sequences touched, and a snapshot of the pool for the
// next plan and for metrics.
//
// Prefix hits are not known while planning: an allocate op carries the sequence's whole token
// list and the tokens the plan lets it compute; the applier looks the prefix up and hands the
// allocator [0, min(total, hits + compute, end_cap)), so the step computes what the cache did
// not serve (never more than planned) and takes no more blocks than planned (end_cap).
// A planner without the cache learns hits ahead of time with kProbePrefix: the applier answers
// with the allocator's cached_prefix_tokens at that point of the list (KvPrefixProbe), and the
// planner keeps it as a hint for a later step (only a hint: blocks may be evicted meanwhile).
// Pure values and logic: no threads, no I/O.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_set>
#include <vector>

#include "cache/block_types.h"
#include "cache/kv_allocator.h"

namespace pagedserve::cache {

enum class KvOpKind {
  kReserve,              // reserve(seq, reservation): reserve-* allocators take a region
  kAllocate,             // allocate(seq, tokens[0, end)) with a prefix lookup (see above)
  kAppend,               // append_token(seq, token)
  kAppendPending,        // append_pending_token(seq)
  kResolvePending,       // resolve_pending_token(seq, token)
  kFork,                 // fork(seq, child)
  kFree,                 // free(seq)
  kReleaseGroup,         // release_group(group)
  kSwapOut,              // swap_out(seq)
  kSwapIn,               // swap_in(seq)
  kProbePrefix,          // cached_prefix_tokens(tokens), answered in KvMemoryResult::probes
  kReleaseBeforeWindow,  // release_blocks_before_window(seq): before a step's first append
  kAppendSpeculative,    // append_speculative_token(seq, token): a proposed token's slot
  kSettleSpeculative,    // settle_speculative_tokens(seq, num_accepted): keep or truncate
};
const char* kv_op_name(KvOpKind kind);

struct KvMemoryOp {
  KvOpKind kind = KvOpKind::kFree;
  SeqId seq = 0;
  SeqId child = 0;              // kFork
  int32_t token = 0;            // kAppend, kResolvePending
  uint64_t group = 0;           // kReleaseGroup; kProbePrefix: the request, echoed back;
                                // kAllocate: the request (observers only, kv_snapshot.h)
  SeqReservation reservation;   // kReserve
  std::vector<int32_t> tokens;  // kAllocate, kProbePrefix: every token of the sequence so far;
                                // kSettleSpeculative: the accepted tokens (or empty)
  int compute_tokens = 0;       // kAllocate: tokens the plan lets this step compute
  int end_cap = 0;              // kAllocate: hand the allocator at most this many tokens
  int num_accepted = 0;         // kSettleSpeculative: proposed tokens the step verified
  int num_later = 0;            // kSettleSpeculative: slots of a later step, still speculative

  static KvMemoryOp reserve(SeqId seq, const SeqReservation& reservation);
  static KvMemoryOp allocate(SeqId seq, std::vector<int32_t> tokens, int compute_tokens,
                             int end_cap);
  static KvMemoryOp append(SeqId seq, int32_t token);
  static KvMemoryOp append_pending(SeqId seq);
  static KvMemoryOp resolve_pending(SeqId seq, int32_t token);
  static KvMemoryOp fork(SeqId parent, SeqId child);
  static KvMemoryOp free(SeqId seq);
  static KvMemoryOp release_group(uint64_t group);
  static KvMemoryOp swap_out(SeqId seq);
  static KvMemoryOp swap_in(SeqId seq);
  static KvMemoryOp probe_prefix(uint64_t group, SeqId seq, std::vector<int32_t> tokens);
  static KvMemoryOp release_before_window(SeqId seq);
  static KvMemoryOp append_speculative(SeqId seq, int32_t token);
  // accepted_tokens: the accepted proposals' ids (BlockManager::settle_speculative_tokens).
  static KvMemoryOp settle_speculative(SeqId seq, int num_accepted,
                                       std::vector<int32_t> accepted_tokens = {},
                                       int num_later = 0);
};

using KvMemoryOps = std::vector<KvMemoryOp>;

// What a kAllocate op did.
struct KvAllocation {
  SeqId seq = 0;
  int num_cached_tokens = 0;  // served by the prefix cache: the step computes from here
  int num_tokens = 0;         // tokens handed to the allocator: the step computes up to here
};

// What a kProbePrefix op found: the tokens the prefix cache would serve the sequence then.
struct KvPrefixProbe {
  uint64_t group = 0;
  SeqId seq = 0;
  int num_cached_tokens = 0;
};

// One sequence the ops touched and the allocator still holds, after the whole list.
struct KvSeqState {
  SeqId seq = 0;
  bool swapped = false;
  int num_tokens = 0;
  std::vector<BlockId> blocks;  // device ids, or CPU ids when swapped
};

// The pool after the list: what the next plan starts from, and what metrics report.
struct KvMemorySnapshot {
  int num_total_device_blocks = 0;
  int num_free_device_blocks = 0;
  int num_used_device_blocks = 0;
  int num_cached_blocks = 0;  // free blocks still holding a reusable prefix (paged only)
  int num_free_cpu_blocks = 0;
  int64_t prefix_cache_queries_tokens = 0;
  int64_t prefix_cache_hits_tokens = 0;
};
KvMemorySnapshot snapshot_of(const KvAllocator& kv);

struct KvMemoryResult {
  // The executor runs the three lists in this order before the step (StepInput's order).
  std::vector<BlockCopy> swap_out;        // device -> cpu
  std::vector<BlockCopy> swap_in;         // cpu -> device
  std::vector<BlockCopy> block_copies;    // device -> device: fork copies and copy-on-write
  std::vector<KvAllocation> allocations;  // one per kAllocate op, in op order
  std::vector<KvPrefixProbe> probes;      // one per kProbePrefix op, in op order
  std::vector<KvSeqState> seqs;           // by first touch
  KvMemorySnapshot snapshot;
};

// Applies ops in order to one allocator. Throws std::logic_error for an op the allocator
// refuses (a reservation that does not fit, an unknown sequence): the planner's view of memory
// disagreed with the allocator, which is a bug, not a condition to recover from.
class KvMemoryApplier {
 public:
  // `record` false: only carries the ops out (a planning view's own allocator), keeping no
  // result, so applying an op allocates nothing beyond what the allocator does.
  explicit KvMemoryApplier(KvAllocator& kv, bool record = true) : kv_(kv), record_(record) {}

  void apply(const KvMemoryOp& op);
  // The result so far, with the touched sequences' tables and the snapshot read now.
  KvMemoryResult finish();

 private:
  void touch(SeqId seq);

  KvAllocator& kv_;
  bool record_ = true;
  KvMemoryResult result_;
  std::vector<SeqId> touched_;  // in first-touch order
  std::unordered_set<SeqId> touched_set_;
};

KvMemoryResult apply_kv_memory_ops(KvAllocator& kv, const KvMemoryOps& ops);

}  // namespace pagedserve::cache
