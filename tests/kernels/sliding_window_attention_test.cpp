// Tests paged_attention's sliding window and attention-logit soft-capping against the naive
// attention of paged_attention_test_util.h (in double, with HF's mask j > i - window and
// cap * tanh(score / cap)), on every ISA, with float32 and 16-bit caches. With a window, every
// K/V position before the window of a sequence's first query is NaN, so a kernel that reads a
// block wholly before the window (or a position before the window in a block it does read)
// fails; run_case also checks thread splits and batch invariance bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
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
using testing::make_params;
using testing::narrow_cache;
using testing::PagedBatch;
using testing::random_int;
using testing::round_batch;
using testing::run_case;

// Prefill query tiles (8 tokens) whose first query's window starts earlier than its last's, a
// chunk after context, and decodes at, just inside and past the window, with 16-token blocks
// and windows below, at and above the block size, with and without GQA.
TEST(SlidingWindowAttention, PrefillTilesCrossTheWindowEdge) {
  std::mt19937 rng(31);
  for (int window : {1, 3, 8, 16, 17, 40}) {
    for (int group : {1, 4}) {
      for (KvDtype dtype : kAllDtypes) {
        AttentionCase c{16, 2, group, 64, 2.0f, {{37, 37}, {60, 21}, {100, 1}}};
        c.seqs.push_back({window, 1});
        c.seqs.push_back({window + 1, 1});
        c.seqs.push_back({window + 9, window + 9});
        c.sliding_window = window;
        run_case(c, rng, dtype);
      }
      if (HasFailure()) return;
    }
  }
}

// Windows around the block size for block sizes from 1 to 32: the window's start falls at
// every offset of a block, and a query tile spans several blocks or several tiles one block.
TEST(SlidingWindowAttention, WindowsAroundTheBlockSize) {
  std::mt19937 rng(32);
  for (int bs : {1, 3, 4, 16, 32}) {
    for (int window : {1, 2, bs - 1, bs, bs + 1, 2 * bs + 3}) {
      if (window < 1) continue;
      run_case(
          {bs, 1, 2, 8, 1.0f, {{3 * bs + 5, 3 * bs + 5}, {4 * bs + 11, 11}, {5 * bs, 1}}, window},
          rng);
    }
    if (HasFailure()) return;
  }
}

// Long decodes (and a chunk) where the window covers a small part of the context: all but the
// last few blocks are NaN, so reading any of them shows.
TEST(SlidingWindowAttention, LongDecodesSkipWholeBlocks) {
  std::mt19937 rng(33);
  for (KvDtype dtype : kAllDtypes) {
    run_case({16, 2, 4, 64, 1.0f, {{2000, 1}, {1500, 1}, {1037, 1}, {900, 12}}, 64}, rng, dtype);
    run_case({32, 2, 2, 128, 1.0f, {{3000, 1}, {700, 1}}, 100}, rng, dtype);
    if (HasFailure()) return;
  }
}

// Soft-capping with sharp softmaxes, so capped scores saturate near +-cap: Gemma 2's 50, and
// caps small enough that most scores are far into tanh's tails; alone and with a window.
TEST(SlidingWindowAttention, LogitSoftcap) {
  std::mt19937 rng(34);
  for (float cap : {0.5f, 2.0f, 5.0f, 50.0f}) {
    for (KvDtype dtype : kAllDtypes) {
      AttentionCase c{8, 2, 2, 64, 16.0f, {{40, 40}, {70, 1}, {33, 9}}};
      c.logit_softcap = cap;
      run_case(c, rng, dtype);
      c.sliding_window = 12;
      run_case(c, rng, dtype);
    }
    if (HasFailure()) return;
  }
}

// A window at least as long as every context changes nothing: the same bits as no window.
TEST(SlidingWindowAttention, WindowLongerThanContextIsNoWindow) {
  std::mt19937 rng(35);
  const AttentionCase c{16, 2, 2, 64, 2.0f, {{40, 40}, {50, 1}, {64, 10}}};
  const PagedBatch batch = make_batch(c, rng);
  PagedAttentionParams params = make_params(c, batch, 0.25f);
  for (Isa isa : {Isa::kPortable, Isa::kAvx512}) {
    if (!isa_supported(isa)) continue;
    SCOPED_TRACE(isa_name(isa));
    std::vector<float> full(batch.query.size(), std::nanf(""));
    params.out = full.data();
    params.sliding_window = 0;
    paged_attention(params, nullptr, isa);
    for (int window : {64, 65, 1000}) {
      std::vector<float> windowed(batch.query.size(), std::nanf(""));
      params.out = windowed.data();
      params.sliding_window = window;
      paged_attention(params, nullptr, isa);
      EXPECT_EQ(0, std::memcmp(full.data(), windowed.data(), full.size() * sizeof(float)))
          << "window " << window;
    }
  }
}

// Random shapes, windows and caps over decodes, prefills and chunks.
TEST(SlidingWindowAttention, RandomShapes) {
  std::mt19937 rng(36);
  const int block_sizes[] = {1, 2, 5, 8, 16, 32};
  const int head_dims[] = {8, 64, 7, 128};
  for (int trial = 0; trial < 60; ++trial) {
    AttentionCase c;
    c.block_size = block_sizes[random_int(rng, 0, 5)];
    c.num_kv_heads = random_int(rng, 1, 2);
    c.group = 1 << random_int(rng, 0, 3);
    c.head_dim = head_dims[random_int(rng, 0, 3)];
    c.scale_factor = std::uniform_real_distribution<float>(0.5f, 8.0f)(rng);
    c.sliding_window = random_int(rng, 1, 80);
    c.logit_softcap = random_int(rng, 0, 1) ? std::uniform_real_distribution<float>(1, 30)(rng) : 0;
    for (int s = random_int(rng, 1, 4); s > 0; --s) {
      const int q_len = random_int(rng, 0, 2) == 0 ? 1 : random_int(rng, 2, 30);
      c.seqs.push_back({q_len + random_int(rng, 0, 250), q_len});
    }
    run_case(c, rng, kAllDtypes[trial % 3]);
    if (HasFailure()) return;
  }
}

// Recompute preemption and chunked prefill with a window: each token of a prefill (tiles whose
// queries have different windows) gives the bits it gives as a decode step over its prefix.
TEST(SlidingWindowAttention, PrefillTileRowsEqualDecodeSteps) {
  std::mt19937 rng(37);
  static ThreadPool pool(2, /*min_parallel_flops=*/0.0);
  for (KvDtype dtype : kAllDtypes) {
    for (int window : {1, 5, 16, 23}) {
      AttentionCase c{16, 2, 4, 64, 2.0f, {{61, 45}}, window, 7.0f};
      SCOPED_TRACE(describe(c) << " kv_dtype=" << kv_dtype_name(dtype));
      PagedBatch batch = make_batch(c, rng);
      round_batch(dtype, batch);
      const std::vector<uint16_t> key_bits = narrow_cache(dtype, batch.key_cache);
      const std::vector<uint16_t> value_bits = narrow_cache(dtype, batch.value_cache);
      PagedAttentionParams params = make_params(c, batch, 0.25f);
      if (dtype != KvDtype::kFloat32) {
        params.key_cache = key_bits.data();
        params.value_cache = value_bits.data();
        params.kv_dtype = dtype;
      }
      testing::expect_prefill_rows_equal_decode_steps(params, c.seqs[0].seq_len, c.seqs[0].q_len,
                                                      pool);
      if (HasFatalFailure()) return;
    }
  }
}

}  // namespace
}  // namespace pagedserve::kernels
