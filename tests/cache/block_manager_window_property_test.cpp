// Randomised property test of the BlockManager with a sliding window: long random runs of
// allocate / step (release_blocks_before_window, then a chunk of 1-3 appends, as the scheduler
// plans a step) / fork / free / swap_out / swap_in / recompute, with prefix caching on or off.
// A brute-force model keeps, per sequence, its tokens and how many leading blocks must be
// released (every position of the block at most q - window for some earlier step's first query
// q, the last block never). After every operation: the invariants hold; each table's released
// entries are exactly the model's; every position the model says is kept reads back its K/V
// through the simulated memory (copies, swaps and prefix hits applied); used device blocks are
// the distinct live entries; and a sequence that has stepped holds about window / block_size + 2.
#include <gtest/gtest.h>

#include <map>
#include <ostream>
#include <random>
#include <set>
#include <stdexcept>
#include <vector>

#include "cache/block_manager.h"
#include "tests/cache/kv_memory_sim.h"

namespace pagedserve::cache {
namespace {

using Tokens = std::vector<int32_t>;

constexpr int kMaxChunk = 3;

struct WindowParam {
  int block_size;
  int window;
  bool caching;
  int num_device_blocks;
  int num_cpu_blocks;
};

void PrintTo(const WindowParam& p, std::ostream* os) {
  *os << "block_size " << p.block_size << " window " << p.window
      << (p.caching ? " caching" : " no caching");
}

struct Model {
  Tokens tokens;
  int released = 0;      // leading blocks that must be released
  bool stepped = false;  // a release ran since the prompt was allocated
};

struct Counters {
  int steps = 0, released_entries = 0, freed_blocks = 0, forks = 0, swap_ins = 0;
  int64_t hit_tokens = 0;
};

class WindowRunner {
 public:
  WindowRunner(const WindowParam& p, uint32_t seed)
      : p_(p),
        bm_(config(p)),
        mem_(p.num_device_blocks, p.num_cpu_blocks, p.block_size),
        rng_(seed) {
    for (int d = 0; d < 3; ++d) {
      Tokens doc(64);
      for (int32_t& t : doc) t = uniform(0, 7);
      docs_.push_back(doc);
    }
  }

  void run(int num_ops) {
    for (int op = 0; op < num_ops; ++op) {
      const int r = uniform(0, 99);
      if (r < 20) {
        do_allocate(random_prompt());
      } else if (r < 65) {
        do_step();
      } else if (r < 72) {
        do_fork();
      } else if (r < 80) {
        do_free();
      } else if (r < 86) {
        do_recompute();
      } else if (r < 93) {
        do_swap_out();
      } else {
        do_swap_in();
      }
      check_all(op);
      if (::testing::Test::HasFatalFailure()) return;
    }
    while (!seqs_.empty()) {
      bm_.free(seqs_.begin()->first);
      seqs_.erase(seqs_.begin());
    }
    EXPECT_EQ(bm_.check_invariants(), "");
    EXPECT_EQ(bm_.num_free_device_blocks(), bm_.num_total_device_blocks());
    EXPECT_EQ(bm_.num_free_cpu_blocks(), bm_.num_total_cpu_blocks());
  }

  const Counters& counters() const { return counters_; }

 private:
  static BlockManagerConfig config(const WindowParam& p) {
    BlockManagerConfig c;
    c.block_size = p.block_size;
    c.num_device_blocks = p.num_device_blocks;
    c.num_cpu_blocks = p.num_cpu_blocks;
    c.enable_prefix_caching = p.caching;
    c.watermark = 0.0;
    c.sliding_window = p.window;
    return c;
  }

  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  SeqId pick(bool swapped) {
    std::vector<SeqId> ids;
    for (const auto& [id, m] : seqs_) {
      if (bm_.is_swapped(id) == swapped) ids.push_back(id);
    }
    return ids.empty() ? 0 : ids[uniform(0, static_cast<int>(ids.size()) - 1)];
  }

  Tokens random_prompt() {
    const Tokens& doc = docs_[uniform(0, 2)];
    Tokens prompt(doc.begin(), doc.begin() + uniform(0, 40));
    const int suffix = uniform(prompt.empty() ? 1 : 0, 6);
    for (int i = 0; i < suffix; ++i) prompt.push_back(uniform(0, 3));
    return prompt;
  }

  int blocks_for(size_t n) const {
    return static_cast<int>((n + p_.block_size - 1) / p_.block_size);
  }

  // The brute-force window: leading blocks whose every position is outside (q - window, q].
  int dead_blocks(int q, int table_size) const {
    int dead = 0;
    for (int b = 0; b + 1 < table_size; ++b) {
      bool all_outside = true;
      for (int j = b * p_.block_size; j < (b + 1) * p_.block_size; ++j) {
        all_outside = all_outside && j <= q - p_.window;
      }
      if (all_outside) dead = b + 1;
    }
    return dead;
  }

  void do_allocate(const Tokens& prompt) {
    if (!bm_.can_allocate(prompt)) return;
    const SeqId id = next_id_++;
    const AllocationResult result = bm_.allocate(id, prompt);
    counters_.hit_tokens += result.num_cached_tokens;
    // The reused prefix (maybe blocks another sequence's window released) holds these tokens.
    std::vector<uint64_t> expected = testing::kv_contents(prompt);
    expected.resize(result.num_cached_tokens);
    ASSERT_EQ(mem_.read(bm_.block_table(id), result.num_cached_tokens, false), expected);
    mem_.write(bm_.block_table(id), prompt, result.num_cached_tokens);
    seqs_[id] = Model{prompt, 0, false};
  }

  void do_step() {
    const SeqId id = pick(false);
    if (id == 0) return;
    Model& m = seqs_[id];
    if (m.tokens.size() > 120) {
      bm_.free(id);
      seqs_.erase(id);
      return;
    }
    const int q = static_cast<int>(m.tokens.size());
    const int used_before = bm_.num_used_device_blocks();
    const int released = bm_.release_blocks_before_window(id);
    m.released = std::max(m.released, dead_blocks(q, blocks_for(m.tokens.size())));
    m.stepped = true;
    ++counters_.steps;
    counters_.released_entries += released;
    counters_.freed_blocks += used_before - bm_.num_used_device_blocks();
    for (int k = uniform(1, kMaxChunk); k > 0; --k) {
      const auto table = bm_.block_table(id);
      const bool partial = m.tokens.size() % p_.block_size != 0;
      if ((!partial || bm_.device_ref_count(table.back()) > 1) &&
          bm_.num_free_device_blocks() == 0) {
        return;  // the scheduler would have preempted; stop the chunk here
      }
      const int32_t token = uniform(0, 3);
      mem_.copy_device(bm_.append_token(id, token));
      m.tokens.push_back(token);
      mem_.write(bm_.block_table(id), m.tokens, m.tokens.size() - 1);
    }
  }

  void do_fork() {
    const SeqId parent = pick(false);
    if (parent == 0) return;
    const SeqId child = next_id_++;
    bm_.fork(parent, child);
    seqs_[child] = seqs_[parent];
    ++counters_.forks;
  }

  void do_free() {
    if (seqs_.empty()) return;
    auto it = seqs_.begin();
    std::advance(it, uniform(0, static_cast<int>(seqs_.size()) - 1));
    bm_.free(it->first);
    seqs_.erase(it);
  }

  // Preemption by recompute: freed, then allocated again with every token so far.
  void do_recompute() {
    const SeqId id = pick(false);
    if (id == 0) return;
    const Tokens tokens = seqs_[id].tokens;
    bm_.free(id);
    seqs_.erase(id);
    do_allocate(tokens);
  }

  void do_swap_out() {
    const SeqId id = pick(false);
    if (id == 0 || !bm_.can_swap_out(id)) return;
    const int live = static_cast<int>(seqs_[id].tokens.size() + p_.block_size - 1) / p_.block_size -
                     seqs_[id].released;
    const std::vector<BlockCopy> copies = bm_.swap_out(id);
    ASSERT_LE(static_cast<int>(copies.size()), live) << "a released block was copied out";
    mem_.swap_out(copies);
  }

  void do_swap_in() {
    const SeqId id = pick(true);
    if (id == 0 || !bm_.can_swap_in(id)) return;
    mem_.swap_in(bm_.swap_in(id));
    ++counters_.swap_ins;
  }

  void check_all(int op) {
    ASSERT_EQ(bm_.check_invariants(), "") << "after op " << op;
    std::set<BlockId> live_device;
    for (const auto& [id, m] : seqs_) {
      const bool swapped = bm_.is_swapped(id);
      const auto table = swapped ? bm_.cpu_block_table(id) : bm_.block_table(id);
      ASSERT_EQ(bm_.num_tokens(id), static_cast<int>(m.tokens.size()));
      ASSERT_EQ(static_cast<int>(table.size()), blocks_for(m.tokens.size()));
      for (int b = 0; b < static_cast<int>(table.size()); ++b) {
        ASSERT_EQ(table[b] == kNoBlock, b < m.released)
            << "sequence " << id << " block " << b << " after op " << op;
        if (!swapped && table[b] != kNoBlock) live_device.insert(table[b]);
      }
      const std::vector<uint64_t> expected = testing::kv_contents(m.tokens);
      const auto& memory = swapped ? mem_.cpu : mem_.device;
      for (size_t p = static_cast<size_t>(m.released) * p_.block_size; p < m.tokens.size(); ++p) {
        ASSERT_EQ(memory.at(table[p / p_.block_size]).at(p % p_.block_size), expected[p])
            << "sequence " << id << " position " << p << " after op " << op;
      }
      if (m.stepped) {
        const int live = static_cast<int>(table.size()) - m.released;
        ASSERT_LE(live, (p_.window + kMaxChunk - 2) / p_.block_size + 2) << "sequence " << id;
      }
    }
    ASSERT_EQ(bm_.num_used_device_blocks(), static_cast<int>(live_device.size()));
  }

  WindowParam p_;
  BlockManager bm_;
  testing::KvMemorySim mem_;
  std::mt19937 rng_;
  std::vector<Tokens> docs_;
  std::map<SeqId, Model> seqs_;
  SeqId next_id_ = 1;
  Counters counters_;
};

class BlockManagerWindowProperty : public ::testing::TestWithParam<WindowParam> {};

TEST_P(BlockManagerWindowProperty, RandomOperationsReleaseExactlyTheDeadBlocks) {
  Counters total;
  for (uint32_t seed = 1; seed <= 3; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    WindowRunner runner(GetParam(), seed);
    runner.run(2000);
    if (HasFatalFailure()) return;
    const Counters& c = runner.counters();
    total.steps += c.steps;
    total.released_entries += c.released_entries;
    total.freed_blocks += c.freed_blocks;
    total.forks += c.forks;
    total.swap_ins += c.swap_ins;
    total.hit_tokens += c.hit_tokens;
  }
  // The run exercises what it claims: releases, releases of blocks a fork still holds (entries
  // released without the block being freed), forks, swaps, and prefix hits when caching.
  EXPECT_GT(total.steps, 1000);
  EXPECT_GT(total.freed_blocks, 40);
  EXPECT_GT(total.released_entries, total.freed_blocks);
  EXPECT_GT(total.forks, 50);
  EXPECT_GT(total.swap_ins, 10);
  if (GetParam().caching) {
    EXPECT_GT(total.hit_tokens, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, BlockManagerWindowProperty,
                         ::testing::Values(WindowParam{4, 8, true, 48, 24},
                                           WindowParam{4, 5, false, 48, 24},
                                           WindowParam{1, 3, true, 160, 64},
                                           WindowParam{16, 20, true, 24, 8},
                                           WindowParam{3, 7, true, 40, 12}),
                         [](const ::testing::TestParamInfo<WindowParam>& info) {
                           return "bs" + std::to_string(info.param.block_size) + "_w" +
                                  std::to_string(info.param.window) +
                                  (info.param.caching ? "_caching" : "_nocaching");
                         });

}  // namespace
}  // namespace pagedserve::cache
