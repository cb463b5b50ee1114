// Tests paged_attention against a naive causal attention over contiguous K/V in double.
//
// Every case runs with a float32 cache; many also with float16 and bfloat16 caches, whose K/V
// are the float values rounded to the dtype: the reference then runs on those rounded values,
// and the 16-bit result must equal, bit for bit, a float32 cache holding the same values.
//
// Each case scatters every sequence's K/V across a pool larger than needed, in shuffled block
// order, with random junk in every slot no sequence owns and junk block ids in unused block
// table entries, so reading a wrong block, a wrong offset or past the causal limit all change
// the result.
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

namespace pagedserve::kernels {
namespace {

using testing::all_close;
using testing::random_floats;
using testing::random_int;

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
};

::testing::Message describe(const AttentionCase& c) {
  ::testing::Message m;
  m << "block_size=" << c.block_size << " kv_heads=" << c.num_kv_heads << " group=" << c.group
    << " head_dim=" << c.head_dim << " scale_factor=" << c.scale_factor << " seqs=";
  for (const SeqSpec& s : c.seqs) m << "(" << s.seq_len << "," << s.q_len << ")";
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
void make_block_tables(const AttentionCase& c, std::mt19937& rng, PagedBatch& batch, int& pool) {
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

PagedBatch make_batch(const AttentionCase& c, std::mt19937& rng) {
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

// softmax(scale * q . k_j) v_j summed over j <= pos, in double, on the contiguous K/V.
std::vector<double> reference_attention(const AttentionCase& c, const PagedBatch& batch,
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
        weights.assign(pos + 1, 0.0);
        double max_score = -INFINITY;
        for (int j = 0; j <= pos; ++j) {
          const float* k = &batch.keys[s][(static_cast<size_t>(j) * c.num_kv_heads + kv) * d];
          double dot = 0.0;
          for (int x = 0; x < d; ++x) dot += static_cast<double>(q[x]) * k[x];
          weights[j] = dot * scale;
          max_score = std::max(max_score, weights[j]);
        }
        double sum = 0.0;
        for (double& w : weights) sum += (w = std::exp(w - max_score));
        double* o = &expected[(static_cast<size_t>(token) * num_heads + h) * d];
        for (int j = 0; j <= pos; ++j) {
          const float* v = &batch.values[s][(static_cast<size_t>(j) * c.num_kv_heads + kv) * d];
          for (int x = 0; x < d; ++x) o[x] += weights[j] / sum * v[x];
        }
      }
    }
  }
  return expected;
}

// The dtype's value of x (x itself for float32).
float round_to(KvDtype dtype, float x) {
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
void round_batch(KvDtype dtype, PagedBatch& batch) {
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
std::vector<uint16_t> narrow_cache(KvDtype dtype, const std::vector<float>& cache) {
  std::vector<uint16_t> bits(cache.size());
  for (size_t i = 0; i < cache.size(); ++i) {
    bits[i] = dtype == KvDtype::kFloat16 ? f32_to_f16(cache[i]) : f32_to_bf16(cache[i]);
  }
  return bits;
}

void run_case(const AttentionCase& c, std::mt19937& rng, KvDtype dtype = KvDtype::kFloat32) {
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

  PagedAttentionParams params;
  params.query = batch.query.data();
  params.out = out.data();
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

    // Batch invariance: each sequence alone gives the bits it gave inside the batch.
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
      EXPECT_EQ(0, std::memcmp(alone.data(), out.data() + first, alone.size() * sizeof(float)))
          << "sequence " << s << " alone differs from the batched result";
    }
  }
}

constexpr KvDtype kAllDtypes[] = {KvDtype::kFloat32, KvDtype::kFloat16, KvDtype::kBFloat16};

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
      const size_t token_floats = static_cast<size_t>(params.num_heads) * params.head_dim;
      for (Isa isa : {Isa::kPortable, Isa::kAvx2, Isa::kAvx512}) {
        if (!isa_supported(isa)) continue;
        SCOPED_TRACE(isa_name(isa));
        std::vector<float> prefill(batch.query.size(), std::nanf(""));
        params.out = prefill.data();
        paged_attention(params, &pool, isa);
        for (int i = 0; i < c.seqs[0].q_len; ++i) {
          const int pos = c.seqs[0].seq_len - c.seqs[0].q_len + i;
          const int32_t decode_start[2] = {0, 1};
          const int32_t decode_len = pos + 1;
          std::vector<float> decode(token_floats, std::nanf(""));
          PagedAttentionParams one = params;
          one.query = batch.query.data() + i * token_floats;
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
  }
}

// Sequences with no queries this step (q_len 0) sit between ones that have some.
TEST(PagedAttention, SequenceWithoutQueries) {
  std::mt19937 rng(6);
  run_case({8, 1, 2, 8, 1.0f, {{10, 0}, {5, 1}, {9, 0}}}, rng);
}

}  // namespace
}  // namespace pagedserve::kernels
