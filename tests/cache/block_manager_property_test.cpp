// Randomised property test: long random runs of allocate / append / fork / free / swap_out /
// swap_in against a model of the expected state (each sequence's tokens, and a simulated KV
// memory that the returned copies and the computed tokens are applied to). After every
// operation: the manager's invariants hold and every sequence reads back exactly its tokens
// through its block table. At the end, with everything freed, every block is free.
#include <gtest/gtest.h>

#include <map>
#include <ostream>
#include <random>
#include <stdexcept>
#include <vector>

#include "cache/block_manager.h"
#include "tests/cache/kv_memory_sim.h"

namespace pagedserve::cache {
namespace {

using Tokens = std::vector<int32_t>;

struct PropertyParam {
  int block_size;
  bool caching;
  int num_device_blocks;
  int num_cpu_blocks;
};

void PrintTo(const PropertyParam& p, std::ostream* os) {
  *os << "block_size " << p.block_size << (p.caching ? " caching" : " no caching") << ", "
      << p.num_device_blocks << " device / " << p.num_cpu_blocks << " cpu blocks";
}

struct Counters {
  int allocations = 0, refused = 0, cow_copies = 0, forks = 0, swap_outs = 0, swap_ins = 0;
  int64_t hit_tokens = 0;
};

class Runner {
 public:
  Runner(const PropertyParam& p, uint32_t seed)
      : p_(p),
        bm_(make_config(p)),
        mem_(p.num_device_blocks, p.num_cpu_blocks, p.block_size),
        rng_(seed) {
    // A few shared "documents" so that prompts share prefixes of various lengths.
    for (int d = 0; d < 3; ++d) {
      Tokens doc(64);
      for (int32_t& t : doc) t = uniform(0, 7);
      docs_.push_back(doc);
    }
  }

  void run(int num_ops) {
    for (int op = 0; op < num_ops; ++op) {
      const int r = uniform(0, 99);
      if (r < 25) {
        do_allocate();
      } else if (r < 55) {
        do_append();
      } else if (r < 63) {
        do_fork();
      } else if (r < 80) {
        do_free();
      } else if (r < 90) {
        do_swap_out();
      } else {
        do_swap_in();
      }
      check_all(op);
      if (::testing::Test::HasFatalFailure()) return;
    }
    while (!tokens_.empty()) {
      bm_.free(tokens_.begin()->first);
      tokens_.erase(tokens_.begin());
      ASSERT_EQ(bm_.check_invariants(), "");
    }
    EXPECT_EQ(bm_.num_free_device_blocks(), bm_.num_total_device_blocks());
    EXPECT_EQ(bm_.num_free_cpu_blocks(), bm_.num_total_cpu_blocks());
    EXPECT_EQ(bm_.stats().num_stored_tokens, 0);
  }

  const Counters& counters() const { return counters_; }

 private:
  static BlockManagerConfig make_config(const PropertyParam& p) {
    BlockManagerConfig c;
    c.block_size = p.block_size;
    c.num_device_blocks = p.num_device_blocks;
    c.num_cpu_blocks = p.num_cpu_blocks;
    c.enable_prefix_caching = p.caching;
    c.watermark = 0.05;
    return c;
  }

  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  // A random sequence with the wanted location (on the device or swapped out), or 0.
  SeqId pick(bool swapped) {
    std::vector<SeqId> ids;
    for (const auto& [id, t] : tokens_) {
      if (bm_.is_swapped(id) == swapped) ids.push_back(id);
    }
    return ids.empty() ? 0 : ids[uniform(0, static_cast<int>(ids.size()) - 1)];
  }

  Tokens random_prompt() {
    const Tokens& doc = docs_[uniform(0, 2)];
    Tokens prompt(doc.begin(), doc.begin() + uniform(0, 40));
    const int suffix = uniform(prompt.empty() ? 1 : 0, 10);
    for (int i = 0; i < suffix; ++i) prompt.push_back(uniform(0, 3));
    return prompt;
  }

  void do_allocate() {
    const Tokens prompt = random_prompt();
    const std::string salt = uniform(0, 4) == 0 ? "tenant" : "";
    const bool admissible = bm_.can_allocate(prompt, salt);
    const int expected_cached = bm_.cached_prefix_tokens(prompt, salt);
    const SeqId id = next_id_++;
    AllocationResult result;
    try {
      result = bm_.allocate(id, prompt, salt);
    } catch (const std::runtime_error&) {
      EXPECT_FALSE(admissible);
      EXPECT_FALSE(bm_.has_sequence(id));
      ++counters_.refused;
      return;
    }
    ++counters_.allocations;
    const int n = static_cast<int>(prompt.size());
    ASSERT_EQ(result.num_cached_tokens, expected_cached);
    ASSERT_EQ(result.num_cached_tokens % p_.block_size, 0);
    ASSERT_LT(result.num_cached_tokens, n);
    counters_.hit_tokens += result.num_cached_tokens;
    const auto table = bm_.block_table(id);
    // The reused prefix must already hold exactly these tokens' K/V.
    std::vector<uint64_t> expected = testing::kv_contents(prompt);
    expected.resize(result.num_cached_tokens);
    ASSERT_EQ(mem_.read(table, result.num_cached_tokens, false), expected);
    for (size_t b = result.num_cached_tokens / p_.block_size; b < table.size(); ++b) {
      ASSERT_EQ(bm_.device_ref_count(table[b]), 1) << "prefill writes into a shared block";
    }
    mem_.write(table, prompt, result.num_cached_tokens);
    tokens_[id] = prompt;
  }

  void do_append() {
    const SeqId id = pick(false);
    if (id == 0) return;
    Tokens& t = tokens_[id];
    if (t.size() > 70) {  // keep sequences short so the pool turns over
      bm_.free(id);
      tokens_.erase(id);
      return;
    }
    const auto table = bm_.block_table(id);
    const BlockId old_last = table.back();
    const bool partial = t.size() % p_.block_size != 0;
    const bool shared = partial && bm_.device_ref_count(old_last) > 1;
    const int32_t token = uniform(0, 3);
    if ((!partial || shared) && bm_.num_free_device_blocks() == 0) {
      EXPECT_THROW(bm_.append_token(id, token), std::runtime_error);
      EXPECT_EQ(bm_.num_tokens(id), static_cast<int>(t.size()));
      return;
    }
    const std::vector<BlockCopy> copies = bm_.append_token(id, token);
    const auto new_table = bm_.block_table(id);
    // A copy exactly when a shared partial block is written, from it to the new last block.
    if (shared) {
      ASSERT_EQ(copies.size(), 1u);
      EXPECT_EQ(copies[0].src, old_last);
      EXPECT_EQ(copies[0].dst, new_table.back());
      ++counters_.cow_copies;
    } else {
      ASSERT_TRUE(copies.empty());
    }
    mem_.copy_device(copies);
    t.push_back(token);
    ASSERT_EQ(bm_.device_ref_count(new_table.back()), 1) << "decode writes into a shared block";
    mem_.write(new_table, t, t.size() - 1);
  }

  void do_fork() {
    const SeqId parent = pick(false);
    if (parent == 0) return;
    const SeqId child = next_id_++;
    bm_.fork(parent, child);
    tokens_[child] = tokens_[parent];
    ++counters_.forks;
  }

  void do_free() {
    if (tokens_.empty()) return;
    auto it = tokens_.begin();
    std::advance(it, uniform(0, static_cast<int>(tokens_.size()) - 1));
    bm_.free(it->first);
    tokens_.erase(it);
  }

  void do_swap_out() {
    const SeqId id = pick(false);
    if (id == 0) return;
    const auto device_table = bm_.block_table(id);
    const std::vector<BlockId> before(device_table.begin(), device_table.end());
    if (!bm_.can_swap_out(id)) {
      EXPECT_THROW(bm_.swap_out(id), std::runtime_error);
      EXPECT_FALSE(bm_.is_swapped(id));
      return;
    }
    const std::vector<BlockCopy> copies = bm_.swap_out(id);
    const auto cpu_table = bm_.cpu_block_table(id);
    for (const BlockCopy& c : copies) {
      const auto pos = std::find(before.begin(), before.end(), c.src) - before.begin();
      ASSERT_LT(pos, static_cast<long>(before.size()));
      ASSERT_EQ(cpu_table[pos], c.dst);
    }
    mem_.swap_out(copies);
    ++counters_.swap_outs;
  }

  void do_swap_in() {
    const SeqId id = pick(true);
    if (id == 0) return;
    const bool admissible = bm_.can_swap_in(id);
    std::vector<BlockCopy> copies;
    try {
      copies = bm_.swap_in(id);
    } catch (const std::runtime_error&) {
      EXPECT_FALSE(admissible);
      EXPECT_TRUE(bm_.is_swapped(id));
      return;
    }
    mem_.swap_in(copies);
    ++counters_.swap_ins;
  }

  void check_all(int op) {
    ASSERT_EQ(bm_.check_invariants(), "") << "after op " << op;
    for (const auto& [id, t] : tokens_) {
      ASSERT_EQ(bm_.num_tokens(id), static_cast<int>(t.size()));
      ASSERT_EQ(mem_.read(bm_, id), testing::kv_contents(t))
          << "sequence " << id << " after op " << op;
    }
    ASSERT_EQ(bm_.num_used_device_blocks() + bm_.num_free_device_blocks(),
              bm_.num_total_device_blocks());
  }

  PropertyParam p_;
  BlockManager bm_;
  testing::KvMemorySim mem_;
  std::mt19937 rng_;
  std::vector<Tokens> docs_;
  std::map<SeqId, Tokens> tokens_;
  SeqId next_id_ = 1;
  Counters counters_;
};

class BlockManagerProperty : public ::testing::TestWithParam<PropertyParam> {};

TEST_P(BlockManagerProperty, RandomOperationsKeepEveryInvariant) {
  const PropertyParam& p = GetParam();
  Counters total;
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Runner runner(p, seed);
    runner.run(2500);
    if (HasFatalFailure()) return;
    const Counters& c = runner.counters();
    total.allocations += c.allocations;
    total.refused += c.refused;
    total.cow_copies += c.cow_copies;
    total.forks += c.forks;
    total.swap_outs += c.swap_outs;
    total.swap_ins += c.swap_ins;
    total.hit_tokens += c.hit_tokens;
  }
  // The run must actually exercise every path it claims to test.
  EXPECT_GT(total.allocations, 100);
  EXPECT_GT(total.refused, 0);
  EXPECT_GT(total.forks, 50);
  EXPECT_GT(total.swap_outs, 50);
  EXPECT_GT(total.swap_ins, 50);
  if (p.block_size > 1) {
    EXPECT_GT(total.cow_copies, 10);
  }
  if (p.caching) {
    EXPECT_GT(total.hit_tokens, 0);
  } else {
    EXPECT_EQ(total.hit_tokens, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, BlockManagerProperty,
                         ::testing::Values(PropertyParam{4, true, 48, 24},
                                           PropertyParam{4, false, 48, 24},
                                           PropertyParam{1, true, 160, 64},
                                           PropertyParam{16, true, 16, 8},
                                           PropertyParam{3, true, 40, 6}),
                         [](const ::testing::TestParamInfo<PropertyParam>& info) {
                           return "bs" + std::to_string(info.param.block_size) +
                                  (info.param.caching ? "_caching" : "_nocaching") + "_cpu" +
                                  std::to_string(info.param.num_cpu_blocks);
                         });

}  // namespace
}  // namespace pagedserve::cache
