// The scheduler's memory-op list (cache/kv_memory_ops.h) and its planning view
// (cache/paged_kv_mirror.h): applying a list gives what the same calls made directly give (block
// tables, the three copy lists, prefix hits), an allocate op computes what the cache does not
// serve (hand-computed cases), a refused op is a clear error, and the mirror never counts a block
// free that the allocator does not have free, and agrees with it after reconcile().
#include "cache/kv_memory_ops.h"

#include <gtest/gtest.h>

#include <numeric>
#include <span>
#include <vector>

#include "cache/paged_kv_allocator.h"
#include "cache/paged_kv_mirror.h"
#include "cache/reserving_kv_allocator.h"

namespace pagedserve::cache {
namespace {

constexpr int kBlockSize = 4;

BlockManagerConfig pool() {
  BlockManagerConfig config;
  config.block_size = kBlockSize;
  config.num_device_blocks = 16;
  config.num_cpu_blocks = 8;
  config.watermark = 0.0;
  config.enable_prefix_caching = true;
  return config;
}

std::vector<int32_t> iota(int n, int32_t first) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Allocation, appends filling and opening blocks, a fork and its copy-on-write, a pending token,
// a prefix hit on the first sequence's published blocks, a swap out and back in.
KvMemoryOps scripted_ops() {
  KvMemoryOps ops;
  ops.push_back(KvMemoryOp::allocate(1, iota(10, 1), /*compute_tokens=*/10, /*end_cap=*/12));
  ops.push_back(KvMemoryOp::append(1, 11));
  ops.push_back(KvMemoryOp::append(1, 12));  // fills (and publishes) block 3: [9, 12]
  ops.push_back(KvMemoryOp::append(1, 13));  // opens block 4
  ops.push_back(KvMemoryOp::fork(1, 2));
  ops.push_back(KvMemoryOp::append(2, 50));  // block 4 is shared and partial: copy-on-write
  ops.push_back(KvMemoryOp::append_pending(1));
  ops.push_back(KvMemoryOp::resolve_pending(1, 99));
  // 14 tokens whose first 12 are sequence 1's three full blocks.
  ops.push_back(KvMemoryOp::allocate(3, concat(iota(12, 1), {77, 78}), 14, 16));
  ops.push_back(KvMemoryOp::swap_out(2));
  ops.push_back(KvMemoryOp::swap_in(2));
  return ops;
}

TEST(KvMemoryApplier, GivesWhatTheSameCallsMadeDirectlyGive) {
  PagedKvAllocator via_list(pool());
  const KvMemoryResult result = apply_kv_memory_ops(via_list, scripted_ops());

  // The reference: the same calls, one by one, as the scheduler made them before the op list.
  PagedKvAllocator direct(pool());
  std::vector<BlockCopy> swap_out, swap_in, block_copies;
  const auto add = [](std::vector<BlockCopy>& to, const std::vector<BlockCopy>& from) {
    to.insert(to.end(), from.begin(), from.end());
  };
  const std::vector<int32_t> first = iota(10, 1);
  EXPECT_EQ(direct.allocate(1, first).num_cached_tokens, 0);
  add(block_copies, direct.append_token(1, 11));
  add(block_copies, direct.append_token(1, 12));
  add(block_copies, direct.append_token(1, 13));
  add(block_copies, direct.fork(1, 2));
  add(block_copies, direct.append_token(2, 50));
  add(block_copies, direct.append_pending_token(1));
  direct.resolve_pending_token(1, 99);
  const std::vector<int32_t> third = concat(iota(12, 1), {77, 78});
  const int hits = direct.allocate(3, third).num_cached_tokens;
  add(swap_out, direct.swap_out(2));
  add(swap_in, direct.swap_in(2));

  EXPECT_EQ(hits, 12) << "three full blocks published by sequence 1";
  EXPECT_EQ(result.swap_out, swap_out);
  EXPECT_EQ(result.swap_in, swap_in);
  EXPECT_EQ(result.block_copies, block_copies);
  ASSERT_EQ(block_copies.size(), 1u) << "one copy-on-write";
  ASSERT_EQ(result.allocations.size(), 2u);
  EXPECT_EQ(result.allocations[0].num_cached_tokens, 0);
  EXPECT_EQ(result.allocations[0].num_tokens, 10);
  EXPECT_EQ(result.allocations[1].num_cached_tokens, 12);
  EXPECT_EQ(result.allocations[1].num_tokens, 14) << "min(14, 12 hits + 14, cap 16)";
  ASSERT_EQ(result.seqs.size(), 3u);  // by first touch: 1, 2, 3
  for (const KvSeqState& state : result.seqs) {
    SCOPED_TRACE("sequence " + std::to_string(state.seq));
    EXPECT_FALSE(state.swapped);
    const auto table = direct.block_table(state.seq);
    EXPECT_EQ(state.blocks, std::vector<BlockId>(table.begin(), table.end()));
    EXPECT_EQ(state.num_tokens, direct.num_tokens(state.seq));
  }
  EXPECT_EQ(result.snapshot.num_free_device_blocks, direct.num_free_device_blocks());
  EXPECT_EQ(result.snapshot.num_free_cpu_blocks, direct.num_free_cpu_blocks());
  EXPECT_EQ(result.snapshot.prefix_cache_hits_tokens, 12);
  EXPECT_EQ(via_list.block_manager()->check_invariants(), "");

  // Frees alone (what update() queues when no step follows) leave every block free.
  const KvMemoryResult freed = apply_kv_memory_ops(
      via_list, {KvMemoryOp::free(1), KvMemoryOp::free(2), KvMemoryOp::free(3)});
  EXPECT_TRUE(freed.seqs.empty());
  EXPECT_EQ(freed.snapshot.num_free_device_blocks, 16);
  EXPECT_EQ(freed.snapshot.num_used_device_blocks, 0);
  EXPECT_EQ(freed.snapshot.num_free_cpu_blocks, 8);
  EXPECT_EQ(via_list.block_manager()->check_invariants(), "");
}

// end = min(total, hits + compute, end_cap); the allocator finds hits only among the tokens it
// is handed (never all of them: the last is always recomputed).
TEST(KvMemoryApplier, AnAllocateComputesWhatTheCacheDoesNotServeWithinItsCap) {
  PagedKvAllocator kv(pool());
  const std::vector<int32_t> prompt = iota(14, 1);
  apply_kv_memory_ops(kv, {KvMemoryOp::allocate(1, prompt, 14, 16)});
  // 12 tokens are cached. A plan made without that knowledge let the prompt compute 5 tokens
  // in 2 blocks: hand it 8 tokens, of which the first block (4) is a hit.
  KvMemoryResult capped = apply_kv_memory_ops(kv, {KvMemoryOp::allocate(2, prompt, 5, 8)});
  ASSERT_EQ(capped.allocations.size(), 1u);
  EXPECT_EQ(capped.allocations[0].num_tokens, 8);
  EXPECT_EQ(capped.allocations[0].num_cached_tokens, 4);
  // A plan with room: 12 hits + 2 computed reach the end of the prompt.
  KvMemoryResult whole = apply_kv_memory_ops(kv, {KvMemoryOp::allocate(3, prompt, 5, 20)});
  EXPECT_EQ(whole.allocations[0].num_tokens, 14);
  EXPECT_EQ(whole.allocations[0].num_cached_tokens, 12);
  EXPECT_EQ(kv.block_manager()->check_invariants(), "");
}

// A probe answers with the hits at its place in the list (after the ops before it), touches
// nothing, and needs no sequence; the answer comes back with the request it names.
TEST(KvMemoryApplier, AProbeAnswersTheHitsAtItsPlaceInTheList) {
  PagedKvAllocator kv(pool());
  const std::vector<int32_t> prompt = iota(14, 1);
  KvMemoryResult result = apply_kv_memory_ops(
      kv, {KvMemoryOp::probe_prefix(7, 2, prompt), KvMemoryOp::allocate(1, prompt, 14, 16),
           KvMemoryOp::probe_prefix(8, 3, prompt),
           // 9 tokens: the last is recomputed, so two full blocks (8 tokens) are hits.
           KvMemoryOp::probe_prefix(9, 4, iota(9, 1)), KvMemoryOp::free(1),
           KvMemoryOp::probe_prefix(10, 5, concat(iota(4, 1), {60, 61, 62, 63, 64}))});
  ASSERT_EQ(result.probes.size(), 4u);
  EXPECT_EQ(result.probes[0].group, 7u);
  EXPECT_EQ(result.probes[0].seq, 2u);
  EXPECT_EQ(result.probes[0].num_cached_tokens, 0) << "before the allocation";
  EXPECT_EQ(result.probes[1].num_cached_tokens, 12) << "the prompt's three full blocks";
  EXPECT_EQ(result.probes[2].num_cached_tokens, 8);
  // Freed blocks stay cached until evicted: the first block still hits.
  EXPECT_EQ(result.probes[3].group, 10u);
  EXPECT_EQ(result.probes[3].num_cached_tokens, 4);
  for (SeqId seq : {2, 3, 4, 5}) EXPECT_FALSE(kv.has_sequence(seq));
  ASSERT_EQ(result.seqs.size(), 0u) << "sequence 1 was freed; probes touch nothing";
  // Without the cache, nothing is ever a hit.
  BlockManagerConfig uncached = pool();
  uncached.enable_prefix_caching = false;
  PagedKvAllocator plain(uncached);
  result = apply_kv_memory_ops(
      plain, {KvMemoryOp::allocate(1, prompt, 14, 16), KvMemoryOp::probe_prefix(8, 3, prompt)});
  ASSERT_EQ(result.probes.size(), 1u);
  EXPECT_EQ(result.probes[0].num_cached_tokens, 0);
}

TEST(KvMemoryApplier, ARefusedOpIsALogicErrorNamingIt) {
  PagedKvAllocator paged(pool());
  try {
    apply_kv_memory_ops(paged, {KvMemoryOp::append(7, 1)});
    ADD_FAILURE() << "no error";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("append for unknown sequence 7"), std::string::npos)
        << e.what();
  }
  // reserve-max: a region of max_model_len (64 tokens = 16 blocks) fits once in 16 blocks.
  BlockManagerConfig config = pool();
  config.enable_prefix_caching = false;
  ReservingKvAllocator reserving(KvAllocatorKind::kReserveMax, config);
  SeqReservation future;
  future.group = 1;
  future.prompt_len = future.current_len = 4;
  future.max_output_len = 60;
  future.max_model_len = 64;
  apply_kv_memory_ops(reserving, {KvMemoryOp::reserve(1, future)});
  future.group = 2;
  EXPECT_THROW(apply_kv_memory_ops(reserving, {KvMemoryOp::reserve(2, future)}), std::logic_error);
}

// A plan that reserves a region and then drops the sequence (its group's first sequence did not
// fit) frees the reservation before anything was allocated in it.
TEST(KvMemoryApplier, AReservationIsFreedBeforeItsAllocation) {
  BlockManagerConfig config = pool();
  config.enable_prefix_caching = false;
  ReservingKvAllocator reserving(KvAllocatorKind::kReserveOracle, config);
  SeqReservation future;
  future.group = 1;
  future.prompt_len = future.current_len = 6;
  future.max_output_len = 6;
  future.max_model_len = 64;
  const KvMemoryResult result = apply_kv_memory_ops(
      reserving,
      {KvMemoryOp::reserve(1, future), KvMemoryOp::free(1), KvMemoryOp::release_group(1)});
  EXPECT_EQ(result.snapshot.num_free_device_blocks, 16);
  EXPECT_FALSE(reserving.region_of(1).has_value());
}

TEST(PagedKvMirror, NeverCountsABlockFreeThatIsNotAndAgreesAfterReconcile) {
  PagedKvAllocator real(pool());
  PagedKvMirror mirror(pool());
  KvMemoryApplier on_mirror(mirror);
  KvMemoryApplier on_real(real);
  for (const KvMemoryOp& op : scripted_ops()) {
    on_mirror.apply(op);
    on_real.apply(op);
    SCOPED_TRACE(kv_op_name(op.kind));
    EXPECT_LE(mirror.num_free_device_blocks(), real.num_free_device_blocks());
    EXPECT_LE(mirror.num_free_cpu_blocks(), real.num_free_cpu_blocks());
  }
  // The mirror took blocks for sequence 3's 14 tokens; the allocator served 12 from the cache.
  EXPECT_LT(mirror.num_free_device_blocks(), real.num_free_device_blocks());
  const KvMemoryResult result = on_real.finish();
  mirror.reconcile(result);
  EXPECT_EQ(mirror.num_free_device_blocks(), real.num_free_device_blocks());
  EXPECT_EQ(mirror.num_free_cpu_blocks(), real.num_free_cpu_blocks());
  for (SeqId seq : {1u, 2u, 3u}) {
    const auto want = real.block_table(seq);
    const auto got = mirror.block_table(seq);
    EXPECT_EQ(std::vector<BlockId>(got.begin(), got.end()),
              std::vector<BlockId>(want.begin(), want.end()));
    EXPECT_EQ(mirror.num_tokens(seq), real.num_tokens(seq));
  }
  // The planning arithmetic matches the allocator's: sequence 1 and 3 share their first three
  // blocks, and sequence 2's last block is its own since the copy-on-write.
  const SeqReservation none;
  for (SeqId seq : {1u, 2u, 3u}) {
    for (int end : {15, 16, 17, 30}) {
      EXPECT_EQ(mirror.blocks_to_hold(seq, true, end, none),
                real.blocks_to_hold(seq, true, end, none));
    }
    for (int max_blocks : {0, 1, 3}) {
      EXPECT_EQ(mirror.max_end_tokens(seq, true, max_blocks, none),
                real.max_end_tokens(seq, true, max_blocks, none));
    }
  }
  // Forks and frees of known tables are exact without a reconcile.
  for (const KvMemoryOp& op :
       {KvMemoryOp::fork(3, 4), KvMemoryOp::free(1), KvMemoryOp::free(3), KvMemoryOp::free(2)}) {
    on_mirror.apply(op);
    on_real.apply(op);
    EXPECT_EQ(mirror.num_free_device_blocks(), real.num_free_device_blocks())
        << kv_op_name(op.kind);
  }
  // A shared partial last block: the next append copies it, in both.
  EXPECT_EQ(mirror.blocks_to_hold(4, true, 15, none), real.blocks_to_hold(4, true, 15, none));
  on_mirror.apply(KvMemoryOp::free(4));
  on_real.apply(KvMemoryOp::free(4));
  EXPECT_EQ(mirror.num_free_device_blocks(), 16);
  EXPECT_EQ(real.num_free_device_blocks(), 16);
}

// With a sliding window the mirror releases what the allocator releases: released entries
// (kNoBlock) survive reconcile, fork, swap and free without being mistaken for a block (or for
// one of the mirror's own placeholder ids), and the free counts stay exact where they were.
TEST(PagedKvMirror, ReleasesWhatTheAllocatorReleasesUnderASlidingWindow) {
  BlockManagerConfig config = pool();
  config.enable_prefix_caching = false;  // no hits: allocate is exact in the mirror too
  config.sliding_window = 6;             // with 4-token blocks
  PagedKvAllocator real(config);
  PagedKvMirror mirror(config);
  KvMemoryApplier on_mirror(mirror);
  KvMemoryApplier on_real(real);
  const auto both = [&](const KvMemoryOp& op) {
    on_mirror.apply(op);
    on_real.apply(op);
  };
  both(KvMemoryOp::allocate(1, iota(13, 1), 13, 13));  // 4 blocks
  both(KvMemoryOp::release_before_window(1));          // query 13 sees (7, 13]: blocks 0, 1
  EXPECT_EQ(mirror.num_free_device_blocks(), real.num_free_device_blocks());
  EXPECT_EQ(real.num_free_device_blocks(), 14);
  EXPECT_EQ(real.num_logical_blocks(), 2);
  mirror.reconcile(on_real.finish());
  on_mirror.finish();
  const std::vector<BlockId> want(real.block_table(1).begin(), real.block_table(1).end());
  EXPECT_EQ(std::vector<BlockId>(mirror.block_table(1).begin(), mirror.block_table(1).end()), want);
  EXPECT_EQ(want[0], kNoBlock);
  EXPECT_EQ(want[1], kNoBlock);
  // Exact until a swap (the mirror cannot know which swap twins the manager reuses), then
  // conservative until the next reconcile.
  bool swapped = false;
  for (const KvMemoryOp& op :
       {KvMemoryOp::fork(1, 2), KvMemoryOp::append(1, 5), KvMemoryOp::append(1, 6),
        KvMemoryOp::append(1, 7), KvMemoryOp::release_before_window(1),
        KvMemoryOp::release_before_window(2), KvMemoryOp::swap_out(2), KvMemoryOp::swap_in(2),
        KvMemoryOp::release_before_window(2), KvMemoryOp::free(1)}) {
    both(op);
    swapped = swapped || op.kind == KvOpKind::kSwapOut;
    EXPECT_LE(mirror.num_free_device_blocks(), real.num_free_device_blocks())
        << kv_op_name(op.kind);
    EXPECT_LE(mirror.num_free_cpu_blocks(), real.num_free_cpu_blocks()) << kv_op_name(op.kind);
    if (!swapped) {
      EXPECT_EQ(mirror.num_free_device_blocks(), real.num_free_device_blocks())
          << kv_op_name(op.kind);
    }
  }
  // Sequence 2 holds its blocks 2 and 3 (positions 8..12); block 2, still sequence 1's when 2
  // swapped out, came back without a copy.
  EXPECT_EQ(real.num_free_device_blocks(), 14);
  EXPECT_EQ(real.num_free_cpu_blocks(), 8);
  mirror.reconcile(on_real.finish());
  EXPECT_EQ(mirror.num_free_device_blocks(), 14);
  both(KvMemoryOp::free(2));
  EXPECT_EQ(mirror.num_free_device_blocks(), 16);
  EXPECT_EQ(real.num_free_device_blocks(), 16);
}

}  // namespace
}  // namespace pagedserve::cache
