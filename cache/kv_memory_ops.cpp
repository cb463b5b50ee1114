// Applying the scheduler's memory-op list to a KvAllocator, op by op, in order.
#include "cache/kv_memory_ops.h"

#include <algorithm>
#include <span>
#include <stdexcept>

namespace pagedserve::cache {

const char* kv_op_name(KvOpKind kind) {
  switch (kind) {
    case KvOpKind::kReserve:
      return "reserve";
    case KvOpKind::kAllocate:
      return "allocate";
    case KvOpKind::kAppend:
      return "append";
    case KvOpKind::kAppendPending:
      return "append_pending";
    case KvOpKind::kResolvePending:
      return "resolve_pending";
    case KvOpKind::kFork:
      return "fork";
    case KvOpKind::kFree:
      return "free";
    case KvOpKind::kReleaseGroup:
      return "release_group";
    case KvOpKind::kSwapOut:
      return "swap_out";
    case KvOpKind::kSwapIn:
      return "swap_in";
    case KvOpKind::kProbePrefix:
      return "probe_prefix";
    case KvOpKind::kReleaseBeforeWindow:
      return "release_before_window";
    case KvOpKind::kAppendSpeculative:
      return "append_speculative";
    case KvOpKind::kSettleSpeculative:
      return "settle_speculative";
  }
  return "?";
}

namespace {

// An op on one sequence; the factories below add what their kind needs.
KvMemoryOp seq_op(KvOpKind kind, SeqId seq) {
  KvMemoryOp op;
  op.kind = kind;
  op.seq = seq;
  return op;
}

}  // namespace

KvMemoryOp KvMemoryOp::reserve(SeqId seq, const SeqReservation& reservation) {
  KvMemoryOp op = seq_op(KvOpKind::kReserve, seq);
  op.reservation = reservation;
  return op;
}

KvMemoryOp KvMemoryOp::allocate(SeqId seq, std::vector<int32_t> tokens, int compute_tokens,
                                int end_cap) {
  KvMemoryOp op = seq_op(KvOpKind::kAllocate, seq);
  op.tokens = std::move(tokens);
  op.compute_tokens = compute_tokens;
  op.end_cap = end_cap;
  return op;
}

KvMemoryOp KvMemoryOp::append(SeqId seq, int32_t token) {
  KvMemoryOp op = seq_op(KvOpKind::kAppend, seq);
  op.token = token;
  return op;
}

KvMemoryOp KvMemoryOp::append_pending(SeqId seq) { return seq_op(KvOpKind::kAppendPending, seq); }

KvMemoryOp KvMemoryOp::resolve_pending(SeqId seq, int32_t token) {
  KvMemoryOp op = seq_op(KvOpKind::kResolvePending, seq);
  op.token = token;
  return op;
}

KvMemoryOp KvMemoryOp::fork(SeqId parent, SeqId child) {
  KvMemoryOp op = seq_op(KvOpKind::kFork, parent);
  op.child = child;
  return op;
}

KvMemoryOp KvMemoryOp::free(SeqId seq) { return seq_op(KvOpKind::kFree, seq); }

KvMemoryOp KvMemoryOp::release_group(uint64_t group) {
  KvMemoryOp op;
  op.kind = KvOpKind::kReleaseGroup;
  op.group = group;
  return op;
}

KvMemoryOp KvMemoryOp::swap_out(SeqId seq) { return seq_op(KvOpKind::kSwapOut, seq); }

KvMemoryOp KvMemoryOp::swap_in(SeqId seq) { return seq_op(KvOpKind::kSwapIn, seq); }

KvMemoryOp KvMemoryOp::probe_prefix(uint64_t group, SeqId seq, std::vector<int32_t> tokens) {
  KvMemoryOp op = seq_op(KvOpKind::kProbePrefix, seq);
  op.group = group;
  op.tokens = std::move(tokens);
  return op;
}

KvMemoryOp KvMemoryOp::release_before_window(SeqId seq) {
  return seq_op(KvOpKind::kReleaseBeforeWindow, seq);
}

KvMemoryOp KvMemoryOp::append_speculative(SeqId seq, int32_t token) {
  KvMemoryOp op = seq_op(KvOpKind::kAppendSpeculative, seq);
  op.token = token;
  return op;
}

KvMemoryOp KvMemoryOp::settle_speculative(SeqId seq, int num_accepted,
                                          std::vector<int32_t> accepted_tokens, int num_later) {
  KvMemoryOp op = seq_op(KvOpKind::kSettleSpeculative, seq);
  op.num_accepted = num_accepted;
  op.num_later = num_later;
  op.tokens = std::move(accepted_tokens);
  return op;
}

KvMemorySnapshot snapshot_of(const KvAllocator& kv) {
  KvMemorySnapshot s;
  s.num_total_device_blocks = kv.num_total_device_blocks();
  s.num_free_device_blocks = kv.num_free_device_blocks();
  s.num_used_device_blocks = kv.num_used_device_blocks();
  s.num_free_cpu_blocks = kv.num_free_cpu_blocks();
  s.prefix_cache_hits_tokens = kv.prefix_cache_hits_tokens();
  if (const BlockManager* paged = kv.block_manager()) {
    s.num_cached_blocks = paged->num_cached_blocks();
    s.prefix_cache_queries_tokens = paged->prefix_cache_queries_tokens();
  }
  return s;
}

void KvMemoryApplier::touch(SeqId seq) {
  if (record_ && touched_set_.insert(seq).second) touched_.push_back(seq);
}

void KvMemoryApplier::apply(const KvMemoryOp& op) {
  const auto append_copies = [this](std::vector<BlockCopy>& to,
                                    const std::vector<BlockCopy>& from) {
    if (record_) to.insert(to.end(), from.begin(), from.end());
  };
  // kFree is left to the allocator: a reserve-* sequence may be freed between reserve() and
  // allocate(), when has_sequence() is still false.
  if (op.kind != KvOpKind::kAllocate && op.kind != KvOpKind::kReserve &&
      op.kind != KvOpKind::kReleaseGroup && op.kind != KvOpKind::kFree &&
      op.kind != KvOpKind::kProbePrefix && !kv_.has_sequence(op.seq)) {
    throw std::logic_error(std::string("KvMemoryApplier: ") + kv_op_name(op.kind) +
                           " for unknown sequence " + std::to_string(op.seq));
  }
  switch (op.kind) {
    case KvOpKind::kReserve:
      if (!kv_.reserve(op.seq, op.reservation)) {
        throw std::logic_error("KvMemoryApplier: the reservation for sequence " +
                               std::to_string(op.seq) + " does not fit, though the plan said so");
      }
      return;
    case KvOpKind::kAllocate: {
      const int total = static_cast<int>(op.tokens.size());
      // Hits only matter when the compute budget ends before the cap (hashing is not free).
      const int hits =
          op.compute_tokens < std::min(total, op.end_cap) ? kv_.cached_prefix_tokens(op.tokens) : 0;
      const int end = std::min({total, hits + op.compute_tokens, op.end_cap});
      if (end <= 0) {
        throw std::logic_error("KvMemoryApplier: allocate of no tokens for sequence " +
                               std::to_string(op.seq));
      }
      const AllocationResult allocated =
          kv_.allocate(op.seq, std::span<const int32_t>(op.tokens).first(end));
      if (record_) result_.allocations.push_back({op.seq, allocated.num_cached_tokens, end});
      touch(op.seq);
      return;
    }
    case KvOpKind::kAppend:
      append_copies(result_.block_copies, kv_.append_token(op.seq, op.token));
      touch(op.seq);
      return;
    case KvOpKind::kAppendPending:
      append_copies(result_.block_copies, kv_.append_pending_token(op.seq));
      touch(op.seq);
      return;
    case KvOpKind::kResolvePending:
      kv_.resolve_pending_token(op.seq, op.token);
      return;
    case KvOpKind::kFork:
      append_copies(result_.block_copies, kv_.fork(op.seq, op.child));
      touch(op.child);
      return;
    case KvOpKind::kFree:
      kv_.free(op.seq);
      return;
    case KvOpKind::kReleaseGroup:
      kv_.release_group(op.group);
      return;
    case KvOpKind::kSwapOut:
      append_copies(result_.swap_out, kv_.swap_out(op.seq));
      touch(op.seq);
      return;
    case KvOpKind::kSwapIn:
      append_copies(result_.swap_in, kv_.swap_in(op.seq));
      touch(op.seq);
      return;
    case KvOpKind::kReleaseBeforeWindow:
      kv_.release_blocks_before_window(op.seq);
      touch(op.seq);
      return;
    case KvOpKind::kAppendSpeculative:
      append_copies(result_.block_copies, kv_.append_speculative_token(op.seq, op.token));
      touch(op.seq);
      return;
    case KvOpKind::kSettleSpeculative:
      kv_.settle_speculative_tokens(op.seq, op.num_accepted, op.tokens, op.num_later);
      touch(op.seq);
      return;
    case KvOpKind::kProbePrefix:
      if (record_) {
        result_.probes.push_back({op.group, op.seq, kv_.cached_prefix_tokens(op.tokens)});
      }
      return;
  }
}

KvMemoryResult KvMemoryApplier::finish() {
  KvMemoryResult result = std::move(result_);
  result_ = {};
  for (SeqId seq : touched_) {
    if (!kv_.has_sequence(seq)) continue;  // freed later in the list
    KvSeqState state;
    state.seq = seq;
    state.num_tokens = kv_.num_tokens(seq);
    // Only a swapped-out sequence has a CPU table; the reserving allocators never swap.
    const BlockManager* paged = kv_.block_manager();
    state.swapped = paged != nullptr && paged->is_swapped(seq);
    const std::span<const BlockId> table =
        state.swapped ? kv_.cpu_block_table(seq) : kv_.block_table(seq);
    state.blocks.assign(table.begin(), table.end());
    result.seqs.push_back(std::move(state));
  }
  touched_.clear();
  touched_set_.clear();
  result.snapshot = snapshot_of(kv_);
  return result;
}

KvMemoryResult apply_kv_memory_ops(KvAllocator& kv, const KvMemoryOps& ops) {
  KvMemoryApplier applier(kv);
  for (const KvMemoryOp& op : ops) applier.apply(op);
  return applier.finish();
}

}  // namespace pagedserve::cache
