// Speculative slots in the BlockManager (append_speculative_token, settle_speculative_tokens):
// proposed tokens are never hashed into the prefix cache before they are accepted, rejected
// ones give their slots and emptied blocks back, and the scheduler's PagedKvMirror and the
// KvMemoryApplier follow the same ops exactly. Ends with a randomised run against a simulated
// KV memory that would catch a block published under a rejected token.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <stdexcept>
#include <vector>

#include "cache/block_manager.h"
#include "cache/kv_memory_ops.h"
#include "cache/paged_kv_allocator.h"
#include "cache/paged_kv_mirror.h"
#include "tests/cache/kv_memory_sim.h"

namespace pagedserve::cache {
namespace {

using Tokens = std::vector<int32_t>;

BlockManagerConfig config(int block_size, int num_device_blocks, int num_cpu_blocks = 0) {
  BlockManagerConfig c;
  c.block_size = block_size;
  c.num_device_blocks = num_device_blocks;
  c.num_cpu_blocks = num_cpu_blocks;
  c.enable_prefix_caching = true;
  c.watermark = 0.0;
  return c;
}

TEST(BlockManagerSpeculative, AcceptedProposalsAreHashedOnlyWhenSettled) {
  BlockManager bm(config(4, 8));
  bm.allocate(1, Tokens{1, 2, 3});
  bm.append_token(1, 4);  // block 0 full and hashed: [1 2 3 4]
  for (int32_t t : {5, 6, 7, 8, 9}) bm.append_speculative_token(1, t);
  EXPECT_EQ(bm.num_speculative_tokens(1), 5);
  EXPECT_EQ(bm.num_tokens(1), 9);
  EXPECT_EQ(bm.check_invariants(), "");
  // Block 1 ([5 6 7 8]) is full of proposals: not in the prefix cache yet.
  EXPECT_EQ(bm.cached_prefix_tokens(Tokens{1, 2, 3, 4, 5, 6, 7, 8, 9}), 4);
  EXPECT_EQ(bm.settle_speculative_tokens(1, 4), 1);  // 9 rejected: its block goes back
  EXPECT_EQ(bm.num_tokens(1), 8);
  EXPECT_EQ(bm.block_table(1).size(), 2u);
  EXPECT_EQ(bm.num_speculative_tokens(1), 0);
  EXPECT_EQ(bm.check_invariants(), "");
  EXPECT_EQ(bm.cached_prefix_tokens(Tokens{1, 2, 3, 4, 5, 6, 7, 8, 9}), 8);
  bm.free(1);
  EXPECT_EQ(bm.num_free_device_blocks(), 8);
  EXPECT_EQ(bm.check_invariants(), "");
}

// A draft model's proposals are unknown when their slots are planned: the slots hold
// placeholders, and settling names the accepted tokens, which are what gets hashed.
TEST(BlockManagerSpeculative, SettlingWithTheAcceptedIdsHashesThemNotThePlaceholders) {
  constexpr int32_t kUnknown = -2;
  BlockManager bm(config(4, 8));
  bm.allocate(1, Tokens{1, 2, 3});
  for (int i = 0; i < 4; ++i) bm.append_speculative_token(1, kUnknown);
  EXPECT_THROW(bm.settle_speculative_tokens(1, 2, Tokens{4}), std::logic_error);
  EXPECT_EQ(bm.settle_speculative_tokens(1, 2, Tokens{4, 5}), 0);  // keeps 5 tokens
  EXPECT_EQ(bm.check_invariants(), "");
  EXPECT_EQ(bm.cached_prefix_tokens(Tokens{1, 2, 3, 4, 5, 6}), 4);  // [1 2 3 4], as if appended
  EXPECT_EQ(bm.cached_prefix_tokens(Tokens{1, 2, 3, kUnknown, 5, 6}), 0);
  for (int32_t t : {6, 7, 8}) bm.append_token(1, t);  // block 1: [5 6 7 8], full
  EXPECT_EQ(bm.cached_prefix_tokens(Tokens{1, 2, 3, 4, 5, 6, 7, 8, 9}), 8);
  bm.free(1);
  EXPECT_EQ(bm.num_free_device_blocks(), 8);
}

TEST(BlockManagerSpeculative, RejectedProposalsNeverReachThePrefixCache) {
  BlockManager bm(config(4, 8));
  bm.allocate(1, Tokens{1, 2, 3, 4, 5});
  const int free_before = bm.num_free_device_blocks();
  for (int32_t t : {6, 7, 8, 9, 10, 11}) bm.append_speculative_token(1, t);  // one block more
  EXPECT_EQ(bm.num_free_device_blocks(), free_before - 1);
  EXPECT_EQ(bm.settle_speculative_tokens(1, 1), 1);  // keeps 6, truncates 7..11
  EXPECT_EQ(bm.num_free_device_blocks(), free_before);
  EXPECT_EQ(bm.num_tokens(1), 6);
  EXPECT_EQ(bm.check_invariants(), "");
  // The sequence goes on with other tokens in the rejected slots.
  for (int32_t t : {20, 21}) bm.append_token(1, t);
  EXPECT_EQ(bm.check_invariants(), "");
  EXPECT_EQ(bm.cached_prefix_tokens(Tokens{1, 2, 3, 4, 5, 6, 7, 8, 9}), 4);
  EXPECT_EQ(bm.cached_prefix_tokens(Tokens{1, 2, 3, 4, 5, 6, 20, 21, 0}), 8);
  bm.free(1);
  // Cached-free blocks hold only accepted content.
  EXPECT_EQ(bm.cached_prefix_tokens(Tokens{1, 2, 3, 4, 5, 6, 7, 8, 9}), 4);
  EXPECT_EQ(bm.check_invariants(), "");
}

TEST(BlockManagerSpeculative, OtherOpsWaitForTheSettle) {
  BlockManager bm(config(4, 8, 8));
  bm.allocate(1, Tokens{1, 2});
  bm.append_speculative_token(1, 3);
  EXPECT_THROW(bm.append_token(1, 3), std::logic_error);
  EXPECT_THROW(bm.append_pending_token(1), std::logic_error);
  EXPECT_THROW(bm.fork(1, 2), std::logic_error);
  EXPECT_THROW(bm.swap_out(1), std::logic_error);
  EXPECT_THROW(bm.settle_speculative_tokens(1, 2), std::logic_error);
  EXPECT_THROW(bm.settle_speculative_tokens(1, -1), std::logic_error);
  EXPECT_EQ(bm.check_invariants(), "");
  bm.settle_speculative_tokens(1, 0);
  bm.append_token(1, 3);
  bm.fork(1, 2);
  EXPECT_EQ(bm.check_invariants(), "");
  // A speculative slot after a shared partial block copies it first, as append_token does.
  const std::vector<BlockCopy> copies = bm.append_speculative_token(2, 9);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(bm.settle_speculative_tokens(2, 0), 0);  // the private copy stays (3 tokens)
  EXPECT_EQ(bm.check_invariants(), "");
  bm.append_speculative_token(1, 7);
  bm.free(1);  // fine with unsettled proposals
  bm.free(2);
  EXPECT_EQ(bm.num_free_device_blocks(), 8);
  EXPECT_EQ(bm.check_invariants(), "");
}

TEST(BlockManagerSpeculative, MirrorAndApplierFollowTheSameOps) {
  const BlockManagerConfig c = config(4, 16);
  PagedKvAllocator real(c);
  PagedKvMirror mirror(c);
  KvMemoryOps first = {KvMemoryOp::allocate(1, Tokens{1, 2, 3, 4, 5, 6}, 6, 6)};
  for (int32_t t : {7, 8, 9, 10, 11, 12, 13}) first.push_back(KvMemoryOp::append_speculative(1, t));
  KvMemoryApplier view(mirror, /*record=*/false);
  for (const KvMemoryOp& op : first) view.apply(op);
  KvMemoryResult result = apply_kv_memory_ops(real, first);
  mirror.reconcile(result);
  EXPECT_EQ(mirror.num_free_device_blocks(), real.num_free_device_blocks());
  const KvMemoryOps second = {KvMemoryOp::settle_speculative(1, 2)};
  for (const KvMemoryOp& op : second) view.apply(op);
  // The view alone, before any reply, already counts the truncated blocks as free.
  result = apply_kv_memory_ops(real, second);
  EXPECT_EQ(mirror.num_free_device_blocks(), real.num_free_device_blocks());
  EXPECT_EQ(mirror.num_tokens(1), 8);
  ASSERT_EQ(result.seqs.size(), 1u);
  EXPECT_EQ(result.seqs[0].num_tokens, 8);
  EXPECT_EQ(result.seqs[0].blocks.size(), 2u);
  mirror.reconcile(result);
  EXPECT_EQ(real.block_manager()->check_invariants(), "");
  EXPECT_EQ(real.block_manager()->cached_prefix_tokens(Tokens{1, 2, 3, 4, 5, 6, 7, 8, 0}), 8);
}

// Overlap scheduling plans step N+1 before step N's proposals are verified: N+1's slots (the
// draw of N, then its own proposals) come after N's. Settling N keeps its accepted proposals,
// drops its rejected ones from the middle (N+1's slots move down over them) and leaves N+1's
// speculative; settling N+1 then names N's draw with N+1's accepted proposals.
TEST(BlockManagerSpeculative, ALaterStepsSlotsMoveDownOverTheRejectedOnes) {
  constexpr int32_t kUnknown = -1;
  BlockManager bm(config(4, 8));
  bm.allocate(1, Tokens{1, 2, 3});
  bm.append_token(1, 4);                                           // step N's last token
  for (int32_t t : {5, 6, 7}) bm.append_speculative_token(1, t);   // N's proposals
  bm.append_speculative_token(1, kUnknown);                        // N+1: the draw of N
  for (int32_t t : {8, 9, 10}) bm.append_speculative_token(1, t);  // N+1's proposals
  EXPECT_EQ(bm.num_tokens(1), 11);
  EXPECT_EQ(bm.block_table(1).size(), 3u);
  EXPECT_THROW(bm.settle_speculative_tokens(1, 4, {}, 4), std::logic_error) << "N has only 3";
  EXPECT_THROW(bm.settle_speculative_tokens(1, 0, {}, 8), std::logic_error);
  // N accepts 5 and draws 30: 6 and 7 go, N+1's four slots now start at position 5.
  EXPECT_EQ(bm.settle_speculative_tokens(1, 1, {}, /*num_later=*/4), 0);
  EXPECT_EQ(bm.num_tokens(1), 9);
  EXPECT_EQ(bm.num_speculative_tokens(1), 4);
  EXPECT_EQ(bm.check_invariants(), "");
  EXPECT_EQ(bm.cached_prefix_tokens(Tokens{1, 2, 3, 4, 5, 30, 8, 9, 0}), 4);
  // N+1 accepts 8 after the draw 30 (its proposals were for another draw, but any accepted
  // prefix is what counts here); 9 and 10 go, and with them the third block.
  EXPECT_EQ(bm.settle_speculative_tokens(1, 2, Tokens{30, 8}), 1);
  EXPECT_EQ(bm.num_tokens(1), 7);
  EXPECT_EQ(bm.block_table(1).size(), 2u);
  EXPECT_EQ(bm.num_speculative_tokens(1), 0);
  bm.append_token(1, 11);  // block 1 full: [5 30 8 11]
  EXPECT_EQ(bm.check_invariants(), "");
  EXPECT_EQ(bm.cached_prefix_tokens(Tokens{1, 2, 3, 4, 5, 30, 8, 11, 0}), 8);
  EXPECT_EQ(bm.cached_prefix_tokens(Tokens{1, 2, 3, 4, 5, 6, 7, 0, 0}), 4);
  bm.free(1);
  EXPECT_EQ(bm.num_free_device_blocks(), 8);
}

// The later step's slots keep the tokens they were appended with when they move down: settled
// without ids, they are what gets hashed.
TEST(BlockManagerSpeculative, ALaterStepsSlotsKeepTheirTokensWhenTheyMoveDown) {
  BlockManager bm(config(4, 8));
  bm.allocate(1, Tokens{1, 2, 3, 4});
  for (int32_t t : {5, 6, 7}) bm.append_speculative_token(1, t);
  for (int32_t t : {40, 41}) bm.append_speculative_token(1, t);
  bm.settle_speculative_tokens(1, 1, {}, /*num_later=*/2);  // keeps 5; 40 and 41 move down
  bm.settle_speculative_tokens(1, 2);
  bm.append_token(1, 42);  // block 1: [5 40 41 42]
  EXPECT_EQ(bm.check_invariants(), "");
  EXPECT_EQ(bm.cached_prefix_tokens(Tokens{1, 2, 3, 4, 5, 40, 41, 42, 0}), 8);
  EXPECT_EQ(bm.cached_prefix_tokens(Tokens{1, 2, 3, 4, 5, 6, 7, 42, 0}), 4);
}

TEST(BlockManagerSpeculative, TheMirrorMovesALaterStepsSlotsDownToo) {
  const BlockManagerConfig c = config(4, 16);
  PagedKvAllocator real(c);
  PagedKvMirror mirror(c);
  KvMemoryOps ops = {KvMemoryOp::allocate(1, Tokens{1, 2, 3, 4, 5, 6}, 6, 6)};
  for (int32_t t : {7, 8, 9, 10, -1, 11, 12}) ops.push_back(KvMemoryOp::append_speculative(1, t));
  ops.push_back(KvMemoryOp::settle_speculative(1, 0, {}, /*num_later=*/3));
  KvMemoryApplier view(mirror, /*record=*/false);
  for (const KvMemoryOp& op : ops) view.apply(op);
  const KvMemoryResult result = apply_kv_memory_ops(real, ops);
  EXPECT_EQ(mirror.num_free_device_blocks(), real.num_free_device_blocks());
  EXPECT_EQ(mirror.num_tokens(1), 9);
  ASSERT_EQ(result.seqs.size(), 1u);
  EXPECT_EQ(result.seqs[0].num_tokens, 9);
  EXPECT_EQ(real.block_manager()->num_speculative_tokens(1), 3);
  EXPECT_EQ(real.block_manager()->check_invariants(), "");
}

// Random decode steps with proposals (taken from the shared documents half the time, so that
// later prompts look rejected ones up), settles with a random number accepted, prompts with
// prefix hits, forks, frees and swaps. After every operation: the invariants hold and every
// sequence reads back exactly its accepted tokens' K/V. A block hashed under a rejected token
// would be served to a prompt that starts with those tokens and read back wrong.
class SpeculativeRunner {
 public:
  SpeculativeRunner(int block_size, uint32_t seed)
      : bm_(config(block_size, 48, 48)), mem_(48, 48, block_size), rng_(seed) {
    for (int d = 0; d < 3; ++d) {
      Tokens doc(80);
      for (int32_t& t : doc) t = uniform(0, 5);
      docs_.push_back(doc);
    }
  }

  void run(int num_ops) {
    for (int op = 0; op < num_ops; ++op) {
      const int r = uniform(0, 99);
      if (r < 20) {
        allocate();
      } else if (r < 55) {
        step();
      } else if (r < 70) {
        overlapped_steps();
      } else if (r < 77) {
        fork();
      } else if (r < 87) {
        free_one();
      } else if (r < 94) {
        swap(false);
      } else {
        swap(true);
      }
      ASSERT_EQ(bm_.check_invariants(), "") << "after op " << op;
      for (const auto& [id, tokens] : tokens_) {
        ASSERT_EQ(mem_.read(bm_, id), testing::kv_contents(tokens)) << "sequence " << id;
      }
    }
    while (!tokens_.empty()) {
      bm_.free(tokens_.begin()->first);
      tokens_.erase(tokens_.begin());
    }
    EXPECT_EQ(bm_.num_free_device_blocks(), bm_.num_total_device_blocks());
    EXPECT_EQ(bm_.num_free_cpu_blocks(), bm_.num_total_cpu_blocks());
    EXPECT_EQ(bm_.check_invariants(), "");
  }

  int64_t accepted = 0, rejected = 0, hit_tokens = 0;

 private:
  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  SeqId pick(bool swapped) {
    std::vector<SeqId> ids;
    for (const auto& [id, t] : tokens_) {
      if (bm_.is_swapped(id) == swapped) ids.push_back(id);
    }
    return ids.empty() ? 0 : ids[uniform(0, static_cast<int>(ids.size()) - 1)];
  }

  void allocate() {
    const Tokens& doc = docs_[uniform(0, 2)];
    Tokens prompt(doc.begin(), doc.begin() + uniform(1, 40));
    if (!bm_.can_allocate(prompt)) return;
    const SeqId id = next_id_++;
    const AllocationResult result = bm_.allocate(id, prompt);
    hit_tokens += result.num_cached_tokens;
    mem_.write(bm_.block_table(id), prompt, result.num_cached_tokens);
    tokens_[id] = prompt;
  }

  // One decode step: the known next token, then 0..5 proposals, verified and settled.
  void step() {
    const SeqId id = pick(false);
    if (id == 0) return;
    Tokens& tokens = tokens_[id];
    if (tokens.size() > 90) {
      bm_.free(id);
      tokens_.erase(id);
      return;
    }
    const int num_proposed = uniform(0, 5);
    if (bm_.num_free_device_blocks() < 8) return;  // room for the step's slots
    const Tokens& doc = docs_[uniform(0, 2)];
    const size_t at = tokens.size();
    Tokens row = {at < doc.size() ? doc[at] : 0};
    for (int i = 0; i < num_proposed; ++i) {
      const size_t p = at + 1 + static_cast<size_t>(i);
      row.push_back(uniform(0, 1) == 0 && p < doc.size() ? doc[p] : uniform(0, 5));
    }
    mem_.copy_device(bm_.append_token(id, row[0]));
    for (int i = 1; i <= num_proposed; ++i) {
      mem_.copy_device(bm_.append_speculative_token(id, row[i]));
    }
    Tokens computed = tokens;
    computed.insert(computed.end(), row.begin(), row.end());
    mem_.write(bm_.block_table(id), computed, at);  // the forward pass writes every slot
    const int num_accepted = uniform(0, num_proposed);
    bm_.settle_speculative_tokens(id, num_accepted);
    accepted += num_accepted;
    rejected += num_proposed - num_accepted;
    tokens.insert(tokens.end(), row.begin(), row.begin() + 1 + num_accepted);
  }

  // Two steps in flight, as overlap scheduling runs them: N (the known next token and 0..4
  // proposals) and N+1, planned before N is verified (a speculative slot for N's draw and 0..3
  // proposals). N runs and is settled with N+1's slots left speculative; N+1 then runs with
  // the block table it was planned with, at the positions N's accepted count gives it (its
  // proposals dropped when N rejected any), and is settled.
  void overlapped_steps() {
    const SeqId id = pick(false);
    if (id == 0 || tokens_[id].size() > 90 || bm_.num_free_device_blocks() < 8) return;
    Tokens& tokens = tokens_[id];
    const Tokens& doc = docs_[uniform(0, 2)];
    auto guess = [&](size_t p) {
      return uniform(0, 1) == 0 && p < doc.size() ? doc[p] : uniform(0, 5);
    };
    const size_t at = tokens.size();
    Tokens row_n = {at < doc.size() ? doc[at] : 0};
    const int num_proposed = uniform(0, 4);
    for (int i = 0; i < num_proposed; ++i) row_n.push_back(guess(at + 1 + i));
    const int num_later_proposed = uniform(0, 3);
    Tokens later_proposals;
    for (int i = 0; i < num_later_proposed; ++i) later_proposals.push_back(guess(at + 2 + i));
    // Planned: N, then N+1 before N's verification.
    mem_.copy_device(bm_.append_token(id, row_n[0]));
    for (int i = 1; i <= num_proposed; ++i) {
      mem_.copy_device(bm_.append_speculative_token(id, row_n[i]));
    }
    mem_.copy_device(bm_.append_speculative_token(id, -1));
    for (int32_t t : later_proposals) mem_.copy_device(bm_.append_speculative_token(id, t));
    const std::span<const BlockId> table = bm_.block_table(id);
    const std::vector<BlockId> later_table(table.begin(), table.end());
    // N runs, and is settled.
    Tokens computed = tokens;
    computed.insert(computed.end(), row_n.begin(), row_n.end());
    mem_.write(bm_.block_table(id), computed, at);
    const int num_accepted = uniform(0, num_proposed);
    const int32_t draw = uniform(0, 5);
    bm_.settle_speculative_tokens(id, num_accepted, {}, 1 + num_later_proposed);
    tokens.insert(tokens.end(), row_n.begin(), row_n.begin() + 1 + num_accepted);
    // N+1 runs where N's outcome put it.
    const bool dropped = num_accepted < num_proposed;
    Tokens row_later = {draw};
    if (!dropped) row_later.insert(row_later.end(), later_proposals.begin(), later_proposals.end());
    computed = tokens;
    computed.insert(computed.end(), row_later.begin(), row_later.end());
    mem_.write(later_table, computed, tokens.size());
    const int later_accepted = dropped ? 0 : uniform(0, num_later_proposed);
    Tokens settled = {draw};
    settled.insert(settled.end(), later_proposals.begin(),
                   later_proposals.begin() + later_accepted);
    bm_.settle_speculative_tokens(id, static_cast<int>(settled.size()), settled);
    tokens.insert(tokens.end(), settled.begin(), settled.end());
    accepted += num_accepted + later_accepted;
    rejected += num_proposed - num_accepted + num_later_proposed - later_accepted;
  }

  void fork() {
    const SeqId parent = pick(false);
    if (parent == 0) return;
    const SeqId child = next_id_++;
    bm_.fork(parent, child);
    tokens_[child] = tokens_[parent];
  }

  void free_one() {
    if (tokens_.empty()) return;
    auto it = tokens_.begin();
    std::advance(it, uniform(0, static_cast<int>(tokens_.size()) - 1));
    bm_.free(it->first);
    tokens_.erase(it);
  }

  void swap(bool in) {
    const SeqId id = pick(in);
    if (id == 0) return;
    if (in) {
      if (!bm_.can_swap_in(id)) return;
      mem_.swap_in(bm_.swap_in(id));
    } else {
      if (!bm_.can_swap_out(id)) return;
      mem_.swap_out(bm_.swap_out(id));
    }
  }

  BlockManager bm_;
  testing::KvMemorySim mem_;
  std::mt19937 rng_;
  std::vector<Tokens> docs_;
  std::map<SeqId, Tokens> tokens_;
  SeqId next_id_ = 1;
};

TEST(BlockManagerSpeculative, RandomStepsKeepOnlyAcceptedTokens) {
  for (int block_size : {1, 2, 4, 16}) {
    for (uint32_t seed = 1; seed <= 4; ++seed) {
      SCOPED_TRACE("block_size " + std::to_string(block_size) + " seed " + std::to_string(seed));
      SpeculativeRunner runner(block_size, seed);
      runner.run(1500);
      if (HasFatalFailure()) return;
      EXPECT_GT(runner.accepted, 0);
      EXPECT_GT(runner.rejected, 0);
      EXPECT_GT(runner.hit_tokens, 0);
    }
  }
}

}  // namespace
}  // namespace pagedserve::cache
