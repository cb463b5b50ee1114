// Tests paged_attention against a naive causal attention over contiguous K/V in double.
//
// Every case runs with a float32 cache; many also with float16 and bfloat16 caches, whose K/V
// are the float values rounded to the dtype: the reference then runs on those rounded values,
// and the 16-bit result must equal, bit for bit, a float32 cache holding the same values.
//
// Each case scatters every sequence's K/V across a pool larger than needed, in shuffled block
// order, with random junk in every slot no sequence owns and junk block ids in unused block
// table entries, so reading a wrong block, a wrong offset or past the causal limit all change
// the result. (The helpers are in paged_attention_test_util.h; sliding windows and soft-capping
// are tested in sliding_window_attention_test.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/kernels/paged_attention_test_util.h"

namespace pagedserve::kernels {
namespace {

using testing::AttentionCase;
using testing::describe;
using testing::kAllDtypes;
using testing::make_batch;
using testing::narrow_cache;
using testing::PagedBatch;
using testing::random_int;
using testing::round_batch;
using testing::run_case;

// A decode, a whole prefill and a prefill chunk with earlier context, in one call, around the
// boundaries of 16-token blocks.
TEST(PagedAttention, MixedBatchAcrossBlockBoundaries) {
  std::mt19937 rng(1);
  for (KvDtype dtype : kAllDtypes) {
    run_case(
        {16, 2, 4, 64, 1.0f, {{1, 1}, {16, 1}, {17, 1}, {33, 33}, {50, 10}, {100, 1}, {32, 16}}},
        rng, dtype);
  }
}

TEST(PagedAttention, BlockSizes) {
  std::mt19937 rng(2);
  for (int bs : {1, 2, 3, 5, 8, 16, 17, 32, 100, 128}) {
    // Lengths just below, at and past one and two blocks.
    run_case({bs,
              2,
              2,
              8,
              1.0f,
              {{bs, 1},
               {bs + 1, 1},
               {2 * bs, std::min(2 * bs, 3)},
               {2 * bs + 1, std::min(2 * bs + 1, 9)},
               {1, 1}}},
             rng);
    if (HasFailure()) return;
  }
}

TEST(PagedAttention, HeadDimsAndGqaRatios) {
  std::mt19937 rng(3);
  for (int d : {8, 64, 128, 7, 160, 256}) {  // past 128: the AVX-512 wide paths
    for (int group : {1, 2, 4, 8}) {
      for (KvDtype dtype : kAllDtypes) {
        run_case({8, 2, group, d, 1.0f, {{20, 1}, {9, 4}, {12, 12}}}, rng, dtype);
      }
      if (HasFailure()) return;
    }
  }
}

// More KV heads (x group chunks) than one AVX-512 walk carries (16 units): a task with all the
// heads walks them in several passes, a split task in one; every split gives the same bits.
TEST(PagedAttention, ManyKvHeads) {
  std::mt19937 rng(9);
  for (KvDtype dtype : kAllDtypes) {
    run_case({16, 20, 1, 16, 1.0f, {{40, 40}, {33, 1}, {70, 9}}}, rng, dtype);
    run_case({8, 9, 20, 8, 1.0f, {{30, 30}, {17, 1}}}, rng, dtype);  // 2 units per KV head
    if (HasFailure()) return;
  }
}

// Sharp softmax: scores spread over tens of units, so the running max moves block by block and
// the rescaling of earlier blocks dominates the result.
TEST(PagedAttention, SharpSoftmaxRescales) {
  std::mt19937 rng(4);
  run_case({4, 1, 2, 64, 8.0f, {{61, 1}, {40, 40}, {64, 5}}}, rng);
  run_case({1, 2, 1, 8, 16.0f, {{30, 30}}}, rng);
}

// Prefill query tiles (8 consecutive tokens) that start mid-block and straddle block
// boundaries, after earlier context, with GQA groups at and past the 16 heads one tile walks
// together: only a suffix of each tile sees a tile's last block.
TEST(PagedAttention, QueryTilesStraddlingBlocks) {
  std::mt19937 rng(6);
  for (int group : {1, 16, 20}) {
    for (KvDtype dtype : kAllDtypes) {
      run_case({16, 1, group, 64, 2.0f, {{45, 21}, {37, 37}, {70, 3}}}, rng, dtype);
      run_case({5, 2, group, 24, 2.0f, {{29, 19}, {13, 13}}}, rng, dtype);
    }
    if (HasFailure()) return;
  }
}

TEST(PagedAttention, RandomShapes) {
  std::mt19937 rng(5);
  const int block_sizes[] = {1, 2, 3, 8, 13, 16, 32, 128};  // 8 entries
  const int head_dims[] = {8, 64, 128, 7};
  const int groups[] = {1, 2, 4, 8};
  for (int trial = 0; trial < 120; ++trial) {
    AttentionCase c;
    c.block_size = block_sizes[random_int(rng, 0, 7)];
    c.num_kv_heads = random_int(rng, 1, 2);
    c.group = groups[random_int(rng, 0, 3)];
    c.head_dim = head_dims[random_int(rng, 0, 3)];
    c.scale_factor = std::uniform_real_distribution<float>(0.5f, 4.0f)(rng);
    const int num_seqs = random_int(rng, 1, 4);
    for (int s = 0; s < num_seqs; ++s) {
      switch (random_int(rng, 0, 2)) {
        case 0:
          c.seqs.push_back({random_int(rng, 1, 300), 1});
          break;   // decode
        case 1: {  // whole prefill
          const int len = random_int(rng, 1, 40);
          c.seqs.push_back({len, len});
          break;
        }
        default: {  // prefill chunk after earlier context
          const int q_len = random_int(rng, 2, 24);
          c.seqs.push_back({q_len + random_int(rng, 1, 150), q_len});
        }
      }
    }
    run_case(c, rng, kAllDtypes[trial % 3]);
    if (HasFailure()) return;
  }
}

// Recompute preemption and chunked prefill rely on this: a token's output computed inside a
// prefill query tile (with its tile neighbours, any head split) is bit-identical to the same
// token computed as a decode step (q_len 1, the cache holding exactly its prefix), for every
// dtype and ISA.
TEST(PagedAttention, PrefillTileRowsEqualDecodeSteps) {
  std::mt19937 rng(8);
  static ThreadPool pool(2, /*min_parallel_flops=*/0.0);
  for (KvDtype dtype : kAllDtypes) {
    for (int group : {1, 4, 20}) {
      const AttentionCase c{16, 3, group, 64, 2.0f, {{53, 37}}};  // context 16, then 37 queries
      SCOPED_TRACE(describe(c) << " kv_dtype=" << kv_dtype_name(dtype));
      PagedBatch batch = make_batch(c, rng);
      round_batch(dtype, batch);
      const std::vector<uint16_t> key_bits = narrow_cache(dtype, batch.key_cache);
      const std::vector<uint16_t> value_bits = narrow_cache(dtype, batch.value_cache);
      PagedAttentionParams params;
      params.query = batch.query.data();
      params.key_cache = dtype == KvDtype::kFloat32
                             ? static_cast<const void*>(batch.key_cache.data())
                             : key_bits.data();
      params.value_cache = dtype == KvDtype::kFloat32
                               ? static_cast<const void*>(batch.value_cache.data())
                               : value_bits.data();
      params.kv_dtype = dtype;
      params.query_start_loc = batch.query_start_loc.data();
      params.seq_lens = batch.seq_lens.data();
      params.block_tables = batch.block_tables.data();
      params.num_seqs = 1;
      params.max_blocks_per_seq = batch.max_blocks;
      params.num_heads = c.num_kv_heads * group;
      params.num_kv_heads = c.num_kv_heads;
      params.head_dim = c.head_dim;
      params.block_size = c.block_size;
      params.scale = 2.0f / 8.0f;
      testing::expect_prefill_rows_equal_decode_steps(params, c.seqs[0].seq_len, c.seqs[0].q_len,
                                                      pool);
      if (HasFatalFailure()) return;
    }
  }
}

// Sequences with no queries this step (q_len 0) sit between ones that have some.
TEST(PagedAttention, SequenceWithoutQueries) {
  std::mt19937 rng(6);
  run_case({8, 1, 2, 8, 1.0f, {{10, 0}, {5, 1}, {9, 0}}}, rng);
}

}  // namespace
}  // namespace pagedserve::kernels
