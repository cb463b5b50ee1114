// KV-cache events (cache/kv_cache_events.h) against an independent model of what a router
// mirroring the cache would hold. Random workloads (prompts sharing prefixes, salts, appends,
// pending tokens, forks, frees, swaps, a small pool so prefixes are evicted, sliding windows,
// resets) drive a BlockManager with a recorder; after every operation the recorded events are
// replayed into the model, which checks: a stored block's parent is in the model when the block
// arrives (or nil for a first block); every hash a store names is new to the model and every
// hash a removal names is in it; each stored block's tokens, appended to its parent chain's,
// are a prefix of a live sequence's tokens, and its hash is the chained hash of those tokens;
// and the model's hashes are exactly the manager's prefix-cache index. Plus the recorder's
// merging and the reset's clear on small fixed cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <random>
#include <set>
#include <stdexcept>
#include <unordered_map>
#include <variant>
#include <vector>

#include "cache/block_manager.h"
#include "cache/kv_cache_events.h"

namespace pagedserve::cache {
namespace {

using Tokens = std::vector<int32_t>;

const char* const kSalt = "tenant";

// What a router learns from the events: hash -> the tokens from the root through that block.
class MirrorModel {
 public:
  MirrorModel(int block_size, bool strict_parents)
      : block_size_(block_size), strict_parents_(strict_parents) {}

  // `live`: every live sequence's tokens (a stored block must be a prefix of one of them).
  void apply(const std::vector<KvCacheEvent>& events, const std::vector<const Tokens*>& live) {
    for (const KvCacheEvent& event : events) {
      if (const auto* stored = std::get_if<KvBlockStored>(&event)) {
        apply_stored(*stored, live);
      } else if (const auto* removed = std::get_if<KvBlockRemoved>(&event)) {
        ASSERT_FALSE(removed->block_hashes.empty());
        for (const BlockHash& hash : removed->block_hashes) {
          ASSERT_EQ(present_.erase(hash), 1u) << "a removal of a hash that is not stored";
          ++num_removed;
        }
      } else {
        present_.clear();
        ++num_cleared;
      }
      if (::testing::Test::HasFatalFailure()) return;
    }
  }

  std::set<std::pair<uint64_t, uint64_t>> hashes() const {
    std::set<std::pair<uint64_t, uint64_t>> out;
    for (const auto& [hash, chain] : present_) out.emplace(hash.low64, hash.high64);
    return out;
  }

  int num_stored = 0, num_restored = 0, num_removed = 0, num_cleared = 0, num_orphans = 0;

 private:
  void apply_stored(const KvBlockStored& e, const std::vector<const Tokens*>& live) {
    ASSERT_FALSE(e.block_hashes.empty());
    ASSERT_EQ(e.token_ids.size(), e.block_hashes.size() * block_size_);
    std::optional<BlockHash> parent = e.parent;
    for (size_t k = 0; k < e.block_hashes.size(); ++k) {
      const BlockHash& hash = e.block_hashes[k];
      const Tokens block(e.token_ids.begin() + k * block_size_,
                         e.token_ids.begin() + (k + 1) * block_size_);
      Tokens chain;
      if (parent) {
        if (auto it = present_.find(*parent); it != present_.end()) {
          chain = it->second;
        } else {
          ASSERT_FALSE(strict_parents_) << "a block stored before its parent";
          auto old = ever_.find(*parent);
          ASSERT_NE(old, ever_.end()) << "a parent that was never stored";
          chain = old->second;
          ++num_orphans;
        }
        ASSERT_EQ(hash, hash_block(*parent, block)) << "hash does not match its tokens";
      } else {
        ASSERT_TRUE(hash == hash_block(kRootBlockHash, block) ||
                    hash == hash_block(kRootBlockHash, block, kSalt))
            << "first block's hash does not match its tokens";
      }
      chain.insert(chain.end(), block.begin(), block.end());
      const bool known = std::any_of(live.begin(), live.end(), [&](const Tokens* t) {
        return t->size() >= chain.size() && std::equal(chain.begin(), chain.end(), t->begin());
      });
      ASSERT_TRUE(known) << "stored tokens are no live sequence's prefix";
      ASSERT_TRUE(present_.emplace(hash, chain).second) << "a hash stored twice";
      num_restored += ever_.count(hash) != 0 ? 1 : 0;
      ever_[hash] = chain;
      ++num_stored;
      parent = hash;
    }
  }

  int block_size_;
  bool strict_parents_;
  std::unordered_map<BlockHash, Tokens, BlockHashHasher> present_;
  std::unordered_map<BlockHash, Tokens, BlockHashHasher> ever_;
};

struct EventsParam {
  int block_size;
  int num_device_blocks;
  int num_cpu_blocks;
  int window;  // 0: none
};

void PrintTo(const EventsParam& p, std::ostream* os) {
  *os << "block_size " << p.block_size << ", " << p.num_device_blocks << " device / "
      << p.num_cpu_blocks << " cpu blocks, window " << p.window;
}

struct SeqModel {
  Tokens tokens;
  bool pending = false;  // the last token is a placeholder until resolved
};

class EventsRunner {
 public:
  EventsRunner(const EventsParam& p, uint32_t seed)
      : p_(p), model_(p.block_size, /*strict_parents=*/p.window == 0), rng_(seed) {
    reset_manager();
    for (int d = 0; d < 3; ++d) {
      Tokens doc(64);
      for (int32_t& t : doc) t = uniform(0, 7);
      docs_.push_back(doc);
    }
  }

  void run(int num_ops) {
    for (int op = 0; op < num_ops; ++op) {
      const int r = uniform(0, 99);
      if (r < 22) {
        do_allocate();
      } else if (r < 50) {
        do_append(/*pending=*/false);
      } else if (r < 56) {
        do_append(/*pending=*/true);
      } else if (r < 62) {
        do_resolve();
      } else if (r < 68) {
        do_fork();
      } else if (r < 84) {
        do_free();
      } else if (r < 91) {
        do_swap_out();
      } else if (r < 99) {
        do_swap_in();
      } else {
        do_reset();
      }
      check(op);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }

  const MirrorModel& model() const { return model_; }

 private:
  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  void reset_manager() {
    BlockManagerConfig c;
    c.block_size = p_.block_size;
    c.num_device_blocks = p_.num_device_blocks;
    c.num_cpu_blocks = p_.num_cpu_blocks;
    c.watermark = 0.0;
    c.sliding_window = p_.window;
    bm_ = std::make_unique<BlockManager>(c);
    bm_->set_event_recorder(&recorder_);
    seqs_.clear();
  }

  SeqId pick(bool swapped, bool allow_pending) {
    std::vector<SeqId> ids;
    for (const auto& [id, s] : seqs_) {
      if (bm_->is_swapped(id) == swapped && (allow_pending || !s.pending)) ids.push_back(id);
    }
    return ids.empty() ? 0 : ids[uniform(0, static_cast<int>(ids.size()) - 1)];
  }

  void do_allocate() {
    const Tokens& doc = docs_[uniform(0, 2)];
    Tokens prompt(doc.begin(), doc.begin() + uniform(0, 48));
    const int suffix = uniform(prompt.empty() ? 1 : 0, 10);
    for (int i = 0; i < suffix; ++i) prompt.push_back(uniform(0, 3));
    const std::string salt = uniform(0, 4) == 0 ? kSalt : "";
    try {
      bm_->allocate(next_id_, prompt, salt);
    } catch (const std::runtime_error&) {
      return;  // short of blocks: nothing changed
    }
    seqs_[next_id_++] = SeqModel{prompt};
  }

  void do_append(bool pending) {
    const SeqId id = pick(false, false);
    if (id == 0) return;
    SeqModel& s = seqs_[id];
    if (s.tokens.size() > 72) {  // keep sequences short so the pool turns over
      bm_->free(id);
      seqs_.erase(id);
      return;
    }
    bm_->release_blocks_before_window(id);
    const int32_t token = uniform(0, 3);
    try {
      if (pending) {
        bm_->append_pending_token(id);
      } else {
        bm_->append_token(id, token);
      }
    } catch (const std::runtime_error&) {
      return;  // no free block
    }
    s.tokens.push_back(token);  // a pending token's value, known to the model already
    s.pending = pending;
  }

  void do_resolve() {
    for (auto& [id, s] : seqs_) {
      if (!s.pending) continue;
      bm_->resolve_pending_token(id, s.tokens.back());
      s.pending = false;
      return;
    }
  }

  void do_fork() {
    const SeqId parent = pick(false, false);
    if (parent == 0) return;
    bm_->fork(parent, next_id_);
    seqs_[next_id_++] = seqs_[parent];
  }

  void do_free() {
    if (seqs_.empty()) return;
    auto it = seqs_.begin();
    std::advance(it, uniform(0, static_cast<int>(seqs_.size()) - 1));
    bm_->free(it->first);
    seqs_.erase(it);
  }

  void do_swap_out() {
    const SeqId id = pick(false, false);
    if (id == 0 || !bm_->can_swap_out(id)) return;
    bm_->swap_out(id);
  }

  void do_swap_in() {
    const SeqId id = pick(true, true);
    if (id == 0) return;
    try {
      bm_->swap_in(id);
    } catch (const std::runtime_error&) {
    }
  }

  // What the prefix-cache actor does on a reset request: drop the allocator, start over.
  void do_reset() {
    recorder_.cache_cleared(bm_->cached_block_hashes());
    reset_manager();
  }

  void check(int op) {
    ASSERT_EQ(bm_->check_invariants(), "") << "after op " << op;
    std::vector<const Tokens*> live;
    for (const auto& [id, s] : seqs_) live.push_back(&s.tokens);
    model_.apply(recorder_.take(), live);
    ASSERT_FALSE(::testing::Test::HasFatalFailure()) << "after op " << op;
    std::set<std::pair<uint64_t, uint64_t>> index;
    for (const BlockHash& h : bm_->cached_block_hashes()) index.emplace(h.low64, h.high64);
    ASSERT_EQ(model_.hashes(), index) << "the events disagree with the index after op " << op;
  }

  EventsParam p_;
  KvEventRecorder recorder_;
  std::unique_ptr<BlockManager> bm_;
  MirrorModel model_;
  std::mt19937 rng_;
  std::vector<Tokens> docs_;
  std::map<SeqId, SeqModel> seqs_;
  SeqId next_id_ = 1;
};

class KvCacheEventsProperty : public ::testing::TestWithParam<EventsParam> {};

TEST_P(KvCacheEventsProperty, EventsMirrorTheIndex) {
  int stored = 0, restored = 0, removed = 0, cleared = 0;
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    EventsRunner runner(GetParam(), seed);
    runner.run(1500);
    if (HasFatalFailure()) return;
    stored += runner.model().num_stored;
    restored += runner.model().num_restored;
    removed += runner.model().num_removed;
    cleared += runner.model().num_cleared;
  }
  // The workload must reach the interesting cases: evictions, blocks stored again after their
  // eviction (recomputed or swapped back in), and resets.
  EXPECT_GT(stored, 200);
  EXPECT_GT(removed, 50);
  EXPECT_GT(restored, 20);
  EXPECT_GT(cleared, 0);
}

INSTANTIATE_TEST_SUITE_P(Workloads, KvCacheEventsProperty,
                         ::testing::Values(EventsParam{1, 24, 0, 0}, EventsParam{4, 16, 8, 0},
                                           EventsParam{4, 40, 40, 0}, EventsParam{8, 12, 12, 0},
                                           EventsParam{4, 24, 8, 8}, EventsParam{2, 30, 0, 6}));

// ---- fixed cases ----

BlockManagerConfig small_config(int num_device_blocks) {
  BlockManagerConfig c;
  c.block_size = 2;
  c.num_device_blocks = num_device_blocks;
  c.watermark = 0.0;
  return c;
}

TEST(KvCacheEvents, APromptIsOneStoredEventWithItsChain) {
  KvEventRecorder recorder;
  BlockManager bm(small_config(8));
  bm.set_event_recorder(&recorder);
  bm.allocate(1, Tokens{5, 6, 7, 8, 9});  // two full blocks and one partial
  const std::vector<KvCacheEvent> events = recorder.take();
  ASSERT_EQ(events.size(), 1u);
  const auto& stored = std::get<KvBlockStored>(events[0]);
  const BlockHash first = hash_block(kRootBlockHash, Tokens{5, 6});
  EXPECT_EQ(stored.parent, std::nullopt);
  EXPECT_EQ(stored.block_hashes, (std::vector<BlockHash>{first, hash_block(first, Tokens{7, 8})}));
  EXPECT_EQ(stored.token_ids, (Tokens{5, 6, 7, 8}));
  EXPECT_TRUE(recorder.empty());

  // The append that fills the third block stores it alone, under its parent.
  bm.append_token(1, 10);
  const std::vector<KvCacheEvent> more = recorder.take();
  ASSERT_EQ(more.size(), 1u);
  const auto& third = std::get<KvBlockStored>(more[0]);
  EXPECT_EQ(third.parent, stored.block_hashes[1]);
  EXPECT_EQ(third.token_ids, (Tokens{9, 10}));
}

TEST(KvCacheEvents, EvictionIsARemovalOfTheReusedBlocksHash) {
  KvEventRecorder recorder;
  BlockManager bm(small_config(2));
  bm.set_event_recorder(&recorder);
  bm.allocate(1, Tokens{1, 2, 3});
  bm.free(1);  // block {1, 2} stays cached-free
  recorder.take();
  // Needs both blocks: {7, 8} takes the unhashed one (the free queue's front), then the partial
  // {9} evicts {1, 2}.
  bm.allocate(2, Tokens{7, 8, 9});
  const std::vector<KvCacheEvent> events = recorder.take();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(std::get<KvBlockStored>(events[0]).token_ids, (Tokens{7, 8}));
  EXPECT_EQ(std::get<KvBlockRemoved>(events[1]).block_hashes,
            std::vector<BlockHash>{hash_block(kRootBlockHash, Tokens{1, 2})});
}

TEST(KvCacheEvents, AParentEvictedUnderADuplicateIsStoredAgainBeforeItsChild) {
  KvEventRecorder recorder;
  BlockManager bm(small_config(4));
  bm.set_event_recorder(&recorder);
  // Sequence 1 holds {1, 2} (indexed). Sequence 2 computes the same block by decoding: its copy
  // is a duplicate, not indexed.
  bm.allocate(1, Tokens{1, 2, 3});
  bm.allocate(2, Tokens{1});
  bm.append_token(2, 2);
  bm.free(1);  // the indexed {1, 2} becomes cached-free; the free pool is now 3 blocks
  bm.allocate(3, Tokens{5, 6, 7, 8, 9});  // takes all three: evicts {1, 2}
  recorder.take();
  ASSERT_EQ(bm.cached_prefix_tokens(Tokens{1, 2, 3}), 0);
  // Sequence 2 fills its second block: its parent {1, 2} is re-entered first.
  bm.free(3);
  bm.append_token(2, 3);
  bm.append_token(2, 4);
  const std::vector<KvCacheEvent> events = recorder.take();
  ASSERT_EQ(events.size(), 1u);
  const auto& stored = std::get<KvBlockStored>(events[0]);
  const BlockHash parent = hash_block(kRootBlockHash, Tokens{1, 2});
  EXPECT_EQ(stored.parent, std::nullopt);
  EXPECT_EQ(stored.block_hashes,
            (std::vector<BlockHash>{parent, hash_block(parent, Tokens{3, 4})}));
  EXPECT_EQ(stored.token_ids, (Tokens{1, 2, 3, 4}));
  EXPECT_EQ(bm.cached_prefix_tokens(Tokens{1, 2, 3, 4, 5}), 4);
}

TEST(KvCacheEvents, ResetRemovesEveryCachedHashThenClears) {
  KvEventRecorder recorder;
  BlockManager bm(small_config(8));
  bm.set_event_recorder(&recorder);
  bm.allocate(1, Tokens{1, 2, 3, 4, 5});
  recorder.take();
  recorder.cache_cleared(bm.cached_block_hashes());
  const std::vector<KvCacheEvent> events = recorder.take();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(std::get<KvBlockRemoved>(events[0]).block_hashes.size(), 2u);
  EXPECT_TRUE(std::holds_alternative<KvAllBlocksCleared>(events[1]));
}

TEST(KvCacheEvents, RecorderMergesOnlyContinuingChains) {
  KvEventRecorder recorder;
  const BlockHash a{1, 1}, b{2, 2}, c{3, 3}, x{9, 9};
  recorder.block_stored(a, std::nullopt, Tokens{1});
  recorder.block_stored(b, a, Tokens{2});  // continues a: merged
  recorder.block_stored(c, x, Tokens{3});  // another chain: a new event
  recorder.block_removed(a);
  recorder.block_removed(b);               // merged with the removal before
  recorder.block_stored(x, c, Tokens{4});  // after a removal: a new event
  const std::vector<KvCacheEvent> events = recorder.take();
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(std::get<KvBlockStored>(events[0]).block_hashes, (std::vector<BlockHash>{a, b}));
  EXPECT_EQ(std::get<KvBlockStored>(events[0]).token_ids, (Tokens{1, 2}));
  EXPECT_EQ(std::get<KvBlockStored>(events[1]).parent, x);
  EXPECT_EQ(std::get<KvBlockRemoved>(events[2]).block_hashes, (std::vector<BlockHash>{a, b}));
  EXPECT_EQ(std::get<KvBlockStored>(events[3]).parent, c);
}

TEST(KvCacheEvents, RecorderMustBeAttachedBeforeTheFirstAllocate) {
  KvEventRecorder recorder;
  BlockManager bm(small_config(4));
  bm.allocate(1, Tokens{1, 2, 3});
  EXPECT_THROW(bm.set_event_recorder(&recorder), std::logic_error);
}

TEST(KvCacheEvents, NothingIsRecordedWithoutARecorder) {
  // The same workload with and without a recorder leaves the same index: recording changes no
  // decision.
  BlockManager plain(small_config(6));
  BlockManager recorded(small_config(6));
  KvEventRecorder recorder;
  recorded.set_event_recorder(&recorder);
  for (BlockManager* bm : {&plain, &recorded}) {
    bm->allocate(1, Tokens{1, 2, 3, 4, 5});
    bm->allocate(2, Tokens{1, 2, 3, 9});
    bm->append_token(2, 9);
    bm->free(1);
    bm->allocate(3, Tokens{7, 7, 7, 7, 7});
  }
  std::vector<BlockHash> a = plain.cached_block_hashes(), b = recorded.cached_block_hashes();
  const auto order = [](const BlockHash& x, const BlockHash& y) {
    return std::pair(x.low64, x.high64) < std::pair(y.low64, y.high64);
  };
  std::sort(a.begin(), a.end(), order);
  std::sort(b.begin(), b.end(), order);
  EXPECT_EQ(a, b);
  EXPECT_FALSE(recorder.empty());
}

}  // namespace
}  // namespace pagedserve::cache
