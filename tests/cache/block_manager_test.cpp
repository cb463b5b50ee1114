// Deterministic BlockManager tests: block tables, copy-on-write, prefix caching, eviction
// order, swap, admission and accounting, pinning exact block ids where the order is specified.
#include "cache/block_manager.h"

#include <gtest/gtest.h>

#include <numeric>
#include <stdexcept>
#include <vector>

#include "tests/cache/kv_memory_sim.h"

namespace pagedserve::cache {
namespace {

using Ids = std::vector<BlockId>;
using Tokens = std::vector<int32_t>;
using testing::kv_contents;
using testing::KvMemorySim;

Tokens iota_tokens(int n, int32_t first = 0) {
  Tokens t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

Ids table(const BlockManager& bm, SeqId seq) {
  auto t = bm.block_table(seq);
  return Ids(t.begin(), t.end());
}

BlockManagerConfig config(int block_size, int device, int cpu = 0, bool caching = true) {
  BlockManagerConfig c;
  c.block_size = block_size;
  c.num_device_blocks = device;
  c.num_cpu_blocks = cpu;
  c.enable_prefix_caching = caching;
  c.watermark = 0.0;
  return c;
}

// ---- block tables ----

TEST(BlockManager, AllocateAppendFree) {
  BlockManager bm(config(4, 10));
  const Tokens prompt = iota_tokens(6);
  EXPECT_EQ(bm.allocate(1, prompt).num_cached_tokens, 0);
  EXPECT_EQ(table(bm, 1), (Ids{0, 1}));
  EXPECT_TRUE(bm.append_token(1, 6).empty());
  EXPECT_TRUE(bm.append_token(1, 7).empty());
  EXPECT_EQ(table(bm, 1), (Ids{0, 1}));  // the last block had room
  EXPECT_TRUE(bm.append_token(1, 8).empty());
  EXPECT_EQ(table(bm, 1), (Ids{0, 1, 2}));  // a new block only when the last is full
  EXPECT_EQ(bm.num_tokens(1), 9);
  EXPECT_EQ(bm.num_free_device_blocks(), 7);
  EXPECT_DOUBLE_EQ(bm.usage(), 0.3);
  const BlockManagerStats st = bm.stats();
  EXPECT_EQ(st.num_stored_tokens, 9);
  EXPECT_EQ(st.num_reserved_slots, 12);
  EXPECT_DOUBLE_EQ(st.fragmentation, 0.25);
  EXPECT_EQ(bm.check_invariants(), "");
  bm.free(1);
  EXPECT_FALSE(bm.has_sequence(1));
  EXPECT_EQ(bm.num_free_device_blocks(), 10);
  EXPECT_EQ(bm.stats().num_stored_tokens, 0);
  EXPECT_EQ(bm.check_invariants(), "");
}

TEST(BlockManager, MisuseThrowsLogicErrorAndShortageThrowsRuntimeError) {
  BlockManager bm(config(4, 3, 1));
  const Tokens prompt = iota_tokens(5);
  bm.allocate(1, prompt);
  EXPECT_THROW(bm.allocate(1, prompt), std::logic_error);
  EXPECT_THROW(bm.allocate(2, Tokens{}), std::logic_error);
  EXPECT_THROW(bm.append_token(9, 0), std::logic_error);
  EXPECT_THROW(bm.free(9), std::logic_error);
  EXPECT_THROW(bm.fork(9, 10), std::logic_error);
  EXPECT_THROW(bm.fork(1, 1), std::logic_error);
  EXPECT_THROW(bm.block_table(9), std::logic_error);
  EXPECT_THROW(bm.cpu_block_table(1), std::logic_error);
  EXPECT_THROW(bm.swap_in(1), std::logic_error);  // not swapped out

  EXPECT_FALSE(bm.can_allocate(iota_tokens(9, 100)));
  EXPECT_THROW(bm.allocate(2, iota_tokens(9, 100)), std::runtime_error);
  EXPECT_FALSE(bm.has_sequence(2));
  EXPECT_FALSE(bm.can_swap_out(1));  // 2 blocks, 1 CPU block
  EXPECT_THROW(bm.swap_out(1), std::runtime_error);
  EXPECT_FALSE(bm.is_swapped(1));
  EXPECT_EQ(bm.check_invariants(), "");

  bm.allocate(2, iota_tokens(4, 100));  // takes the last block
  for (int32_t t = 5; t < 8; ++t) bm.append_token(1, t);
  EXPECT_THROW(bm.append_token(1, 8), std::runtime_error);  // needs a block, none free
  EXPECT_EQ(bm.num_tokens(1), 8);
  EXPECT_EQ(bm.check_invariants(), "");
}

// ---- fork and copy-on-write ----

TEST(BlockManager, WritingASharedPartialBlockCopiesItOnce) {
  BlockManager bm(config(4, 8));
  bm.allocate(1, iota_tokens(6));  // blocks 0 (full) and 1 (2 of 4)
  bm.fork(1, 2);
  EXPECT_EQ(table(bm, 2), (Ids{0, 1}));
  EXPECT_EQ(bm.device_ref_count(0), 2);
  EXPECT_EQ(bm.device_ref_count(1), 2);

  EXPECT_EQ(bm.append_token(2, 50), (std::vector<BlockCopy>{{1, 2}}));
  EXPECT_EQ(table(bm, 2), (Ids{0, 2}));
  EXPECT_EQ(table(bm, 1), (Ids{0, 1}));
  EXPECT_EQ(bm.device_ref_count(1), 1);
  EXPECT_TRUE(bm.append_token(1, 60).empty());  // no longer shared: written in place
  EXPECT_TRUE(bm.append_token(2, 51).empty());
  EXPECT_EQ(bm.device_ref_count(0), 2);  // the full block stays shared
  EXPECT_EQ(bm.check_invariants(), "");
}

TEST(BlockManager, ForkWithAFullLastBlockNeedsNoCopy) {
  BlockManager bm(config(4, 8));
  bm.allocate(1, iota_tokens(8));
  bm.fork(1, 2);
  EXPECT_TRUE(bm.append_token(1, 8).empty());
  EXPECT_TRUE(bm.append_token(2, 9).empty());
  EXPECT_EQ(table(bm, 1), (Ids{0, 1, 2}));
  EXPECT_EQ(table(bm, 2), (Ids{0, 1, 3}));
  EXPECT_EQ(bm.check_invariants(), "");
}

TEST(BlockManager, ForkedSequencesNeverSeeEachOthersLaterTokens) {
  BlockManager bm(config(4, 16));
  KvMemorySim mem(16, 0, 4);
  const Tokens prompt = iota_tokens(5);
  bm.allocate(1, prompt);
  mem.write(bm.block_table(1), prompt, 0);
  std::vector<Tokens> seqs = {prompt, prompt, prompt};
  bm.fork(1, 2);
  bm.fork(2, 3);  // three sharers of a partial block
  for (int step = 0; step < 9; ++step) {
    for (SeqId s = 1; s <= 3; ++s) {
      const int32_t token = static_cast<int32_t>(100 * s + step);
      std::vector<BlockCopy> copies = bm.append_token(s, token);
      mem.copy_device(copies);
      seqs[s - 1].push_back(token);
      mem.write(bm.block_table(s), seqs[s - 1], seqs[s - 1].size() - 1);
    }
    for (SeqId s = 1; s <= 3; ++s)
      EXPECT_EQ(mem.read(bm, s), kv_contents(seqs[s - 1])) << "seq " << s;
    ASSERT_EQ(bm.check_invariants(), "");
  }
}

// ---- prefix caching ----

TEST(BlockManager, SameHundredTokenPromptReusesSixBlocks) {
  BlockManager bm(config(16, 64));
  const Tokens prompt = iota_tokens(100, 1000);
  EXPECT_EQ(bm.allocate(1, prompt).num_cached_tokens, 0);
  EXPECT_EQ(table(bm, 1), (Ids{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(bm.allocate(2, prompt).num_cached_tokens, 96);
  EXPECT_EQ(table(bm, 2), (Ids{0, 1, 2, 3, 4, 5, 7}));
  EXPECT_EQ(bm.device_ref_count(5), 2);
  EXPECT_EQ(bm.device_ref_count(6), 1);
  EXPECT_EQ(bm.prefix_cache_queries_tokens(), 200);
  EXPECT_EQ(bm.prefix_cache_hits_tokens(), 96);
  EXPECT_EQ(bm.stats().num_hashed_blocks, 6);
  EXPECT_EQ(bm.check_invariants(), "");

  // Still reusable after both finish: the blocks stay cached until evicted.
  bm.free(1);
  bm.free(2);
  EXPECT_EQ(bm.num_cached_blocks(), 6);
  EXPECT_EQ(bm.num_free_device_blocks(), 64);
  EXPECT_EQ(bm.allocate(3, prompt).num_cached_tokens, 96);
  EXPECT_EQ(bm.num_cached_blocks(), 0);
  EXPECT_EQ(bm.check_invariants(), "");
}

TEST(BlockManager, DifferentFirstBlockMeansNoReuse) {
  BlockManager bm(config(16, 64));
  Tokens prompt = iota_tokens(100, 1000);
  bm.allocate(1, prompt);
  prompt[3] = 7;  // same blocks 2..6, different block 1: the chain differs everywhere
  EXPECT_EQ(bm.allocate(2, prompt).num_cached_tokens, 0);
  EXPECT_EQ(table(bm, 2), (Ids{7, 8, 9, 10, 11, 12, 13}));
}

TEST(BlockManager, TheLastTokenIsAlwaysRecomputed) {
  BlockManager bm(config(16, 16));
  const Tokens prompt = iota_tokens(32);
  bm.allocate(1, prompt);
  EXPECT_EQ(bm.allocate(2, prompt).num_cached_tokens, 16);
  EXPECT_EQ(table(bm, 2), (Ids{0, 2}));  // block 1's twin is recomputed into a fresh block
  EXPECT_EQ(bm.allocate(3, std::span(prompt).first(1)).num_cached_tokens, 0);
  EXPECT_EQ(bm.check_invariants(), "");
}

TEST(BlockManager, CacheSaltSeparatesTenants) {
  BlockManager bm(config(4, 32));
  const Tokens prompt = iota_tokens(9);
  bm.allocate(1, prompt, "a");
  EXPECT_EQ(bm.allocate(2, prompt, "b").num_cached_tokens, 0);
  EXPECT_EQ(bm.allocate(3, prompt).num_cached_tokens, 0);
  EXPECT_EQ(bm.allocate(4, prompt, "a").num_cached_tokens, 8);
  EXPECT_EQ(bm.check_invariants(), "");
}

TEST(BlockManager, BlocksFilledByDecodeAreHashedAndReusable) {
  BlockManager bm(config(4, 16));
  bm.allocate(1, iota_tokens(3, 1), "s");  // shorter than a block: nothing hashed yet
  bm.append_token(1, 4);                   // fills block 0 (salted, as the first block)
  bm.append_token(1, 5);
  bm.append_token(1, 6);
  bm.append_token(1, 7);
  bm.append_token(1, 8);  // fills block 1
  EXPECT_EQ(bm.stats().num_hashed_blocks, 2);
  EXPECT_EQ(bm.allocate(2, iota_tokens(9, 1), "s").num_cached_tokens, 8);
  EXPECT_EQ(table(bm, 2), (Ids{0, 1, 2}));
  EXPECT_EQ(bm.allocate(3, iota_tokens(9, 1)).num_cached_tokens, 0);  // unsalted: no reuse
  EXPECT_EQ(bm.check_invariants(), "");
}

// ---- pending tokens (overlap scheduling) ----

// A block filled by a token the running step has not sampled yet is not in the prefix cache
// until the token is known; then it is indexed under the real token, exactly as if that
// token had been appended directly (checked against a second, plainly appended sequence).
TEST(BlockManager, ABlockFilledByAPendingTokenIsHashedOnlyOnceTheTokenIsKnown) {
  BlockManager bm(config(4, 16));
  bm.allocate(1, iota_tokens(3, 1));
  EXPECT_FALSE(bm.has_pending_token(1));
  EXPECT_TRUE(bm.append_pending_token(1).empty());  // the slot of token 4 fills block 0
  EXPECT_TRUE(bm.has_pending_token(1));
  EXPECT_EQ(bm.num_tokens(1), 4);
  EXPECT_EQ(table(bm, 1), (Ids{0}));
  EXPECT_EQ(bm.stats().num_hashed_blocks, 0) << "no hash for a guessed token";
  EXPECT_EQ(bm.check_invariants(), "");
  EXPECT_EQ(bm.cached_prefix_tokens(iota_tokens(5, 1)), 0);

  bm.resolve_pending_token(1, 4);
  EXPECT_FALSE(bm.has_pending_token(1));
  EXPECT_EQ(bm.stats().num_hashed_blocks, 1);
  EXPECT_EQ(bm.check_invariants(), "");
  // The same hash an ordinary append of 1 2 3 4 gives: a prompt 1 2 3 4 5 hits block 0.
  EXPECT_EQ(bm.allocate(2, iota_tokens(5, 1)).num_cached_tokens, 4);
  EXPECT_EQ(table(bm, 2).front(), 0);
  // A token other than the placeholder's real value would not have matched.
  EXPECT_EQ(bm.cached_prefix_tokens(Tokens{1, 2, 3, 9, 5}), 0);
  EXPECT_EQ(bm.check_invariants(), "");
}

TEST(BlockManager, APendingTokenInTheMiddleOfABlockHashesWithTheBlock) {
  BlockManager bm(config(4, 16));
  bm.allocate(1, iota_tokens(2, 1));
  bm.append_pending_token(1);  // token 3, block 0 not full yet
  bm.resolve_pending_token(1, 3);
  EXPECT_EQ(bm.stats().num_hashed_blocks, 0);
  bm.append_pending_token(1);  // token 4 fills block 0
  EXPECT_EQ(bm.stats().num_hashed_blocks, 0);
  bm.resolve_pending_token(1, 4);
  bm.append_token(1, 5);  // the next block, as usual
  EXPECT_EQ(table(bm, 1), (Ids{0, 1}));
  EXPECT_EQ(bm.stats().num_hashed_blocks, 1);
  EXPECT_EQ(bm.allocate(2, iota_tokens(5, 1)).num_cached_tokens, 4);
  EXPECT_EQ(bm.check_invariants(), "");
}

// A sequence that finishes (or is aborted) before its pending token is known frees its blocks
// and never publishes the unresolved one; every block comes back.
TEST(BlockManager, FreeingWithAnUnresolvedPendingTokenPublishesNothing) {
  BlockManager bm(config(4, 8));
  bm.allocate(1, iota_tokens(7, 1));  // block 0 hashed, block 1 holds 3
  bm.append_pending_token(1);
  EXPECT_EQ(bm.stats().num_hashed_blocks, 1);
  bm.free(1);
  EXPECT_EQ(bm.num_free_device_blocks(), 8);
  EXPECT_EQ(bm.stats().num_hashed_blocks, 1) << "only the prompt's full block stays cached";
  EXPECT_EQ(bm.cached_prefix_tokens(iota_tokens(9, 1)), 4);
  EXPECT_EQ(bm.check_invariants(), "");
}

TEST(BlockManager, APendingTokenTakesANewBlockOrCopiesASharedOneLikeAnAppend) {
  BlockManager bm(config(4, 8));
  bm.allocate(1, iota_tokens(4, 1));
  EXPECT_TRUE(bm.append_pending_token(1).empty());
  EXPECT_EQ(table(bm, 1), (Ids{0, 1}));  // a new block for slot 4
  bm.resolve_pending_token(1, 5);
  bm.fork(1, 2);  // share the partial block 1
  const std::vector<BlockCopy> copies = bm.append_pending_token(2);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, 1);
  EXPECT_EQ(table(bm, 2), (Ids{0, copies[0].dst}));
  bm.resolve_pending_token(2, 6);
  EXPECT_EQ(bm.check_invariants(), "");
}

TEST(BlockManager, PendingTokenMisuseThrowsLogicError) {
  BlockManager bm(config(4, 8, 8));
  bm.allocate(1, iota_tokens(3, 1));
  EXPECT_THROW(bm.resolve_pending_token(1, 4), std::logic_error) << "nothing pending";
  EXPECT_THROW(bm.append_pending_token(9), std::logic_error);
  EXPECT_THROW(bm.has_pending_token(9), std::logic_error);
  bm.append_pending_token(1);
  EXPECT_THROW(bm.append_pending_token(1), std::logic_error) << "one pending token at a time";
  EXPECT_THROW(bm.append_token(1, 5), std::logic_error);
  EXPECT_THROW(bm.fork(1, 2), std::logic_error);
  EXPECT_THROW(bm.swap_out(1), std::logic_error);
  EXPECT_EQ(bm.check_invariants(), "") << "a refused call changes nothing";
  bm.resolve_pending_token(1, 4);
  EXPECT_NO_THROW(bm.swap_out(1));
  EXPECT_EQ(bm.check_invariants(), "");
}

TEST(BlockManager, PendingTokensWithoutPrefixCaching) {
  BlockManager bm(config(4, 8, 0, /*caching=*/false));
  bm.allocate(1, iota_tokens(3, 1));
  bm.append_pending_token(1);
  EXPECT_TRUE(bm.has_pending_token(1));
  bm.resolve_pending_token(1, 4);
  bm.append_token(1, 5);
  EXPECT_EQ(bm.num_tokens(1), 5);
  EXPECT_EQ(bm.stats().num_hashed_blocks, 0);
  EXPECT_EQ(bm.check_invariants(), "");
}

TEST(BlockManager, EvictionIsLeastRecentlyUsedAndTailFirst) {
  BlockManager bm(config(4, 8));
  const Tokens a = iota_tokens(8, 100), b = iota_tokens(8, 200);
  bm.allocate(1, a);  // blocks 0, 1
  bm.allocate(2, b);  // blocks 2, 3
  bm.free(1);
  bm.free(2);
  // Free queue: never-used blocks, then A's blocks tail first, then B's.
  EXPECT_EQ(bm.device_free_queue(), (Ids{4, 5, 6, 7, 1, 0, 3, 2}));

  // Reusing A makes it most recently used; the partial block of the new sequence is not
  // cached and goes to the front when freed.
  Tokens a_longer = a;
  a_longer.push_back(108);
  EXPECT_EQ(bm.allocate(3, a_longer).num_cached_tokens, 8);
  EXPECT_EQ(table(bm, 3), (Ids{0, 1, 4}));
  bm.free(3);
  EXPECT_EQ(bm.device_free_queue(), (Ids{4, 5, 6, 7, 3, 2, 1, 0}));

  // Six fresh blocks: the four uncached ones, then B's (least recently used), tail first.
  EXPECT_EQ(bm.allocate(4, iota_tokens(24, 300)).num_cached_tokens, 0);
  EXPECT_EQ(table(bm, 4), (Ids{4, 5, 6, 7, 3, 2}));
  EXPECT_EQ(bm.stats().num_evicted_blocks, 2);
  Tokens b_longer = b;
  b_longer.push_back(208);
  EXPECT_EQ(bm.cached_prefix_tokens(b_longer), 0);  // B is gone...
  EXPECT_EQ(bm.cached_prefix_tokens(a_longer), 8);  // ...A survived
  EXPECT_EQ(bm.check_invariants(), "");
}

TEST(BlockManager, WithoutPrefixCachingNothingIsHashedOrReused) {
  BlockManager bm(config(4, 8, 0, /*caching=*/false));
  const Tokens prompt = iota_tokens(9);
  bm.allocate(1, prompt);
  EXPECT_EQ(bm.allocate(2, prompt).num_cached_tokens, 0);
  EXPECT_EQ(bm.stats().num_hashed_blocks, 0);
  bm.free(1);
  EXPECT_EQ(bm.num_cached_blocks(), 0);
  EXPECT_EQ(bm.device_free_queue(), (Ids{0, 1, 2, 6, 7}));  // freed blocks are reused first
  EXPECT_EQ(bm.prefix_cache_queries_tokens(), 0);
  EXPECT_EQ(bm.check_invariants(), "");
}

// ---- swap ----

TEST(BlockManager, SharedBlocksAreSwappedOnceAcrossSharers) {
  BlockManager bm(config(4, 8, 8, /*caching=*/false));
  KvMemorySim mem(8, 8, 4);
  const Tokens prompt = iota_tokens(6, 10);
  bm.allocate(1, prompt);
  mem.write(bm.block_table(1), prompt, 0);
  bm.fork(1, 2);

  std::vector<BlockCopy> out1 = bm.swap_out(1);
  EXPECT_EQ(out1, (std::vector<BlockCopy>{{0, 0}, {1, 1}}));
  mem.swap_out(out1);
  EXPECT_TRUE(bm.is_swapped(1));
  EXPECT_EQ(bm.num_free_device_blocks(), 6);  // seq 2 still holds both blocks
  EXPECT_TRUE(bm.swap_out(2).empty());        // already on the CPU: no second copy
  EXPECT_EQ(bm.num_free_device_blocks(), 8);
  EXPECT_EQ(bm.num_free_cpu_blocks(), 6);
  EXPECT_EQ(mem.read(bm, 1), kv_contents(prompt));
  EXPECT_EQ(mem.read(bm, 2), kv_contents(prompt));
  EXPECT_EQ(bm.check_invariants(), "");

  std::vector<BlockCopy> in1 = bm.swap_in(1);
  EXPECT_EQ(in1, (std::vector<BlockCopy>{{0, 0}, {1, 1}}));  // freed blocks are reused first
  mem.swap_in(in1);
  EXPECT_TRUE(bm.swap_in(2).empty());
  EXPECT_EQ(table(bm, 2), table(bm, 1));
  EXPECT_EQ(bm.device_ref_count(table(bm, 1)[1]), 2);
  EXPECT_EQ(bm.num_free_cpu_blocks(), 8);
  EXPECT_EQ(mem.read(bm, 2), kv_contents(prompt));

  // Still copy-on-write after the round trip.
  EXPECT_EQ(bm.append_token(1, 99).size(), 1u);
  EXPECT_EQ(bm.check_invariants(), "");
}

TEST(BlockManager, SwapInReusesBlocksStillOnTheDevice) {
  BlockManager bm(config(4, 16, 16));
  KvMemorySim mem(16, 16, 4);
  const Tokens base = iota_tokens(8, 10);
  Tokens longer = base;
  longer.insert(longer.end(), {50, 51, 52});
  bm.allocate(1, base);
  mem.write(bm.block_table(1), base, 0);
  const int cached = bm.allocate(2, longer).num_cached_tokens;
  EXPECT_EQ(cached, 8);  // both of base's blocks
  mem.write(bm.block_table(2), longer, cached);
  const Ids before = table(bm, 2);

  mem.swap_out(bm.swap_out(2));  // all three of seq 2's blocks go out
  EXPECT_EQ(mem.read(bm, 2), kv_contents(longer));
  std::vector<BlockCopy> in = bm.swap_in(2);
  mem.swap_in(in);
  // Blocks 0 and 1 never left the device (seq 1 holds them): only the private tail comes in.
  EXPECT_EQ(in.size(), 1u);
  EXPECT_EQ(table(bm, 2)[0], before[0]);
  EXPECT_EQ(table(bm, 2)[1], before[1]);
  EXPECT_EQ(mem.read(bm, 2), kv_contents(longer));
  EXPECT_EQ(bm.check_invariants(), "");

  // Alone on the device its freed full blocks stay cached, so they come back without copies.
  bm.free(1);
  mem.swap_out(bm.swap_out(2));
  in = bm.swap_in(2);
  mem.swap_in(in);
  EXPECT_EQ(in.size(), 1u);
  EXPECT_EQ(mem.read(bm, 2), kv_contents(longer));
  EXPECT_EQ(bm.check_invariants(), "");
}

TEST(BlockManager, FreeingASwappedOutSequenceReturnsItsCpuBlocks) {
  BlockManager bm(config(4, 4, 4));
  bm.allocate(1, iota_tokens(7));
  bm.swap_out(1);
  EXPECT_EQ(bm.num_free_cpu_blocks(), 2);
  EXPECT_THROW(bm.append_token(1, 0), std::logic_error);
  EXPECT_THROW(bm.block_table(1), std::logic_error);
  EXPECT_THROW(bm.fork(1, 2), std::logic_error);
  bm.free(1);
  EXPECT_EQ(bm.num_free_cpu_blocks(), 4);
  EXPECT_EQ(bm.num_free_device_blocks(), 4);
  EXPECT_EQ(bm.check_invariants(), "");
}

// ---- admission ----

TEST(BlockManager, CanAllocateKeepsTheWatermarkAndCountsHits) {
  BlockManagerConfig c = config(4, 100);
  c.watermark = 0.05;  // 5 blocks kept back
  BlockManager bm(c);
  EXPECT_EQ(bm.watermark_blocks(), 5);
  EXPECT_EQ(bm.check_allocate(iota_tokens(4 * 96)), AllocStatus::kNever);
  EXPECT_TRUE(bm.can_allocate(iota_tokens(4 * 95)));
  const Tokens prompt = iota_tokens(4 * 40 + 1);  // 41 blocks
  bm.allocate(1, prompt);
  bm.allocate(2, iota_tokens(4 * 13, 1000));                     // 13 blocks: 46 free
  EXPECT_FALSE(bm.can_allocate(iota_tokens(4 * 41 + 1, 5000)));  // 42 blocks: 4 left < 5
  EXPECT_EQ(bm.check_allocate(iota_tokens(4 * 41 + 1, 5000)), AllocStatus::kLater);
  EXPECT_TRUE(bm.can_allocate(iota_tokens(4 * 41, 5000)));  // 41 blocks: 5 left
  // The same prompt shares 40 blocks with seq 1: only one new block is needed.
  EXPECT_TRUE(bm.can_allocate(prompt));
  bm.free(1);  // 40 cached-free blocks; a hit on them still takes them out of the queue
  EXPECT_EQ(bm.num_free_device_blocks(), 87);
  EXPECT_TRUE(bm.can_allocate(prompt));
  EXPECT_EQ(bm.allocate(3, prompt).num_cached_tokens, 160);
  EXPECT_EQ(bm.num_free_device_blocks(), 46);
}

TEST(BlockManager, CanAppendSlotsNeedsOneFreeBlockPerRunningSequence) {
  BlockManager bm(config(4, 3));
  bm.allocate(1, iota_tokens(4));
  EXPECT_TRUE(bm.can_append_slots(2));
  EXPECT_FALSE(bm.can_append_slots(3));
}

TEST(BlockManager, CanSwapChecksBothPoolsAndTheWatermark) {
  BlockManagerConfig c = config(4, 10, 2, false);
  c.watermark = 0.1;  // 1 block
  BlockManager bm(c);
  bm.allocate(1, iota_tokens(8));
  bm.allocate(2, iota_tokens(12));
  EXPECT_TRUE(bm.can_swap_out(1));
  EXPECT_FALSE(bm.can_swap_out(2));
  bm.swap_out(1);
  EXPECT_FALSE(bm.can_swap_out(1));  // already out
  bm.allocate(3, iota_tokens(24));   // 6 blocks: 10 - 3 - 6 = 1 free
  EXPECT_FALSE(bm.can_swap_in(1));   // 2 needed
  bm.free(3);
  EXPECT_TRUE(bm.can_swap_in(1));
}

}  // namespace
}  // namespace pagedserve::cache
