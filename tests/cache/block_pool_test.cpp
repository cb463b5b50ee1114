// Tests for BlockPool and its free queue: O(1) removal, and the eviction order it promises
// (uncached blocks first, then cached-free blocks least recently freed first).
#include "cache/block_pool.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

namespace pagedserve::cache {
namespace {

using Ids = std::vector<BlockId>;

TEST(FreeBlockQueue, PushPopRemoveKeepLinks) {
  std::vector<Block> blocks(5);
  for (BlockId i = 0; i < 5; ++i) blocks[i].id = i;
  FreeBlockQueue q(blocks);
  for (BlockId i = 0; i < 5; ++i) q.push_back(i);
  EXPECT_EQ(q.ids(), (Ids{0, 1, 2, 3, 4}));
  q.remove(2);  // middle
  q.remove(0);  // head
  q.remove(4);  // tail
  EXPECT_EQ(q.ids(), (Ids{1, 3}));
  EXPECT_EQ(q.front(), 1);
  EXPECT_EQ(q.back(), 3);
  q.push_front(4);
  q.push_back(0);
  EXPECT_EQ(q.ids(), (Ids{4, 1, 3, 0}));
  EXPECT_EQ(q.pop_front(), 4);
  EXPECT_EQ(q.pop_front(), 1);
  EXPECT_EQ(q.pop_front(), 3);
  EXPECT_EQ(q.pop_front(), 0);
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.front(), kNoBlock);
  EXPECT_EQ(q.back(), kNoBlock);
}

TEST(BlockPool, AllocatesInIdOrderAndThrowsWhenEmpty) {
  BlockPool pool(3, true);
  EXPECT_EQ(pool.allocate(1), 0);
  EXPECT_EQ(pool.allocate(1), 1);
  EXPECT_EQ(pool.allocate(1), 2);
  EXPECT_THROW(pool.allocate(1), std::runtime_error);
  EXPECT_EQ(pool.num_free_blocks(), 0);
  EXPECT_EQ(pool.check_invariants(), "");
}

TEST(BlockPool, UncachedBlocksAreReusedBeforeCachedOnesAreEvicted) {
  BlockPool pool(4, true);
  const BlockId a = pool.allocate(4), b = pool.allocate(4), c = pool.allocate(2);
  ASSERT_TRUE(pool.cache(a, BlockHash{1, 1}));
  ASSERT_TRUE(pool.cache(b, BlockHash{2, 2}));
  EXPECT_TRUE(pool.release(b));
  EXPECT_TRUE(pool.release(a));
  EXPECT_TRUE(pool.release(c));  // no hash: to the front
  EXPECT_EQ(pool.free_queue().ids(), (Ids{c, 3, b, a}));
  EXPECT_EQ(pool.num_cached_free_blocks(), 2);
  EXPECT_EQ(pool.allocate(1), c);
  EXPECT_EQ(pool.allocate(1), 3);
  EXPECT_EQ(pool.allocate(1), b);  // evicts b, the least recently freed cached block
  EXPECT_FALSE(pool.lookup(BlockHash{2, 2}).has_value());
  EXPECT_EQ(pool.lookup(BlockHash{1, 1}), a);
  EXPECT_EQ(pool.num_evictions(), 1);
  EXPECT_EQ(pool.check_invariants(), "");
}

TEST(BlockPool, AcquireOfCachedFreeBlockRemovesItFromTheMiddle) {
  BlockPool pool(3, true);
  const BlockId a = pool.allocate(4);
  ASSERT_TRUE(pool.cache(a, BlockHash{9, 9}));
  pool.release(a);
  EXPECT_EQ(pool.free_queue().ids(), (Ids{1, 2, a}));
  pool.acquire(a);
  EXPECT_EQ(pool.free_queue().ids(), (Ids{1, 2}));
  EXPECT_EQ(pool.block(a).ref_count, 1);
  EXPECT_EQ(pool.num_cached_free_blocks(), 0);
  EXPECT_EQ(pool.num_hashed_blocks(), 1);
  EXPECT_EQ(pool.num_stored_tokens(), 4);
  EXPECT_EQ(pool.check_invariants(), "");
}

TEST(BlockPool, DuplicateHashKeepsTheFirstBlockAndCachingOffIndexesNothing) {
  BlockPool pool(2, true);
  const BlockId a = pool.allocate(4), b = pool.allocate(4);
  EXPECT_TRUE(pool.cache(a, BlockHash{5, 5}));
  EXPECT_FALSE(pool.cache(b, BlockHash{5, 5}));
  EXPECT_EQ(pool.lookup(BlockHash{5, 5}), a);
  EXPECT_FALSE(pool.block(b).has_hash);

  BlockPool off(1, false);
  const BlockId c = off.allocate(4);
  EXPECT_FALSE(off.cache(c, BlockHash{5, 5}));
  EXPECT_EQ(off.num_hashed_blocks(), 0);
}

}  // namespace
}  // namespace pagedserve::cache
