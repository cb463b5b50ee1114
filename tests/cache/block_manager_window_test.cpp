// BlockManager with a sliding window: release_blocks_before_window gives back exactly the blocks
// that hold only positions the next query cannot see, and every other path (chunks, pending
// tokens, copy-on-write, fork, swap, free, prefix caching) keeps working around the released
// entries. The expected released entries come from a brute-force model of the window (the
// positions each release call's query can still see), not from the manager's own arithmetic.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <stdexcept>
#include <vector>

#include "cache/block_manager.h"
#include "tests/cache/kv_memory_sim.h"

namespace pagedserve::cache {
namespace {

using Tokens = std::vector<int32_t>;

BlockManagerConfig window_config(int block_size, int window, int device, int cpu, bool caching) {
  BlockManagerConfig c;
  c.block_size = block_size;
  c.num_device_blocks = device;
  c.num_cpu_blocks = cpu;
  c.enable_prefix_caching = caching;
  c.watermark = 0.0;
  c.sliding_window = window;
  return c;
}

// Brute force: how many leading blocks a query at position q lets go, block by block: block b
// is dead when its last position b * bs + bs - 1 is at most q - window (outside
// q - window < j <= q); the last block of the table is kept whatever the window.
int dead_blocks(int q, int window, int block_size, int table_size) {
  int dead = 0;
  for (int b = 0; b + 1 < table_size; ++b) {
    if (b * block_size + block_size - 1 <= q - window) dead = b + 1;
  }
  return dead;
}

int live_entries(std::span<const BlockId> table) {
  return static_cast<int>(
      std::count_if(table.begin(), table.end(), [](BlockId id) { return id != kNoBlock; }));
}

TEST(BlockManagerWindow, DecodeKeepsOnlyTheBlocksTheWindowCovers) {
  const int bs = 4, window = 6;
  BlockManager bm(window_config(bs, window, 64, 0, false));
  testing::KvMemorySim mem(64, 0, bs);
  Tokens tokens = {5, 6, 7, 8, 9};
  bm.allocate(1, tokens);
  mem.write(bm.block_table(1), tokens, 0);
  for (int step = 0; step < 60; ++step) {
    const int q = static_cast<int>(tokens.size());
    const int table_size = static_cast<int>(bm.block_table(1).size());
    const int used_before = bm.num_used_device_blocks();
    const int released = bm.release_blocks_before_window(1);
    const auto table = bm.block_table(1);
    const int expected_dead = dead_blocks(q, window, bs, table_size);
    for (int b = 0; b < table_size; ++b) {
      ASSERT_EQ(table[b] == kNoBlock, b < expected_dead) << "query " << q << " block " << b;
    }
    EXPECT_EQ(bm.num_used_device_blocks(), used_before - released);
    ASSERT_EQ(bm.check_invariants(), "");
    tokens.push_back(step % 7);
    bm.append_token(1, tokens.back());
    mem.write(bm.block_table(1), tokens, tokens.size() - 1);
    // The query just written sees positions (q - window, q]: all still readable.
    const std::vector<uint64_t> expected = testing::kv_contents(tokens);
    for (int p = std::max(0, q - window + 1); p <= q; ++p) {
      ASSERT_EQ(mem.device.at(bm.block_table(1)[p / bs]).at(p % bs), expected[p]) << p;
    }
    // About window / block_size + 2 blocks, however long the sequence gets.
    EXPECT_LE(bm.num_used_device_blocks(), window / bs + 2);
  }
  EXPECT_EQ(bm.num_tokens(1), 65);
  bm.free(1);
  EXPECT_EQ(bm.num_free_device_blocks(), 64);
  EXPECT_EQ(bm.check_invariants(), "");
}

TEST(BlockManagerWindow, NoWindowReleasesNothing) {
  BlockManager bm(window_config(2, 0, 32, 0, true));
  bm.allocate(1, Tokens(20, 3));
  EXPECT_EQ(bm.release_blocks_before_window(1), 0);
  EXPECT_EQ(live_entries(bm.block_table(1)), 10);
}

TEST(BlockManagerWindow, AChunkReleasesOnlyWhatItsFirstQueryCannotSee) {
  const int bs = 4, window = 8;
  BlockManager bm(window_config(bs, window, 32, 0, false));
  bm.allocate(1, Tokens(9, 1));  // first chunk: positions 0..8
  // Second chunk: queries 9..20. The first sees (1, 9], so block 0 (0..3) is the only dead one,
  // though query 20 alone would let blocks 0..2 go.
  EXPECT_EQ(bm.release_blocks_before_window(1), 0);  // position 9 still sees 2 and 3
  for (int i = 0; i < 12; ++i) bm.append_token(1, 2);
  EXPECT_EQ(live_entries(bm.block_table(1)), 6);  // appending never releases
  // Next step's first query is 21: sees (13, 21], so blocks 0..2 (positions 0..11) are dead.
  EXPECT_EQ(bm.release_blocks_before_window(1), 3);
  const auto table = bm.block_table(1);
  EXPECT_EQ(table[2], kNoBlock);
  EXPECT_NE(table[3], kNoBlock);
  EXPECT_EQ(bm.check_invariants(), "");
}

TEST(BlockManagerWindow, PendingTokenAndItsBlockStay) {
  const int bs = 2, window = 2;
  BlockManager bm(window_config(bs, window, 16, 0, true));
  bm.allocate(1, Tokens{1, 2, 3, 4});
  bm.append_pending_token(1);  // position 4, a new block
  // Query 5 sees (3, 5]: blocks 0 and 1 (positions 0..3) are dead; the pending block stays.
  EXPECT_EQ(bm.release_blocks_before_window(1), 2);
  EXPECT_TRUE(bm.has_pending_token(1));
  bm.resolve_pending_token(1, 9);
  EXPECT_EQ(bm.check_invariants(), "");
  bm.append_token(1, 10);  // fills block 2
  EXPECT_EQ(live_entries(bm.block_table(1)), 1);
  EXPECT_EQ(bm.check_invariants(), "");
}

TEST(BlockManagerWindow, ForkedSequencesReleaseTheirOwnReferences) {
  const int bs = 2, window = 3;
  BlockManager bm(window_config(bs, window, 16, 0, false));
  bm.allocate(1, Tokens{1, 2, 3, 4, 5});  // blocks of 2, 2, 1
  bm.fork(1, 2);
  const BlockId shared0 = bm.block_table(1)[0];
  // Query 5 sees (2, 5]: block 0 (positions 0, 1) is dead for both, but shared.
  EXPECT_EQ(bm.release_blocks_before_window(1), 1);
  EXPECT_EQ(bm.device_ref_count(shared0), 1);  // still the child's
  EXPECT_EQ(bm.block_table(2)[0], shared0);
  EXPECT_EQ(bm.check_invariants(), "");
  const int free_before = bm.num_free_device_blocks();
  EXPECT_EQ(bm.release_blocks_before_window(2), 1);
  EXPECT_EQ(bm.num_free_device_blocks(), free_before + 1);
  // A fork of a sequence with released entries inherits them.
  bm.fork(2, 3);
  EXPECT_EQ(bm.block_table(3)[0], kNoBlock);
  EXPECT_EQ(bm.device_ref_count(bm.block_table(3)[1]), 3);
  // Copy-on-write of the shared partial last block works as without a window.
  EXPECT_EQ(bm.append_token(3, 6).size(), 1u);
  EXPECT_EQ(bm.check_invariants(), "");
  for (SeqId s : {1, 2, 3}) bm.free(s);
  EXPECT_EQ(bm.num_free_device_blocks(), 16);
}

TEST(BlockManagerWindow, SwapMovesOnlyLiveBlocksAndKeepsReleasedEntries) {
  const int bs = 2, window = 3;
  BlockManager bm(window_config(bs, window, 16, 8, false));
  testing::KvMemorySim mem(16, 8, bs);
  const Tokens tokens = {1, 2, 3, 4, 5, 6, 7};
  bm.allocate(1, tokens);
  mem.write(bm.block_table(1), tokens, 0);
  EXPECT_EQ(bm.release_blocks_before_window(1), 2);  // query 7 sees (4, 7]
  const std::vector<BlockCopy> out = bm.swap_out(1);
  EXPECT_EQ(out.size(), 2u);
  mem.swap_out(out);
  const auto cpu = bm.cpu_block_table(1);
  EXPECT_EQ(cpu[0], kNoBlock);
  EXPECT_EQ(cpu[1], kNoBlock);
  EXPECT_EQ(bm.num_free_cpu_blocks(), 6);
  EXPECT_EQ(bm.num_free_device_blocks(), 16);
  EXPECT_THROW(bm.release_blocks_before_window(1), std::logic_error);
  EXPECT_EQ(bm.check_invariants(), "");
  ASSERT_TRUE(bm.can_swap_in(1));
  const std::vector<BlockCopy> in = bm.swap_in(1);
  EXPECT_EQ(in.size(), 2u);
  mem.swap_in(in);
  EXPECT_EQ(bm.num_used_device_blocks(), 2);
  const auto table = bm.block_table(1);
  EXPECT_EQ(table[1], kNoBlock);
  const std::vector<uint64_t> expected = testing::kv_contents(tokens);
  for (int p = 4; p < 7; ++p) EXPECT_EQ(mem.device.at(table[p / bs]).at(p % bs), expected[p]);
  EXPECT_EQ(bm.check_invariants(), "");
}

TEST(BlockManagerWindow, ReleasedFullBlocksStayInThePrefixCache) {
  const int bs = 2, window = 2;
  BlockManager bm(window_config(bs, window, 16, 0, true));
  testing::KvMemorySim mem(16, 0, bs);
  const Tokens prompt = {1, 2, 3, 4, 5, 6, 7};
  bm.allocate(1, prompt);
  mem.write(bm.block_table(1), prompt, 0);
  const BlockId first = bm.block_table(1)[0];
  EXPECT_EQ(bm.release_blocks_before_window(1), 3);  // query 7 sees (5, 7]
  EXPECT_EQ(bm.num_cached_blocks(), 3);
  // The same prompt again finds all three (the last token is always recomputed).
  const AllocationResult hit = bm.allocate(2, prompt);
  EXPECT_EQ(hit.num_cached_tokens, 6);
  EXPECT_EQ(bm.block_table(2)[0], first);
  std::vector<uint64_t> expected = testing::kv_contents(prompt);
  expected.resize(6);
  EXPECT_EQ(mem.read(bm.block_table(2), 6, false), expected);
  EXPECT_EQ(bm.check_invariants(), "");
}

}  // namespace
}  // namespace pagedserve::cache
