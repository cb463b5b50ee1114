// paged_attention's AVX-512 inner loops: for one token and one KV head, the block table is
// walked once and each block's keys and values serve every query head of the GQA group while
// they sit in L1. Per block and head: 16-lane q.k dot products, a vectorised exp of the block's
// scores, the online-softmax rescale, then the weighted sum of values, 16 dims at a time.
// Every step's order depends only on the sequence (its block boundaries), never on the batch.
#include <immintrin.h>

#include <cassert>

#include "kernels/cpu/exp_avx512.h"
#include "kernels/cpu/kernels.h"

// GCC 12's intrinsics for max, roundscale, scalef and the reductions start from
// _mm512_undefined_*, which -Wmaybe-uninitialized reports as a false positive once inlined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#define PS_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))

namespace pagedserve::kernels::detail {
namespace {

constexpr int kMaxBlockSize = 128;
constexpr int kMaxGroup = 16;       // query heads handled per walk of the block table
constexpr int kMaxQueries = 8;      // query tokens handled per walk of the block table
constexpr int kPrefetchBlocks = 4;  // how far ahead the block walk prefetches K and V

PS_TARGET_AVX512 inline __mmask16 tail_mask(int n) {
  return n >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << n) - 1);
}

// Loads and stores of the output accumulators, which are stored and reloaded for every block:
// full vectors use the plain forms, because a masked store does not forward to a later load
// (the load waits for the store to retire), which stalled every block's update.
PS_TARGET_AVX512 inline __m512 load_lanes(const float* p, __mmask16 m) {
  return m == static_cast<__mmask16>(0xffff) ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(m, p);
}

PS_TARGET_AVX512 inline void store_lanes(float* p, __mmask16 m, __m512 v) {
  if (m == static_cast<__mmask16>(0xffff)) {
    _mm512_storeu_ps(p, v);
  } else {
    _mm512_mask_storeu_ps(p, m, v);
  }
}

// r[j] = sum over 16 lanes of a[j], for 16 vectors: a fixed tree of 128-bit-lane shuffles and
// in-lane transposes (46 instructions for 16 sums, against ~8 per _mm512_reduce_add_ps).
PS_TARGET_AVX512 inline __m512 reduce16(const __m512 (&a)[16]) {
  __m512 b[8];
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) {  // quads: [x lo-half sums, x, y, y]
    b[j] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * j], a[2 * j + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_f32x4(a[2 * j], a[2 * j + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  }
  __m512 c[4];
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {  // quad k: 4 partial sums of a[4j + k]
    c[j] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * j], b[2 * j + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(b[2 * j], b[2 * j + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  }
  const __m512 u0 = _mm512_add_ps(_mm512_unpacklo_ps(c[0], c[1]), _mm512_unpackhi_ps(c[0], c[1]));
  const __m512 u1 = _mm512_add_ps(_mm512_unpacklo_ps(c[2], c[3]), _mm512_unpackhi_ps(c[2], c[3]));
  // w[4k + m] = total of a[4m + k]; one permutation puts a[i]'s total at lane i.
  const __m512 w = _mm512_add_ps(_mm512_shuffle_ps(u0, u1, _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm512_shuffle_ps(u0, u1, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512i transpose = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
  return _mm512_permutexvar_ps(transpose, w);
}

// Lane j: q . keys[j] over d floats for j < count (keys rows d apart), 0 beyond. Each dot is
// one 16-lane FMA chain over d (16 dims at a time, in order) followed by reduce16, whatever
// the path. For d <= 128 (kVectors = d / 16 rounded up) q and all 16 accumulators stay in
// registers and every branch is unrolled, so nothing spills.
template <int kVectors>
PS_TARGET_AVX512 inline __m512 dot16_in_registers(const float* q, const float* keys, int d,
                                                  int count) {
  __m512 qv[kVectors];
  __mmask16 masks[kVectors];
#pragma GCC unroll 8
  for (int v = 0; v < kVectors; ++v) {
    masks[v] = tail_mask(d - 16 * v);
    qv[v] = _mm512_maskz_loadu_ps(masks[v], q + 16 * v);
  }
  __m512 acc[16];
  const float* row = keys;
#pragma GCC unroll 16
  for (int j = 0; j < 16; ++j) {
    __m512 a = _mm512_setzero_ps();
    if (j < count) {
#pragma GCC unroll 8
      for (int v = 0; v < kVectors; ++v) {
        a = _mm512_fmadd_ps(qv[v], _mm512_maskz_loadu_ps(masks[v], row + 16 * v), a);
      }
      row += d;
    }
    acc[j] = a;
  }
  return reduce16(acc);
}

// Any d: the same chains with the accumulators in memory (heads wider than 128 dims).
PS_TARGET_AVX512 inline __m512 dot16_wide(const float* q, const float* keys, int d, int count) {
  __m512 acc[16];
  for (int j = 0; j < 16; ++j) acc[j] = _mm512_setzero_ps();
  for (int i = 0; i < d; i += 16) {
    const __mmask16 m = tail_mask(d - i);
    const __m512 qv = _mm512_maskz_loadu_ps(m, q + i);
    for (int j = 0; j < count; ++j) {
      acc[j] = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(m, keys + static_cast<long>(j) * d + i),
                               acc[j]);
    }
  }
  return reduce16(acc);
}

PS_TARGET_AVX512 inline __m512 dot16(const float* q, const float* keys, int d, int count) {
  switch ((d + 15) / 16) {
    case 1:
      return dot16_in_registers<1>(q, keys, d, count);
    case 2:
      return dot16_in_registers<2>(q, keys, d, count);
    case 3:
      return dot16_in_registers<3>(q, keys, d, count);
    case 4:
      return dot16_in_registers<4>(q, keys, d, count);
    case 5:
      return dot16_in_registers<5>(q, keys, d, count);
    case 6:
      return dot16_in_registers<6>(q, keys, d, count);
    case 7:
      return dot16_in_registers<7>(q, keys, d, count);
    case 8:
      return dot16_in_registers<8>(q, keys, d, count);
    default:
      return dot16_wide(q, keys, d, count);
  }
}

PS_TARGET_AVX512 inline void scale_in_place(float* v, int d, float factor) {
  const __m512 f = _mm512_set1_ps(factor);
  for (int i = 0; i < d; i += 16) {
    const __mmask16 m = tail_mask(d - i);
    store_lanes(v + i, m, _mm512_mul_ps(load_lanes(v + i, m), f));
  }
}

// out[0:d] += sum_j weights[j] * values[j, 0:d], with the accumulators in registers: two
// chains per 16-dim vector (even and odd j, added at the end) so consecutive FMAs never wait
// on each other's latency. The order is fixed by n alone.
template <int kVectors>
PS_TARGET_AVX512 inline void accumulate_values_in_registers(const float* weights,
                                                            const float* values, int n, int d,
                                                            int width, float* out) {
  __m512 even[kVectors];
  __m512 odd[kVectors];
  __mmask16 masks[kVectors];
#pragma GCC unroll 8
  for (int v = 0; v < kVectors; ++v) {
    masks[v] = tail_mask(width - 16 * v);
    even[v] = load_lanes(out + 16 * v, masks[v]);
    odd[v] = _mm512_setzero_ps();
  }
  int j = 0;
  for (; j + 2 <= n; j += 2) {
    const __m512 w0 = _mm512_set1_ps(weights[j]);
    const __m512 w1 = _mm512_set1_ps(weights[j + 1]);
    const float* row0 = values + static_cast<long>(j) * d;
    const float* row1 = row0 + d;
#pragma GCC unroll 8
    for (int v = 0; v < kVectors; ++v) {
      even[v] = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(masks[v], row0 + 16 * v), even[v]);
      odd[v] = _mm512_fmadd_ps(w1, _mm512_maskz_loadu_ps(masks[v], row1 + 16 * v), odd[v]);
    }
  }
  if (j < n) {
    const __m512 w0 = _mm512_set1_ps(weights[j]);
    const float* row0 = values + static_cast<long>(j) * d;
#pragma GCC unroll 8
    for (int v = 0; v < kVectors; ++v) {
      even[v] = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(masks[v], row0 + 16 * v), even[v]);
    }
  }
#pragma GCC unroll 8
  for (int v = 0; v < kVectors; ++v) {
    store_lanes(out + 16 * v, masks[v], _mm512_add_ps(even[v], odd[v]));
  }
}

// The same over any d: register tiles of up to 8 vectors (128 dims), several for wider heads.
// `d` stays the row stride of values; the tile's width sets the masks.
PS_TARGET_AVX512 inline void accumulate_values(const float* weights, const float* values, int n,
                                               int d, float* out) {
  for (int i = 0; i < d; i += 128) {
    const int width = d - i < 128 ? d - i : 128;
    const float* v = values + i;
    float* o = out + i;
    switch ((width + 15) / 16) {
      case 1:
        accumulate_values_in_registers<1>(weights, v, n, d, width, o);
        break;
      case 2:
        accumulate_values_in_registers<2>(weights, v, n, d, width, o);
        break;
      case 3:
        accumulate_values_in_registers<3>(weights, v, n, d, width, o);
        break;
      case 4:
        accumulate_values_in_registers<4>(weights, v, n, d, width, o);
        break;
      case 5:
        accumulate_values_in_registers<5>(weights, v, n, d, width, o);
        break;
      case 6:
        accumulate_values_in_registers<6>(weights, v, n, d, width, o);
        break;
      case 7:
        accumulate_values_in_registers<7>(weights, v, n, d, width, o);
        break;
      default:
        accumulate_values_in_registers<8>(weights, v, n, d, width, o);
        break;
    }
  }
}

// The three steps of one block's update of one (query, head), split so attend_tile can run
// each step for every (query, head) of the tile before the next: the steps of different
// (query, head) pairs are independent, so the core overlaps their latency chains (reductions,
// exp, the max compare) instead of waiting on one pair's chain at a time. The arithmetic of
// each pair is unchanged by the split.
//
// Step 1: the block's scaled scores of its first n_valid keys into scores; returns their max.
PS_TARGET_AVX512 inline float block_scores(const float* q, const float* keys, int n_valid, int d,
                                           float scale, float* scores) {
  float block_max = -__builtin_inff();
  for (int j = 0; j < n_valid; j += 16) {
    const int count = n_valid - j < 16 ? n_valid - j : 16;
    const __m512 s =
        _mm512_mul_ps(dot16(q, keys + static_cast<long>(j) * d, d, count), _mm512_set1_ps(scale));
    const __mmask16 m = tail_mask(count);
    store_lanes(scores + j, m, s);
    const float chunk_max = _mm512_mask_reduce_max_ps(m, s);
    block_max = chunk_max > block_max ? chunk_max : block_max;
  }
  return block_max;
}

// Step 2: the online-softmax rescale when the block raises the running max, then the scores
// replaced by their weights exp(score - running_max), summed into running_sum.
PS_TARGET_AVX512 inline void block_weights(float block_max, int n_valid, int d, float* scores,
                                           float& running_max, float& running_sum, float* out) {
  if (block_max > running_max) {
    // The first block rescales the zero state by exp(-inf) = 0, harmlessly.
    const float rescale =
        running_max == -__builtin_inff()
            ? 0.0f
            : _mm512_cvtss_f32(exp_avx512(_mm512_set1_ps(running_max - block_max)));
    running_sum *= rescale;
    scale_in_place(out, d, rescale);
    running_max = block_max;
  }
  const __m512 max_v = _mm512_set1_ps(running_max);
  __m512 sum_v = _mm512_setzero_ps();
  for (int j = 0; j < n_valid; j += 16) {
    const __mmask16 m = tail_mask(n_valid - j);
    const __m512 w = exp_avx512(_mm512_sub_ps(load_lanes(scores + j, m), max_v));
    sum_v = _mm512_add_ps(sum_v, _mm512_maskz_mov_ps(m, w));
    store_lanes(scores + j, m, w);
  }
  running_sum += _mm512_reduce_add_ps(sum_v);
}

// Up to kMaxQueries consecutive query tokens of one sequence (positions first_pos, +1, ...) and
// up to kMaxGroup heads sharing one KV head, walked over the blocks together: each block's keys
// and values are loaded once and serve every (query, head) from L1. Every (query, head) still
// sees exactly the blocks and n_valid it would see alone, in the same order, with the same
// arithmetic: only independent work of different pairs is interleaved.
PS_TARGET_AVX512 void attend_tile(const PagedAttentionParams& p, const float* q,
                                  const int32_t* block_table, int first_pos, int num_queries,
                                  int kv_head, int num_heads, float* out) {
  const int d = p.head_dim;
  const long token_stride = static_cast<long>(p.num_heads) * d;
  const long head_stride = static_cast<long>(p.block_size) * d;
  const long block_stride = p.num_kv_heads * head_stride;
  constexpr int kScoresStride = kMaxBlockSize + 16;
  // Per (query, head) of the tile: its scores, then weights, of the current block.
  alignas(64) float scores[kMaxQueries * kMaxGroup][kScoresStride];
  float block_max[kMaxQueries][kMaxGroup];
  float running_max[kMaxQueries][kMaxGroup];
  float running_sum[kMaxQueries][kMaxGroup];
  for (int t = 0; t < num_queries; ++t) {
    for (int h = 0; h < num_heads; ++h) {
      running_max[t][h] = -__builtin_inff();
      running_sum[t][h] = 0.0f;
      float* o = out + t * token_stride + static_cast<long>(h) * d;
      for (int i = 0; i < d; i += 16) {  // out doubles as the unnormalised accumulator
        store_lanes(o + i, tail_mask(d - i), _mm512_setzero_ps());
      }
    }
  }
  const int last_pos = first_pos + num_queries - 1;
  const int num_blocks = last_pos / p.block_size + 1;
  // Blocks are a few KiB each and scattered, too short for the hardware prefetchers to ramp
  // up on: fetch the K and V of the blocks kPrefetchBlocks ahead while this one is computed.
  const long block_bytes = head_stride * static_cast<long>(sizeof(float));
  const auto prefetch_block = [&](int b) {
    if (b >= num_blocks) return;
    const long base = block_table[b] * block_stride + kv_head * head_stride;
    const char* k = reinterpret_cast<const char*>(p.key_cache + base);
    const char* v = reinterpret_cast<const char*>(p.value_cache + base);
    for (long offset = 0; offset < block_bytes; offset += 64) {
      _mm_prefetch(k + offset, _MM_HINT_T0);
      _mm_prefetch(v + offset, _MM_HINT_T0);
    }
  };
  for (int b = 0; b < kPrefetchBlocks; ++b) prefetch_block(b);
  for (int b = 0; b < num_blocks; ++b) {
    prefetch_block(b + kPrefetchBlocks);
    const int32_t block_id = block_table[b];
    assert(block_id >= 0);
    const long base = block_id * block_stride + kv_head * head_stride;
    const float* keys = p.key_cache + base;
    const float* values = p.value_cache + base;
    // Queries are consecutive positions, so those that see this block are a suffix of the
    // tile: positions past a query are not read.
    int first_t = b * p.block_size - first_pos;
    first_t = first_t < 0 ? 0 : first_t;
    const auto n_valid_of = [&](int t) {
      const int remaining = first_pos + t + 1 - b * p.block_size;
      return remaining < p.block_size ? remaining : p.block_size;
    };
    for (int t = first_t; t < num_queries; ++t) {
      const int n_valid = n_valid_of(t);
      for (int h = 0; h < num_heads; ++h) {
        block_max[t][h] = block_scores(q + t * token_stride + static_cast<long>(h) * d, keys,
                                       n_valid, d, p.scale, scores[t * kMaxGroup + h]);
      }
    }
    for (int t = first_t; t < num_queries; ++t) {
      const int n_valid = n_valid_of(t);
      for (int h = 0; h < num_heads; ++h) {
        block_weights(block_max[t][h], n_valid, d, scores[t * kMaxGroup + h], running_max[t][h],
                      running_sum[t][h], out + t * token_stride + static_cast<long>(h) * d);
      }
    }
    for (int t = first_t; t < num_queries; ++t) {
      const int n_valid = n_valid_of(t);
      for (int h = 0; h < num_heads; ++h) {
        accumulate_values(scores[t * kMaxGroup + h], values, n_valid, d,
                          out + t * token_stride + static_cast<long>(h) * d);
      }
    }
  }
  for (int t = 0; t < num_queries; ++t) {
    for (int h = 0; h < num_heads; ++h) {
      scale_in_place(out + t * token_stride + static_cast<long>(h) * d, d,
                     1.0f / running_sum[t][h]);
    }
  }
}

}  // namespace

void attend_heads_avx512(const PagedAttentionParams& p, const float* q, const int32_t* block_table,
                         int first_pos, int num_queries, int kv_head, int num_heads, float* out) {
  assert(p.block_size <= kMaxBlockSize);
  const long token_stride = static_cast<long>(p.num_heads) * p.head_dim;
  for (int t0 = 0; t0 < num_queries; t0 += kMaxQueries) {
    const int queries = num_queries - t0 < kMaxQueries ? num_queries - t0 : kMaxQueries;
    for (int h0 = 0; h0 < num_heads; h0 += kMaxGroup) {
      const int heads = num_heads - h0 < kMaxGroup ? num_heads - h0 : kMaxGroup;
      const long offset = t0 * token_stride + static_cast<long>(h0) * p.head_dim;
      attend_tile(p, q + offset, block_table, first_pos + t0, queries, kv_head, heads,
                  out + offset);
    }
  }
}

}  // namespace pagedserve::kernels::detail
