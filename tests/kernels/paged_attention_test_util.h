// Shared by the paged attention tests: a batch laid out the way the engine hands it to
// paged_attention (K/V scattered over shuffled blocks of a pool full of junk), a naive attention
// over contiguous K/V in double (causal, optionally windowed and soft-capped), and run_case,
// which checks every ISA against it along with the kernel's bitwise guarantees.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/kernels/kernel_test_util.h"

namespace pagedserve::kernels::testing {

struct SeqSpec {
  int seq_len;  // context in the cache, including this step's queries
  int q_len;    // 1 for decode, seq_len for a whole prefill, less for a prefill chunk
};

struct AttentionCase {
  int block_size;
  int num_kv_heads;
  int group;  // query heads per KV head
  int head_dim;
  float scale_factor;  // scale = scale_factor / sqrt(head_dim); > 1 sharpens the softmax
  std::vector<SeqSpec> seqs;
  int sliding_window = 0;      // PagedAttentionParams::sliding_window
  float logit_softcap = 0.0f;  // PagedAttentionParams::logit_softcap
};

inline ::testing::Message describe(const AttentionCase& c) {
  ::testing::Message m;
  m << "block_size=" << c.block_size << " kv_heads=" << c.num_kv_heads << " group=" << c.group
    << " head_dim=" << c.head_dim << " scale_factor=" << c.scale_factor << " seqs=";
  for (const SeqSpec& s : c.seqs) m << "(" << s.seq_len << "," << s.q_len << ")";
  if (c.sliding_window > 0) m << " sliding_window=" << c.sliding_window;
  if (c.logit_softcap > 0.0f) m << " logit_softcap=" << c.logit_softcap;
  return m;
}

// A batch laid out the way the engine hands it to the kernel, plus each sequence's K/V in
// contiguous form for the reference.
struct PagedBatch {
  int max_blocks = 0;
  std::vector<int32_t> block_tables;               // [num_seqs, max_blocks]
  std::vector<float> key_cache, value_cache;       // [pool, kv_heads, block_size, head_dim]
  std::vector<std::vector<float>> keys, values;    // per sequence: [seq_len, kv_heads, d]
  std::vector<int32_t> query_start_loc, seq_lens;  // [num_seqs + 1], [num_seqs]
  std::vector<float> query;                        // [num_tokens, num_heads, head_dim]
};

// Block tables: shuffled ids from a pool with spare blocks; unused entries point at spares.
inline void make_block_tables(const AttentionCase& c, std::mt19937& rng, PagedBatch& batch,
                              int& pool) {
  const int bs = c.block_size;
  int needed = 0;
  batch.max_blocks = 1;
  for (const SeqSpec& s : c.seqs) {
    const int n = (s.seq_len + bs - 1) / bs;
    batch.max_blocks = std::max(batch.max_blocks, n + 1);
    needed += n;
  }
  pool = 2 * needed + 3;
  std::vector<int32_t> ids(pool);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  batch.block_tables.resize(c.seqs.size() * batch.max_blocks);
  int next_id = 0;
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    const int n = (c.seqs[s].seq_len + bs - 1) / bs;
    for (int b = 0; b < batch.max_blocks; ++b) {
      batch.block_tables[s * batch.max_blocks + b] =
          b < n ? ids[next_id++] : ids[needed + random_int(rng, 0, pool - needed - 1)];
    }
  }
}

// The first position a query at `pos` may see: HF's sliding-window mask keeps j > pos - window.
inline int window_start(const AttentionCase& c, int pos) {
  return c.sliding_window > 0 ? std::max(0, pos - c.sliding_window + 1) : 0;
}

inline PagedBatch make_batch(const AttentionCase& c, std::mt19937& rng) {
  PagedBatch batch;
  int pool = 0;
  make_block_tables(c, rng, batch, pool);
  const int num_seqs = static_cast<int>(c.seqs.size());
  const int d = c.head_dim;
  const int bs = c.block_size;
  // Junk everywhere, then each sequence's contiguous K/V scattered into its blocks.
  const size_t block_floats = static_cast<size_t>(c.num_kv_heads) * bs * d;
  batch.key_cache = random_floats(rng, pool * block_floats);
  batch.value_cache = random_floats(rng, pool * block_floats);
  batch.keys.resize(num_seqs);
  batch.values.resize(num_seqs);
  for (int s = 0; s < num_seqs; ++s) {
    const int len = c.seqs[s].seq_len;
    batch.keys[s] = random_floats(rng, static_cast<size_t>(len) * c.num_kv_heads * d);
    batch.values[s] = random_floats(rng, static_cast<size_t>(len) * c.num_kv_heads * d);
    for (int p = 0; p < len; ++p) {
      const size_t block = batch.block_tables[s * batch.max_blocks + p / bs];
      for (int h = 0; h < c.num_kv_heads; ++h) {
        const size_t dst = block * block_floats + (static_cast<size_t>(h) * bs + p % bs) * d;
        const size_t src = (static_cast<size_t>(p) * c.num_kv_heads + h) * d;
        std::copy_n(batch.keys[s].begin() + src, d, batch.key_cache.begin() + dst);
        std::copy_n(batch.values[s].begin() + src, d, batch.value_cache.begin() + dst);
      }
    }
  }
  // With a window, every K/V position no query of its sequence may see is NaN (in the cache and
  // in the contiguous copy, which the reference never reads there): the kernel must not read
  // them, not even to mask them, or the NaN reaches its output.
  if (c.sliding_window > 0) {
    for (int s = 0; s < num_seqs; ++s) {
      const int hidden_end = window_start(c, c.seqs[s].seq_len - c.seqs[s].q_len);
      for (int p = 0; p < hidden_end; ++p) {
        const size_t block = batch.block_tables[s * batch.max_blocks + p / bs];
        for (int h = 0; h < c.num_kv_heads; ++h) {
          const size_t dst = block * block_floats + (static_cast<size_t>(h) * bs + p % bs) * d;
          const size_t src = (static_cast<size_t>(p) * c.num_kv_heads + h) * d;
          for (std::vector<float>* v : {&batch.key_cache, &batch.value_cache}) {
            std::fill_n(v->begin() + dst, d, std::nanf(""));
          }
          for (std::vector<float>* v : {&batch.keys[s], &batch.values[s]}) {
            std::fill_n(v->begin() + src, d, std::nanf(""));
          }
        }
      }
    }
  }
  batch.query_start_loc.assign(num_seqs + 1, 0);
  batch.seq_lens.resize(num_seqs);
  for (int s = 0; s < num_seqs; ++s) {
    batch.query_start_loc[s + 1] = batch.query_start_loc[s] + c.seqs[s].q_len;
    batch.seq_lens[s] = c.seqs[s].seq_len;
  }
  const size_t num_tokens = batch.query_start_loc[num_seqs];
  batch.query = random_floats(rng, num_tokens * c.num_kv_heads * c.group * d);
  return batch;
}

// softmax(s_j) v_j summed over the visible j, in double, on the contiguous K/V: s_j = scale *
// q . k_j, or cap * tanh(that / cap) with a soft cap; j <= pos, and j > pos - window with one.
inline std::vector<double> reference_attention(const AttentionCase& c, const PagedBatch& batch,
                                               float scale) {
  const int num_heads = c.num_kv_heads * c.group;
  const int d = c.head_dim;
  std::vector<double> expected(batch.query.size());
  std::vector<double> weights;
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    const SeqSpec& spec = c.seqs[s];
    for (int i = 0; i < spec.q_len; ++i) {
      const int token = batch.query_start_loc[s] + i;
      const int pos = spec.seq_len - spec.q_len + i;
      for (int h = 0; h < num_heads; ++h) {
        const int kv = h / c.group;
        const float* q = &batch.query[(static_cast<size_t>(token) * num_heads + h) * d];
        const int first = window_start(c, pos);
        weights.assign(pos + 1, 0.0);
        double max_score = -INFINITY;
        for (int j = first; j <= pos; ++j) {
          const float* k = &batch.keys[s][(static_cast<size_t>(j) * c.num_kv_heads + kv) * d];
          double dot = 0.0;
          for (int x = 0; x < d; ++x) dot += static_cast<double>(q[x]) * k[x];
          weights[j] = dot * scale;
          if (c.logit_softcap > 0.0f) {
            weights[j] = c.logit_softcap * std::tanh(weights[j] / c.logit_softcap);
          }
          max_score = std::max(max_score, weights[j]);
        }
        double sum = 0.0;
        for (int j = first; j <= pos; ++j) sum += (weights[j] = std::exp(weights[j] - max_score));
        double* o = &expected[(static_cast<size_t>(token) * num_heads + h) * d];
        for (int j = first; j <= pos; ++j) {
          const float* v = &batch.values[s][(static_cast<size_t>(j) * c.num_kv_heads + kv) * d];
          for (int x = 0; x < d; ++x) o[x] += weights[j] / sum * v[x];
        }
      }
    }
  }
  return expected;
}

// The dtype's value of x (x itself for float32).
inline float round_to(KvDtype dtype, float x) {
  switch (dtype) {
    case KvDtype::kFloat16:
      return f16_to_f32(f32_to_f16(x));
    case KvDtype::kBFloat16:
      return bf16_to_f32(f32_to_bf16(x));
    default:
      return x;
  }
}

// Rounds every K/V value of the batch (contiguous and cached, junk included) to the dtype.
inline void round_batch(KvDtype dtype, PagedBatch& batch) {
  for (std::vector<float>* values : {&batch.key_cache, &batch.value_cache}) {
    for (float& x : *values) x = round_to(dtype, x);
  }
  for (auto& per_seq : {&batch.keys, &batch.values}) {
    for (std::vector<float>& values : *per_seq) {
      for (float& x : values) x = round_to(dtype, x);
    }
  }
}

// The cache's bit patterns in the dtype (exact: the values are already rounded).
inline std::vector<uint16_t> narrow_cache(KvDtype dtype, const std::vector<float>& cache) {
  std::vector<uint16_t> bits(cache.size());
  for (size_t i = 0; i < cache.size(); ++i) {
    bits[i] = dtype == KvDtype::kFloat16 ? f32_to_f16(cache[i]) : f32_to_bf16(cache[i]);
  }
  return bits;
}

// The case's params over a float32 cache (out unset).
inline PagedAttentionParams make_params(const AttentionCase& c, const PagedBatch& batch,
                                        float scale) {
  PagedAttentionParams params;
  params.query = batch.query.data();
  params.key_cache = batch.key_cache.data();
  params.value_cache = batch.value_cache.data();
  params.query_start_loc = batch.query_start_loc.data();
  params.seq_lens = batch.seq_lens.data();
  params.block_tables = batch.block_tables.data();
  params.num_seqs = static_cast<int>(c.seqs.size());
  params.max_blocks_per_seq = batch.max_blocks;
  params.num_heads = c.num_kv_heads * c.group;
  params.num_kv_heads = c.num_kv_heads;
  params.head_dim = c.head_dim;
  params.block_size = c.block_size;
  params.scale = scale;
  params.sliding_window = c.sliding_window;
  params.logit_softcap = c.logit_softcap;
  return params;
}

// Batch invariance: each sequence of `params` (the batch's, out its result on `isa`) computed
// alone gives the bits it gave inside the batch.
inline void expect_each_sequence_alone_equal(const PagedAttentionParams& params,
                                             const PagedBatch& batch, const float* out, Isa isa) {
  for (int s = 0; s < params.num_seqs; ++s) {
    const int q_len = batch.query_start_loc[s + 1] - batch.query_start_loc[s];
    if (q_len == 0) continue;
    const int32_t alone_start[2] = {0, q_len};
    const size_t token_floats = static_cast<size_t>(params.num_heads) * params.head_dim;
    const size_t first = batch.query_start_loc[s] * token_floats;
    std::vector<float> alone(q_len * token_floats, std::nanf(""));
    PagedAttentionParams one = params;
    one.query = batch.query.data() + first;
    one.out = alone.data();
    one.query_start_loc = alone_start;
    one.seq_lens = batch.seq_lens.data() + s;
    one.block_tables = batch.block_tables.data() + static_cast<size_t>(s) * batch.max_blocks;
    one.num_seqs = 1;
    paged_attention(one, nullptr, isa);
    EXPECT_EQ(0, std::memcmp(alone.data(), out + first, alone.size() * sizeof(float)))
        << "sequence " << s << " alone differs from the batched result";
  }
}

// Recompute preemption and chunked prefill rely on this: `params` holds one sequence of
// seq_len tokens whose last q_len are queries; on every supported ISA, each query's output
// inside the prefill equals, bit for bit, the same token computed as a decode step over its
// prefix (alone or threaded).
inline void expect_prefill_rows_equal_decode_steps(PagedAttentionParams params, int seq_len,
                                                   int q_len, ThreadPool& pool) {
  const size_t token_floats = static_cast<size_t>(params.num_heads) * params.head_dim;
  for (Isa isa : {Isa::kPortable, Isa::kAvx2, Isa::kAvx512}) {
    if (!isa_supported(isa)) continue;
    SCOPED_TRACE(isa_name(isa));
    std::vector<float> prefill(q_len * token_floats, std::nanf(""));
    params.out = prefill.data();
    paged_attention(params, &pool, isa);
    for (int i = 0; i < q_len; ++i) {
      const int pos = seq_len - q_len + i;
      const int32_t decode_start[2] = {0, 1};
      const int32_t decode_len = pos + 1;
      std::vector<float> decode(token_floats, std::nanf(""));
      PagedAttentionParams one = params;
      one.query = params.query + i * token_floats;
      one.out = decode.data();
      one.query_start_loc = decode_start;
      one.seq_lens = &decode_len;
      paged_attention(one, i % 2 ? &pool : nullptr, isa);
      ASSERT_EQ(0, std::memcmp(decode.data(), prefill.data() + i * token_floats,
                               token_floats * sizeof(float)))
          << "query " << i << " (position " << pos << ") differs as a decode step";
    }
  }
}

// Runs the case on every supported ISA against the reference, and checks that the result is
// the same bits with a 16-bit cache as with a float32 one holding the same values, split over
// threads, and for each sequence computed alone.
inline void run_case(const AttentionCase& c, std::mt19937& rng, KvDtype dtype = KvDtype::kFloat32) {
  SCOPED_TRACE(describe(c) << " kv_dtype=" << kv_dtype_name(dtype));
  PagedBatch batch = make_batch(c, rng);
  round_batch(dtype, batch);
  std::vector<uint16_t> key_bits, value_bits;
  if (dtype != KvDtype::kFloat32) {
    key_bits = narrow_cache(dtype, batch.key_cache);
    value_bits = narrow_cache(dtype, batch.value_cache);
  }
  const float scale = c.scale_factor / std::sqrt(static_cast<float>(c.head_dim));
  std::vector<float> out(batch.query.size(), std::nanf(""));

  PagedAttentionParams params = make_params(c, batch, scale);
  const PagedAttentionParams float32_params = params;  // the same values in a float32 cache
  if (dtype != KvDtype::kFloat32) {
    params.key_cache = key_bits.data();
    params.value_cache = value_bits.data();
    params.kv_dtype = dtype;
  }
  // Outputs are convex combinations of values in [-1, 1], so abs and rel 1e-5 both fit.
  const std::vector<double> expected = reference_attention(c, batch, scale);
  static ThreadPool pool(3, /*min_parallel_flops=*/0.0);
  for (Isa isa : {Isa::kPortable, Isa::kAvx2, Isa::kAvx512}) {
    if (!isa_supported(isa)) continue;
    SCOPED_TRACE(isa_name(isa));
    params.out = out.data();
    paged_attention(params, nullptr, isa);
    EXPECT_TRUE(all_close(out.data(), expected, 1e-5, 1e-5));

    if (dtype != KvDtype::kFloat32) {
      // Widening is exact and the arithmetic after it is the float32 path's.
      std::vector<float> from_float32(batch.query.size(), std::nanf(""));
      PagedAttentionParams f32 = float32_params;
      f32.out = from_float32.data();
      paged_attention(f32, nullptr, isa);
      EXPECT_EQ(0, std::memcmp(from_float32.data(), out.data(), out.size() * sizeof(float)))
          << "16-bit cache differs from a float32 cache holding the same values";
    }

    // Split over threads, every (token, head) is computed by the same code: bitwise equal.
    std::vector<float> pooled(batch.query.size(), std::nanf(""));
    params.out = pooled.data();
    paged_attention(params, &pool, isa);
    EXPECT_EQ(0, std::memcmp(pooled.data(), out.data(), out.size() * sizeof(float)))
        << "threaded result differs from the single-threaded one";

    expect_each_sequence_alone_equal(params, batch, out.data(), isa);
  }
}

inline constexpr KvDtype kAllDtypes[] = {KvDtype::kFloat32, KvDtype::kFloat16, KvDtype::kBFloat16};

}  // namespace pagedserve::kernels::testing
