// BlockManager::snapshot() against a brute-force picture rebuilt from the manager's public
// queries and the test's own record of every sequence's tokens (owners from the block tables,
// ref counts, fills, prefix hashes recomputed with hash_full_blocks, the free queue), over long
// random runs; diff_kv_snapshots against applying its delta naively; KvSeqRequests and
// make_kv_map_snapshot against the op stream.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <stdexcept>
#include <vector>

#include "cache/block_hash.h"
#include "cache/block_manager.h"
#include "cache/kv_memory_ops.h"
#include "cache/kv_snapshot.h"

namespace pagedserve::cache {
namespace {

using Tokens = std::vector<int32_t>;

// Applies a delta the obvious way.
KvPoolSnapshot apply_delta(KvPoolSnapshot snap, const KvSnapshotDelta& delta) {
  for (const auto& [id, view] : delta.device) snap.device[id] = view;
  for (const auto& [id, view] : delta.cpu) snap.cpu[id] = view;
  return snap;
}

void expect_diff_is_exact(const KvPoolSnapshot& before, const KvPoolSnapshot& after) {
  const KvSnapshotDiff diff = diff_kv_snapshots(before, after);
  ASSERT_FALSE(diff.resized);
  EXPECT_EQ(apply_delta(before, diff.delta), after);
  // Minimal: every block listed did change, and ids ascend.
  for (const auto& [id, view] : diff.delta.device) EXPECT_FALSE(before.device[id] == view) << id;
  for (const auto& [id, view] : diff.delta.cpu) EXPECT_FALSE(before.cpu[id] == view) << id;
  for (size_t i = 1; i < diff.delta.device.size(); ++i) {
    EXPECT_LT(diff.delta.device[i - 1].first, diff.delta.device[i].first);
  }
}

class SnapshotRunner {
 public:
  SnapshotRunner(int block_size, bool caching, uint32_t seed)
      : block_size_(block_size), rng_(seed) {
    BlockManagerConfig config;
    config.block_size = block_size;
    config.num_device_blocks = 48;
    config.num_cpu_blocks = 24;
    config.enable_prefix_caching = caching;
    config.watermark = 0.0;
    bm_ = std::make_unique<BlockManager>(config);
    for (int d = 0; d < 2; ++d) {
      Tokens doc(40);
      for (int32_t& t : doc) t = uniform(0, 5);
      docs_.push_back(doc);
    }
  }

  void run(int num_ops) {
    KvPoolSnapshot previous = bm_->snapshot();
    for (int op = 0; op < num_ops; ++op) {
      step();
      const KvPoolSnapshot snap = bm_->snapshot();
      check_against_brute_force(snap);
      if (::testing::Test::HasFailure()) {
        ADD_FAILURE() << "after op " << op;
        return;
      }
      expect_diff_is_exact(previous, snap);
      previous = snap;
    }
  }

 private:
  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  SeqId pick(bool swapped) {
    std::vector<SeqId> ids;
    for (const auto& [id, t] : tokens_) {
      if (bm_->is_swapped(id) == swapped) ids.push_back(id);
    }
    return ids.empty() ? 0 : ids[uniform(0, static_cast<int>(ids.size()) - 1)];
  }

  void step() {
    const int r = uniform(0, 99);
    try {
      if (r < 25) {
        const Tokens& doc = docs_[uniform(0, 1)];
        Tokens prompt(doc.begin(), doc.begin() + uniform(1, 36));
        const SeqId id = next_id_++;
        bm_->allocate(id, prompt);
        tokens_[id] = prompt;
      } else if (r < 60) {
        const SeqId id = pick(false);
        if (id == 0) return;
        if (tokens_[id].size() > 60) return free(id);
        const int32_t token = uniform(0, 5);
        bm_->append_token(id, token);
        tokens_[id].push_back(token);
      } else if (r < 68) {
        const SeqId parent = pick(false);
        if (parent == 0) return;
        const SeqId child = next_id_++;
        bm_->fork(parent, child);
        tokens_[child] = tokens_[parent];
      } else if (r < 82) {
        if (tokens_.empty()) return;
        auto it = tokens_.begin();
        std::advance(it, uniform(0, static_cast<int>(tokens_.size()) - 1));
        free(it->first);
      } else if (r < 91) {
        const SeqId id = pick(false);
        if (id != 0 && bm_->can_swap_out(id)) bm_->swap_out(id);
      } else {
        const SeqId id = pick(true);
        if (id != 0 && bm_->can_swap_in(id)) bm_->swap_in(id);
      }
    } catch (const std::runtime_error&) {
      // The pool is short of blocks: the op was refused and changed nothing.
    }
  }

  void free(SeqId id) {
    bm_->free(id);
    tokens_.erase(id);
  }

  void check_against_brute_force(const KvPoolSnapshot& snap) {
    ASSERT_EQ(snap.block_size, block_size_);
    ASSERT_EQ(static_cast<int>(snap.device.size()), bm_->num_total_device_blocks());
    ASSERT_EQ(static_cast<int>(snap.cpu.size()), bm_->num_total_cpu_blocks());
    // Owners, fills and hashes from the tables and the tokens.
    std::map<BlockId, std::vector<SeqId>> device_owners, cpu_owners;
    std::map<BlockId, int> fill;
    std::map<BlockId, uint64_t> expected_hash;
    for (const auto& [id, tokens] : tokens_) {
      const bool swapped = bm_->is_swapped(id);
      const auto table = swapped ? bm_->cpu_block_table(id) : bm_->block_table(id);
      const std::vector<BlockHash> hashes = hash_full_blocks(tokens, block_size_);
      for (size_t i = 0; i < table.size(); ++i) {
        (swapped ? cpu_owners : device_owners)[table[i]].push_back(id);
        const int n = static_cast<int>(tokens.size()) - static_cast<int>(i) * block_size_;
        if (!swapped) {
          fill[table[i]] = std::min(n, block_size_);
          if (i < hashes.size()) expected_hash[table[i]] = hashes[i].low64;
        }
      }
    }
    const std::vector<BlockId> queue = bm_->device_free_queue();
    const std::set<BlockId> queued(queue.begin(), queue.end());
    int used = 0, cached = 0;
    for (BlockId b = 0; b < static_cast<BlockId>(snap.device.size()); ++b) {
      const KvBlockView& view = snap.device[b];
      std::vector<SeqId> owners = device_owners[b];
      std::sort(owners.begin(), owners.end());
      EXPECT_EQ(view.owners, owners) << "device block " << b;
      EXPECT_EQ(view.ref_count, bm_->device_ref_count(b)) << "device block " << b;
      EXPECT_EQ(view.ref_count, static_cast<int>(owners.size())) << "device block " << b;
      if (!owners.empty()) {
        ++used;
        EXPECT_EQ(view.state, KvBlockState::kUsed) << b;
        EXPECT_EQ(view.num_tokens, fill[b]) << b;
        EXPECT_EQ(queued.count(b), 0u) << b;
        if (view.has_hash) {
          ASSERT_TRUE(expected_hash.count(b)) << "a partial block has a hash: " << b;
          EXPECT_EQ(view.hash, expected_hash[b]) << b;
        }
      } else {
        EXPECT_EQ(queued.count(b), 1u) << "an unowned block is not in the free queue: " << b;
        EXPECT_EQ(view.state, view.has_hash ? KvBlockState::kCached : KvBlockState::kFree) << b;
        EXPECT_EQ(view.num_tokens, view.has_hash ? block_size_ : 0) << b;
        cached += view.has_hash ? 1 : 0;
      }
    }
    EXPECT_EQ(used, bm_->num_used_device_blocks());
    EXPECT_EQ(cached, bm_->num_cached_blocks());
    int cpu_used = 0;
    for (BlockId b = 0; b < static_cast<BlockId>(snap.cpu.size()); ++b) {
      std::vector<SeqId> owners = cpu_owners[b];
      std::sort(owners.begin(), owners.end());
      EXPECT_EQ(snap.cpu[b].owners, owners) << "cpu block " << b;
      EXPECT_EQ(snap.cpu[b].ref_count, static_cast<int>(owners.size())) << "cpu block " << b;
      EXPECT_EQ(snap.cpu[b].state, owners.empty() ? KvBlockState::kFree : KvBlockState::kUsed);
      EXPECT_FALSE(snap.cpu[b].has_hash);
      cpu_used += owners.empty() ? 0 : 1;
    }
    EXPECT_EQ(cpu_used, bm_->num_total_cpu_blocks() - bm_->num_free_cpu_blocks());
  }

  int block_size_;
  std::mt19937 rng_;
  std::unique_ptr<BlockManager> bm_;
  std::vector<Tokens> docs_;
  std::map<SeqId, Tokens> tokens_;
  SeqId next_id_ = 1;
};

TEST(KvSnapshotTest, MatchesBruteForceOverRandomRuns) {
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    for (bool caching : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "seed " << seed << (caching ? " caching" : ""));
      SnapshotRunner(seed % 2 == 0 ? 4 : 3, caching, seed).run(400);
    }
  }
}

TEST(KvSnapshotTest, SharedPrefixAndCachedBlocks) {
  BlockManagerConfig config;
  config.block_size = 4;
  config.num_device_blocks = 8;
  config.num_cpu_blocks = 0;
  BlockManager bm(config);
  const Tokens prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};  // two full blocks and a partial one
  bm.allocate(1, prompt);
  bm.fork(1, 2);
  bm.fork(1, 3);
  KvPoolSnapshot snap = bm.snapshot();
  const std::vector<BlockId> table(bm.block_table(1).begin(), bm.block_table(1).end());
  for (BlockId b : table) {
    EXPECT_EQ(snap.device[b].ref_count, 3);
    EXPECT_EQ(snap.device[b].owners, (std::vector<SeqId>{1, 2, 3}));
  }
  EXPECT_EQ(snap.device[table[2]].num_tokens, 2);
  EXPECT_FALSE(snap.device[table[2]].has_hash);  // partial: not in the prefix cache
  EXPECT_EQ(snap.device[table[0]].hash, hash_full_blocks(prompt, 4)[0].low64);
  for (SeqId s : {1, 2, 3}) bm.free(s);
  snap = bm.snapshot();
  EXPECT_EQ(snap.device[table[0]].state, KvBlockState::kCached);
  EXPECT_EQ(snap.device[table[1]].state, KvBlockState::kCached);
  EXPECT_EQ(snap.device[table[2]].state, KvBlockState::kFree);
  EXPECT_TRUE(snap.device[table[0]].owners.empty());
}

TEST(KvSnapshotTest, DiffOfRandomPicturesIsExact) {
  std::mt19937 rng(7);
  auto random_view = [&] {
    KvBlockView view;
    view.state = static_cast<KvBlockState>(rng() % 3);
    view.ref_count = static_cast<int>(rng() % 3);
    view.num_tokens = static_cast<int>(rng() % 5);
    view.has_hash = rng() % 2 == 0;
    view.hash = view.has_hash ? rng() % 4 : 0;
    for (uint32_t i = rng() % 3; i > 0; --i) view.owners.push_back(rng() % 4);
    return view;
  };
  for (int round = 0; round < 200; ++round) {
    KvPoolSnapshot a, b;
    a.block_size = b.block_size = 16;
    for (int i = 0; i < 20; ++i) {
      a.device.push_back(random_view());
      b.device.push_back(rng() % 3 == 0 ? random_view() : a.device.back());
    }
    for (int i = 0; i < 5; ++i) {
      a.cpu.push_back(random_view());
      b.cpu.push_back(rng() % 2 == 0 ? random_view() : a.cpu.back());
    }
    expect_diff_is_exact(a, b);
  }
  KvPoolSnapshot a, b;
  a.device.resize(3);
  b.device.resize(4);
  EXPECT_TRUE(diff_kv_snapshots(a, b).resized);
  b.device.resize(3);
  b.block_size = 8;
  EXPECT_TRUE(diff_kv_snapshots(a, b).resized);
  EXPECT_TRUE(diff_kv_snapshots(a, a).delta.empty());
}

TEST(KvSnapshotTest, SequencesMapToTheirRequests) {
  KvSeqRequests requests;
  KvMemoryOp allocate = KvMemoryOp::allocate(5, {1, 2, 3}, 3, 3);
  allocate.group = 42;
  requests.observe(allocate);
  requests.observe(KvMemoryOp::fork(5, 6));
  requests.observe(KvMemoryOp::fork(6, 7));
  requests.observe(KvMemoryOp::append(5, 9));  // no change
  EXPECT_EQ(requests.request_of(5), 42u);
  EXPECT_EQ(requests.request_of(7), 42u);
  requests.observe(KvMemoryOp::free(6));
  EXPECT_EQ(requests.request_of(6), 0u);
  EXPECT_EQ(requests.size(), 2u);

  KvPoolSnapshot pool;
  pool.block_size = 4;
  pool.device.resize(3);
  pool.device[0].owners = {5, 7};
  pool.device[2].owners = {7, 9};  // 9: never allocated through an op -> request 0
  const KvMapSnapshot map = make_kv_map_snapshot(3, pool, requests);
  EXPECT_EQ(map.version, 3u);
  EXPECT_EQ(map.seq_requests, (std::vector<std::pair<SeqId, uint64_t>>{{5, 42}, {7, 42}, {9, 0}}));
  EXPECT_EQ(map.pool, pool);
}

}  // namespace
}  // namespace pagedserve::cache
