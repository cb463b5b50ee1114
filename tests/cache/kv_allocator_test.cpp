// The KV allocators behind cache::KvAllocator: first-fit placement, region sizes per policy,
// the memory breakdown against hand-computed cases, spare regions for forks, and no leaks.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <random>
#include <vector>

#include "cache/paged_kv_allocator.h"
#include "cache/reserving_kv_allocator.h"

namespace pagedserve::cache {
namespace {

BlockManagerConfig pool(int num_blocks, int block_size) {
  BlockManagerConfig config;
  config.block_size = block_size;
  config.num_device_blocks = num_blocks;
  config.watermark = 0.0;
  config.enable_prefix_caching = false;
  return config;
}

SeqReservation future(uint64_t group, int prompt, int hint, int max_tokens, int max_model_len,
                      int num_regions = 1) {
  SeqReservation f;
  f.group = group;
  f.prompt_len = prompt;
  f.current_len = prompt;
  f.output_len_hint = hint;
  f.max_output_len = max_tokens;
  f.max_model_len = max_model_len;
  f.num_regions = num_regions;
  return f;
}

std::vector<int32_t> tokens(int n) { return std::vector<int32_t>(n, 7); }

TEST(FirstFitRegions, TakesTheLowestHoleThatFitsAndMergesOnFree) {
  FirstFitRegions regions(10);
  const Region a = *regions.allocate(3);
  const Region b = *regions.allocate(2);
  const Region c = *regions.allocate(4);
  EXPECT_EQ(a, (Region{0, 3}));
  EXPECT_EQ(b, (Region{3, 2}));
  EXPECT_EQ(c, (Region{5, 4}));
  regions.free(b);
  EXPECT_EQ(regions.holes(), (std::vector<Region>{{3, 2}, {9, 1}}));
  // First fit: the 1-block request takes the hole at 3, not the exact fit at 9.
  EXPECT_EQ(*regions.allocate(1), (Region{4 - 1, 1}));
  // Two blocks are free (4 and 9) but not together: external fragmentation refuses 2.
  EXPECT_EQ(regions.num_free_blocks(), 2);
  EXPECT_FALSE(regions.allocate(2).has_value());
  EXPECT_EQ(regions.largest_hole(), 1);
  regions.free(a);
  regions.free(c);
  regions.free({3, 1});
  EXPECT_EQ(regions.holes(), (std::vector<Region>{{0, 10}}));
  EXPECT_EQ(regions.num_free_blocks(), 10);
}

TEST(FirstFitRegions, RefusesToFreeWhatIsNotAllocated) {
  FirstFitRegions regions(8);
  const Region a = *regions.allocate(4);
  EXPECT_THROW(regions.free({4, 2}), std::logic_error);  // already free
  EXPECT_THROW(regions.free({6, 4}), std::logic_error);  // outside the pool
  regions.free(a);
  EXPECT_THROW(regions.free(a), std::logic_error);  // twice
}

// The reference: a free bit per block. A run of n starts at the lowest multiple of alignment
// with n free blocks from there; the holes are the maximal runs of free blocks.
class BruteForceRegions {
 public:
  explicit BruteForceRegions(int num_blocks) : free_(num_blocks, true) {}

  std::optional<Region> allocate(int n, int alignment) {
    const int start = lowest_fit(n, alignment);
    if (start < 0) return std::nullopt;
    for (int i = start; i < start + n; ++i) free_[i] = false;
    return Region{start, n};
  }
  void free(Region r) {
    for (int i = r.start; i < r.start + r.num_blocks; ++i) free_[i] = true;
  }
  bool fits(int n, int alignment) const { return lowest_fit(n, alignment) >= 0; }
  int num_free() const { return static_cast<int>(std::count(free_.begin(), free_.end(), true)); }
  std::vector<Region> holes() const {
    std::vector<Region> out;
    const int size = static_cast<int>(free_.size());
    for (int i = 0; i < size;) {
      if (!free_[i]) {
        ++i;
        continue;
      }
      int j = i;
      while (j < size && free_[j]) ++j;
      out.push_back({i, j - i});
      i = j;
    }
    return out;
  }

 private:
  int lowest_fit(int n, int alignment) const {
    const int size = static_cast<int>(free_.size());
    for (int start = 0; start + n <= size; start += alignment) {
      bool all_free = true;
      for (int i = start; i < start + n && all_free; ++i) all_free = free_[i];
      if (all_free) return start;
    }
    return -1;
  }
  std::vector<bool> free_;
};

// Thousands of random allocations and frees against the brute-force model: the same regions,
// the same holes (so frees merge), the same answers from fits() and largest_hole().
void check_against_brute_force(int pool_size, bool buddy, unsigned seed) {
  std::mt19937 rng(seed);
  FirstFitRegions regions(pool_size);
  BruteForceRegions model(pool_size);
  std::vector<Region> live;
  int allocated = 0, refused = 0;
  for (int op = 0; op < 4000; ++op) {
    SCOPED_TRACE(::testing::Message() << "op " << op);
    if (live.empty() || rng() % 100 < 55) {
      int n = 0, alignment = 1;
      if (buddy) {
        n = 1 << (rng() % 5);  // 1..16, aligned to its size
        alignment = n;
      } else {
        n = 1 + static_cast<int>(rng() % 12);
        alignment = 1 << (rng() % 3);
      }
      const std::optional<Region> got = regions.allocate(n, alignment);
      const std::optional<Region> want = model.allocate(n, alignment);
      ASSERT_EQ(got, want) << "allocate(" << n << ", " << alignment << ")";
      if (got) {
        live.push_back(*got);
        ++allocated;
      } else {
        ++refused;
      }
    } else {
      const size_t i = rng() % live.size();
      regions.free(live[i]);
      model.free(live[i]);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    }
    ASSERT_EQ(regions.holes(), model.holes());
    ASSERT_EQ(regions.num_free_blocks(), model.num_free());
    int largest = 0;
    for (const Region& h : model.holes()) largest = std::max(largest, h.num_blocks);
    ASSERT_EQ(regions.largest_hole(), largest);
    for (int n : {1, 2, 3, 4, 8, 16}) {
      for (int alignment : {1, 2, 4, 8, 16}) {
        ASSERT_EQ(regions.fits(n, alignment), model.fits(n, alignment))
            << "fits(" << n << ", " << alignment << ")";
      }
    }
  }
  // Both outcomes were exercised.
  EXPECT_GT(allocated, 500);
  EXPECT_GT(refused, 50);
}

TEST(FirstFitRegions, AlignedPowerOfTwoRunsMatchABruteForceModel) {
  check_against_brute_force(64, /*buddy=*/true, 1);
  check_against_brute_force(100, /*buddy=*/true, 2);  // not a power of two
}

TEST(FirstFitRegions, MixedSizesAndAlignmentsMatchABruteForceModel) {
  check_against_brute_force(64, /*buddy=*/false, 3);
  check_against_brute_force(37, /*buddy=*/false, 4);
}

TEST(ReservingKvAllocator, RegionSizesFollowThePolicy) {
  const BlockManagerConfig config = pool(1000, 16);
  const ReservingKvAllocator max(KvAllocatorKind::kReserveMax, config);
  const ReservingKvAllocator pow2(KvAllocatorKind::kReservePow2, config);
  const ReservingKvAllocator oracle(KvAllocatorKind::kReserveOracle, config);
  // Prompt 100, true output 30, max_tokens 200, context 2048.
  const SeqReservation told = future(1, 100, 30, 200, 2048);
  EXPECT_EQ(max.region_tokens(told), 2048);
  EXPECT_EQ(pow2.region_tokens(told), 100 + 32);
  EXPECT_EQ(oracle.region_tokens(told), 100 + 30);
  // Not told the true length: max_tokens stands in for it.
  const SeqReservation untold = future(1, 100, 0, 200, 2048);
  EXPECT_EQ(pow2.region_tokens(untold), 100 + 256);
  EXPECT_EQ(oracle.region_tokens(untold), 100 + 200);
  // Never beyond the context limit.
  EXPECT_EQ(pow2.region_tokens(future(1, 1000, 600, 1000, 1500)), 1500);
  // Readmitted after outgrowing a wrong hint: sized for max_tokens.
  SeqReservation outgrown = told;
  outgrown.current_len = 131;
  EXPECT_EQ(oracle.region_tokens(outgrown), 300);
}

// Block size 4, 20 blocks (80 slots), oracle. A: prompt 5, output 4 -> region 9 tokens = 3
// blocks, final slots 5 + 4 - 1 = 8. B: prompt 3, output 2 -> 5 tokens = 2 blocks, final 4.
TEST(ReservingKvAllocator, BreakdownMatchesAHandComputation) {
  ReservingKvAllocator kv(KvAllocatorKind::kReserveOracle, pool(20, 4));
  ASSERT_TRUE(kv.reserve(1, future(10, 5, 4, 100, 0)));
  kv.allocate(1, tokens(5));
  ASSERT_TRUE(kv.reserve(2, future(20, 3, 2, 100, 0)));
  kv.allocate(2, tokens(3));
  EXPECT_EQ(*kv.region_of(1), (Region{0, 3}));
  EXPECT_EQ(*kv.region_of(2), (Region{3, 2}));
  EXPECT_EQ(kv.block_table(1).size(), 2u);  // 5 tokens in blocks of 4

  KvMemoryBreakdown b = kv.memory_breakdown();
  EXPECT_EQ(b.total_slots, 80);
  EXPECT_EQ(b.token_slots, 5 + 3);
  EXPECT_EQ(b.reserved_slots, (8 - 5) + (4 - 3));
  EXPECT_EQ(b.internal_fragment_slots, (12 - 8) + (8 - 4));
  EXPECT_EQ(b.external_fragment_slots, 0);
  EXPECT_EQ(b.free_slots, 15 * 4);

  kv.append_token(1, 7);  // A: 6 tokens
  kv.free(2);
  kv.release_group(20);
  kv.free(1);
  kv.release_group(10);
  ASSERT_TRUE(kv.reserve(3, future(30, 2, 2, 100, 0)));  // 4 tokens = 1 block at 0
  kv.allocate(3, tokens(2));
  ASSERT_TRUE(kv.reserve(4, future(40, 9, 3, 100, 0)));  // 12 tokens = 3 blocks at 1
  kv.allocate(4, tokens(9));
  kv.free(3);
  kv.release_group(30);
  // Holes: [0, 1) and [4, 20): one free slot group of 4 outside the largest hole.
  b = kv.memory_breakdown();
  EXPECT_EQ(b.token_slots, 9);
  EXPECT_EQ(b.reserved_slots, 11 - 9);
  EXPECT_EQ(b.internal_fragment_slots, 12 - 11);
  EXPECT_EQ(b.external_fragment_slots, 4);
  EXPECT_EQ(b.free_slots, 16 * 4);
  EXPECT_EQ(b.token_slots + b.reserved_slots + b.internal_fragment_slots +
                b.external_fragment_slots + b.free_slots,
            b.total_slots);
}

TEST(ReservingKvAllocator, ParallelSamplingReservesSparesAndForksCopy) {
  ReservingKvAllocator kv(KvAllocatorKind::kReserveOracle, pool(40, 4));
  // n = 3: prompt 6, output 6 -> 12 tokens = 3 blocks per region, three regions at once.
  ASSERT_TRUE(kv.reserve(1, future(7, 6, 6, 6, 0, /*num_regions=*/3)));
  EXPECT_EQ(kv.num_free_device_blocks(), 40 - 9);
  EXPECT_EQ(kv.num_spare_regions(7), 2);
  kv.allocate(1, tokens(6));
  const std::vector<BlockCopy> copies = kv.fork(1, 2);
  // The child takes the first spare (blocks 3..5) and gets the parent's 2 filled blocks.
  EXPECT_EQ(copies, (std::vector<BlockCopy>{{0, 3}, {1, 4}}));
  EXPECT_EQ(kv.num_tokens(2), 6);
  kv.fork(1, 3);
  EXPECT_EQ(kv.num_spare_regions(7), 0);
  EXPECT_EQ(kv.num_free_device_blocks(), 40 - 9);  // forks took nothing new
  // A freed sequence's region stays with its group until the group is released.
  kv.free(2);
  EXPECT_EQ(kv.num_spare_regions(7), 1);
  EXPECT_THROW(kv.release_group(7), std::logic_error);  // 1 and 3 still hold regions
  kv.free(1);
  kv.free(3);
  kv.release_group(7);
  EXPECT_EQ(kv.num_free_device_blocks(), 40);
  EXPECT_EQ(kv.memory_breakdown().free_slots, 160);
}

TEST(ReservingKvAllocator, AdmissionAndFailedReservationsLeakNothing) {
  ReservingKvAllocator kv(KvAllocatorKind::kReserveMax, pool(10, 4));
  // reserve-max: 32-token context = 8 blocks per sequence.
  EXPECT_EQ(kv.check_admission(tokens(5), future(1, 5, 3, 10, 32)), AllocStatus::kOk);
  EXPECT_EQ(kv.check_admission(tokens(5), future(1, 5, 3, 10, 48)), AllocStatus::kNever);
  ASSERT_TRUE(kv.reserve(1, future(1, 5, 3, 10, 32)));
  EXPECT_EQ(kv.check_admission(tokens(5), future(2, 5, 3, 10, 32)), AllocStatus::kLater);
  EXPECT_FALSE(kv.reserve(2, future(2, 5, 3, 10, 32)));
  // Two regions for one group cannot fit: all or nothing.
  kv.free(1);
  kv.release_group(1);
  EXPECT_FALSE(kv.reserve(3, future(3, 5, 3, 10, 32, /*num_regions=*/2)));
  EXPECT_EQ(kv.num_free_device_blocks(), 10);
  EXPECT_FALSE(kv.has_sequence(3));
  EXPECT_THROW(kv.allocate(3, tokens(5)), std::logic_error);
  EXPECT_THROW(kv.swap_out(1), std::logic_error);
  EXPECT_EQ(kv.num_free_cpu_blocks(), 0);
}

TEST(ReservingKvAllocator, PlanningSaysWhenARegionIsOutgrown) {
  ReservingKvAllocator kv(KvAllocatorKind::kReserveOracle, pool(10, 4));
  const SeqReservation f = future(1, 3, 2, 10, 0);  // 5 tokens = 2 blocks
  EXPECT_EQ(kv.max_end_tokens(1, false, 1, f), 0);  // one block cannot hold the region
  EXPECT_EQ(kv.max_end_tokens(1, false, 2, f), 5);
  EXPECT_EQ(kv.blocks_to_hold(1, false, 3, f), 2);
  ASSERT_TRUE(kv.reserve(1, f));
  kv.allocate(1, tokens(3));
  EXPECT_EQ(kv.max_end_tokens(1, true, 0, f), 8);  // the region's slots, no new blocks
  EXPECT_EQ(kv.blocks_to_hold(1, true, 8, f), 0);
  EXPECT_EQ(kv.blocks_to_hold(1, true, 9, f), kUnboundedBlocks);
  for (int i = 0; i < 5; ++i) kv.append_token(1, 7);
  EXPECT_THROW(kv.append_token(1, 7), std::runtime_error);
}

BlockManagerConfig buddy_pool(int num_blocks, int block_size) {
  BlockManagerConfig config = pool(num_blocks, block_size);
  config.buddy_regions = true;
  return config;
}

int next_pow2(int n) {
  int p = 1;
  while (p < n) p *= 2;
  return p;
}

// Random requests under each policy: with buddy regions every region is a power of two of
// blocks at a multiple of its size, the smallest such covering region_tokens; without, exactly
// ceil(region_tokens / block_size) blocks. Regions never overlap.
TEST(ReservingKvAllocator, BuddyRegionsArePowersOfTwoAlignedToTheirSize) {
  constexpr int kBlock = 16, kPool = 256;
  for (KvAllocatorKind kind : {KvAllocatorKind::kReserveMax, KvAllocatorKind::kReservePow2,
                               KvAllocatorKind::kReserveOracle}) {
    for (bool buddy : {false, true}) {
      SCOPED_TRACE(::testing::Message() << kv_allocator_name(kind) << (buddy ? " buddy" : ""));
      ReservingKvAllocator kv(kind, buddy ? buddy_pool(kPool, kBlock) : pool(kPool, kBlock));
      std::mt19937 rng(5);
      std::vector<SeqId> live;
      int placed = 0;
      for (SeqId seq = 1; seq <= 300; ++seq) {
        const int prompt = 1 + static_cast<int>(rng() % 300);
        const int output = 1 + static_cast<int>(rng() % 400);
        const SeqReservation f = future(seq, prompt, output, 500, 1024);
        const int tokens_needed = kv.region_tokens(f);
        if (kv.reserve(seq, f)) {
          ++placed;
          kv.allocate(seq, tokens(prompt));
          const Region r = *kv.region_of(seq);
          const int exact = (tokens_needed + kBlock - 1) / kBlock;
          if (buddy) {
            EXPECT_EQ(r.num_blocks, next_pow2(exact)) << tokens_needed << " tokens";
            EXPECT_EQ(r.start % r.num_blocks, 0) << r.start << " + " << r.num_blocks;
          } else {
            EXPECT_EQ(r.num_blocks, exact) << tokens_needed << " tokens";
          }
          live.push_back(seq);
        }
        if (live.size() > 3 && rng() % 2 == 0) {  // free one at random
          const size_t i = rng() % live.size();
          kv.free(live[i]);
          kv.release_group(live[i]);
          live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
        }
        std::vector<bool> used(kPool, false);
        for (SeqId s : live) {
          const Region r = *kv.region_of(s);
          for (int b = r.start; b < r.start + r.num_blocks; ++b) {
            ASSERT_FALSE(used[b]) << "block " << b << " in two regions";
            used[b] = true;
          }
        }
        ASSERT_EQ(kv.num_free_device_blocks(), kPool - std::count(used.begin(), used.end(), true));
      }
      EXPECT_GT(placed, 20);
    }
  }
}

// Block size 4, 8 blocks, oracle. Regions of 1, 2, 1 and 4 blocks (4, 8, 4, 16 tokens): exact
// first fit packs them at 0, 1, 3, 4; buddy puts the 2-block region at 2 (its alignment),
// which leaves block 1 for the next 1-block region.
TEST(ReservingKvAllocator, BuddyPlacementByHand) {
  const int sizes[][2] = {{2, 2}, {5, 3}, {1, 3}, {10, 6}};  // prompt, output
  const BlockId exact_starts[] = {0, 1, 3, 4};
  const BlockId buddy_starts[] = {0, 2, 1, 4};
  for (bool buddy : {false, true}) {
    SCOPED_TRACE(buddy ? "buddy" : "exact");
    ReservingKvAllocator kv(KvAllocatorKind::kReserveOracle, buddy ? buddy_pool(8, 4) : pool(8, 4));
    for (int i = 0; i < 4; ++i) {
      ASSERT_TRUE(kv.reserve(i + 1, future(i + 1, sizes[i][0], sizes[i][1], 100, 0)));
      EXPECT_EQ(kv.region_of(i + 1)->start, buddy ? buddy_starts[i] : exact_starts[i]) << i;
    }
    EXPECT_EQ(kv.num_free_device_blocks(), 0);
  }
}

// Block size 16, 32 blocks (512 slots), oracle; every request prompt 100 + output 50 = 150
// tokens = 10 blocks exactly, 16 under buddy allocation: exact regions admit 3 (30 blocks),
// buddy regions 2 (32 blocks).
TEST(ReservingKvAllocator, BuddyRegionsAdmitFewerSequencesThanExactOnes) {
  for (bool buddy : {false, true}) {
    SCOPED_TRACE(buddy ? "buddy" : "exact");
    ReservingKvAllocator kv(KvAllocatorKind::kReserveOracle,
                            buddy ? buddy_pool(32, 16) : pool(32, 16));
    int admitted = 0;
    for (SeqId seq = 1; seq <= 5; ++seq) {
      const SeqReservation f = future(seq, 100, 50, 200, 2048);
      const AllocStatus status = kv.check_admission(tokens(100), f);
      const bool reserved = kv.reserve(seq, f);
      EXPECT_EQ(status == AllocStatus::kOk, reserved) << seq;
      if (!reserved) {
        EXPECT_EQ(status, AllocStatus::kLater) << seq;
        continue;
      }
      kv.allocate(seq, tokens(100));
      ++admitted;
    }
    EXPECT_EQ(admitted, buddy ? 2 : 3);
    EXPECT_EQ(kv.num_free_device_blocks(), buddy ? 0 : 2);
  }
}

// Block size 16, 24 blocks. A 17-block region (prompt 200 + output 72 = 272 tokens) fits the
// pool exactly but rounds up to 32 blocks under buddy allocation: never admissible. A 13-block
// one rounds up to 16 and fits.
TEST(ReservingKvAllocator, BuddyRoundingCanMakeARequestNeverFit) {
  const ReservingKvAllocator exact(KvAllocatorKind::kReserveOracle, pool(24, 16));
  const ReservingKvAllocator buddy(KvAllocatorKind::kReserveOracle, buddy_pool(24, 16));
  const SeqReservation big = future(1, 200, 72, 100, 2048);
  EXPECT_EQ(exact.check_admission(tokens(200), big), AllocStatus::kOk);
  EXPECT_EQ(buddy.check_admission(tokens(200), big), AllocStatus::kNever);
  const SeqReservation medium = future(1, 150, 58, 100, 2048);  // 208 tokens = 13 blocks
  EXPECT_EQ(buddy.check_admission(tokens(150), medium), AllocStatus::kOk);
  EXPECT_EQ(buddy.blocks_to_hold(1, false, 208, medium), 16);
  EXPECT_EQ(exact.blocks_to_hold(1, false, 208, medium), 13);
}

// A fork that finds no spare region takes a new one from the pool: under buddy allocation it
// too must start at a multiple of its size. Block size 4, 8 blocks: P holds 2 blocks at 0, X
// 1 block at 2; the hole [3, 8) has its first 2-aligned start at 4.
TEST(ReservingKvAllocator, BuddyForkWithoutASpareIsAligned) {
  ReservingKvAllocator kv(KvAllocatorKind::kReserveOracle, buddy_pool(8, 4));
  ASSERT_TRUE(kv.reserve(1, future(1, 5, 3, 100, 0)));  // 8 tokens = 2 blocks
  kv.allocate(1, tokens(5));
  ASSERT_TRUE(kv.reserve(2, future(2, 2, 2, 100, 0)));  // 4 tokens = 1 block
  kv.allocate(2, tokens(2));
  ASSERT_EQ(*kv.region_of(1), (Region{0, 2}));
  ASSERT_EQ(*kv.region_of(2), (Region{2, 1}));
  EXPECT_EQ(kv.num_spare_regions(1), 0);
  const std::vector<BlockCopy> copies = kv.fork(1, 3);
  EXPECT_EQ(*kv.region_of(3), (Region{4, 2}));
  EXPECT_EQ(copies, (std::vector<BlockCopy>{{0, 4}, {1, 5}}));
}

TEST(PagedKvAllocator, BreakdownCountsPartialBlocksAndSharing) {
  PagedKvAllocator kv(pool(10, 4));
  kv.allocate(1, tokens(6));  // 2 blocks, 2 slots of the second unused
  KvMemoryBreakdown b = kv.memory_breakdown();
  EXPECT_EQ(b.token_slots, 6);
  EXPECT_EQ(b.internal_fragment_slots, 2);
  EXPECT_EQ(b.reserved_slots, 0);
  EXPECT_EQ(b.external_fragment_slots, 0);
  EXPECT_EQ(b.free_slots, 32);
  EXPECT_TRUE(kv.fork(1, 2).empty());  // shared, nothing copied
  EXPECT_EQ(kv.num_logical_blocks(), 4);
  EXPECT_EQ(kv.num_used_device_blocks(), 2);
  EXPECT_EQ(kv.memory_breakdown().token_slots, 6);  // shared slots counted once
  // The child's write into the shared partial block copies it first.
  const SeqReservation none;
  EXPECT_EQ(kv.blocks_to_hold(2, true, 7, none), 1);
  EXPECT_EQ(kv.max_end_tokens(2, true, 0, none), 0);
  EXPECT_EQ(kv.append_token(2, 9).size(), 1u);
  kv.free(1);
  kv.free(2);
  EXPECT_EQ(kv.num_free_device_blocks(), 10);
  EXPECT_EQ(kv.num_logical_blocks(), 0);
}

TEST(KvAllocatorKind, ParsesItsNames) {
  EXPECT_EQ(parse_kv_allocator("reserve-pow2"), KvAllocatorKind::kReservePow2);
  EXPECT_STREQ(kv_allocator_name(KvAllocatorKind::kReserveOracle), "reserve-oracle");
  EXPECT_THROW(parse_kv_allocator("buddy"), std::invalid_argument);
  EXPECT_EQ(make_kv_allocator(KvAllocatorKind::kPaged, pool(4, 4))->kind(),
            KvAllocatorKind::kPaged);
}

}  // namespace
}  // namespace pagedserve::cache
