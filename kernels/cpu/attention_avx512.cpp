// paged_attention's AVX-512 inner loops: for one query tile and a range of KV heads, the block
// table is walked once; per block, the heads' keys and values (contiguous in the block) are read
// in order, and each head's K/V serves every query head of its GQA group while it sits in L1.
// Per block and head: 16-lane q.k dot products, a vectorised exp of the block's scores, the
// online-softmax rescale, then the weighted sum of values, 16 dims at a time. 16-bit K/V are
// widened in registers (vcvtph2ps for float16, a 16-bit shift for bfloat16), exactly, so the
// arithmetic is the float32 path's; int8 K/V are widened too, and each row's scale multiplies
// its dot product and its weight. Every step's order depends only on the sequence (its block
// boundaries), never on the batch, the head range or the ISA's choice of tile. A sliding window
// starts the walk at the block holding the tile's first query's first visible position, and
// each query reads only the keys of its own window; soft-capping bends the scores in step 1.
#include <immintrin.h>

#include <cassert>
#include <cstdint>

#include "kernels/cpu/exp_avx512.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/tanh_avx512.h"

// GCC 12's intrinsics for max, roundscale, scalef and the reductions start from
// _mm512_undefined_*, which -Wmaybe-uninitialized reports as a false positive once inlined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#define PS_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))

namespace pagedserve::kernels::detail {
namespace {

constexpr int kMaxBlockSize = 128;
constexpr int kMaxGroup = 16;   // query heads handled per walk of the block table
constexpr int kMaxQueries = 8;  // query tokens handled per walk of the block table
constexpr int kMaxUnits = 16;   // (KV head, up to kMaxGroup query heads) units per walk

PS_TARGET_AVX512 inline __mmask16 tail_mask(int n) {
  return n >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << n) - 1);
}

// K/V element loaders: 16 lanes (masked) of a row, widened to float.
// kRowScaled: each row has a scale that multiplies its dot product and its softmax weight.
struct KvF32 {
  using Type = float;
  static constexpr bool kRowScaled = false;
  PS_TARGET_AVX512 static __m512 load(const Type* p, __mmask16 m) {
    return _mm512_maskz_loadu_ps(m, p);
  }
};
struct KvF16 {
  using Type = uint16_t;
  static constexpr bool kRowScaled = false;
  PS_TARGET_AVX512 static __m512 load(const Type* p, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
  }
};
struct KvBF16 {
  using Type = uint16_t;
  static constexpr bool kRowScaled = false;
  PS_TARGET_AVX512 static __m512 load(const Type* p, __mmask16 m) {
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
  }
};
// int8: the quants as floats (exact), each row scaled (kRowScaled), so the inner loops stay the
// float32 path's.
struct KvI8 {
  using Type = int8_t;
  static constexpr bool kRowScaled = true;
  PS_TARGET_AVX512 static __m512 load(const Type* p, __mmask16 m) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, p)));
  }
};

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
template <int kVectors, class Kv>
PS_TARGET_AVX512 inline __m512 dot16_in_registers(const float* q, const typename Kv::Type* keys,
                                                  int d, int count) {
  __m512 qv[kVectors];
  __mmask16 masks[kVectors];
#pragma GCC unroll 8
  for (int v = 0; v < kVectors; ++v) {
    masks[v] = tail_mask(d - 16 * v);
    qv[v] = _mm512_maskz_loadu_ps(masks[v], q + 16 * v);
  }
  __m512 acc[16];
  const typename Kv::Type* row = keys;
#pragma GCC unroll 16
  for (int j = 0; j < 16; ++j) {
    __m512 a = _mm512_setzero_ps();
    if (j < count) {
#pragma GCC unroll 8
      for (int v = 0; v < kVectors; ++v) {
        a = _mm512_fmadd_ps(qv[v], Kv::load(row + 16 * v, masks[v]), a);
      }
      row += d;
    }
    acc[j] = a;
  }
  return reduce16(acc);
}

// Any d: the same chains with the accumulators in memory (heads wider than 128 dims).
template <class Kv>
PS_TARGET_AVX512 inline __m512 dot16_wide(const float* q, const typename Kv::Type* keys, int d,
                                          int count) {
  __m512 acc[16];
  for (int j = 0; j < 16; ++j) acc[j] = _mm512_setzero_ps();
  for (int i = 0; i < d; i += 16) {
    const __mmask16 m = tail_mask(d - i);
    const __m512 qv = _mm512_maskz_loadu_ps(m, q + i);
    for (int j = 0; j < count; ++j) {
      acc[j] = _mm512_fmadd_ps(qv, Kv::load(keys + static_cast<long>(j) * d + i, m), acc[j]);
    }
  }
  return reduce16(acc);
}

template <class Kv>
PS_TARGET_AVX512 inline __m512 dot16(const float* q, const typename Kv::Type* keys, int d,
                                     int count) {
  switch ((d + 15) / 16) {
    case 1:
      return dot16_in_registers<1, Kv>(q, keys, d, count);
    case 2:
      return dot16_in_registers<2, Kv>(q, keys, d, count);
    case 3:
      return dot16_in_registers<3, Kv>(q, keys, d, count);
    case 4:
      return dot16_in_registers<4, Kv>(q, keys, d, count);
    case 5:
      return dot16_in_registers<5, Kv>(q, keys, d, count);
    case 6:
      return dot16_in_registers<6, Kv>(q, keys, d, count);
    case 7:
      return dot16_in_registers<7, Kv>(q, keys, d, count);
    case 8:
      return dot16_in_registers<8, Kv>(q, keys, d, count);
    default:
      return dot16_wide<Kv>(q, keys, d, count);
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
template <int kVectors, class Kv>
PS_TARGET_AVX512 inline void accumulate_values_in_registers(const float* weights,
                                                            const typename Kv::Type* values, int n,
                                                            int d, int width, float* out) {
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
    const typename Kv::Type* row0 = values + static_cast<long>(j) * d;
    const typename Kv::Type* row1 = row0 + d;
#pragma GCC unroll 8
    for (int v = 0; v < kVectors; ++v) {
      even[v] = _mm512_fmadd_ps(w0, Kv::load(row0 + 16 * v, masks[v]), even[v]);
      odd[v] = _mm512_fmadd_ps(w1, Kv::load(row1 + 16 * v, masks[v]), odd[v]);
    }
  }
  if (j < n) {
    const __m512 w0 = _mm512_set1_ps(weights[j]);
    const typename Kv::Type* row0 = values + static_cast<long>(j) * d;
#pragma GCC unroll 8
    for (int v = 0; v < kVectors; ++v) {
      even[v] = _mm512_fmadd_ps(w0, Kv::load(row0 + 16 * v, masks[v]), even[v]);
    }
  }
#pragma GCC unroll 8
  for (int v = 0; v < kVectors; ++v) {
    store_lanes(out + 16 * v, masks[v], _mm512_add_ps(even[v], odd[v]));
  }
}

// The same over any d: register tiles of up to 8 vectors (128 dims), several for wider heads.
// `d` stays the row stride of values; the tile's width sets the masks.
template <class Kv>
PS_TARGET_AVX512 inline void accumulate_values(const float* weights,
                                               const typename Kv::Type* values, int n, int d,
                                               float* out) {
  for (int i = 0; i < d; i += 128) {
    const int width = d - i < 128 ? d - i : 128;
    const typename Kv::Type* v = values + i;
    float* o = out + i;
    switch ((width + 15) / 16) {
      case 1:
        accumulate_values_in_registers<1, Kv>(weights, v, n, d, width, o);
        break;
      case 2:
        accumulate_values_in_registers<2, Kv>(weights, v, n, d, width, o);
        break;
      case 3:
        accumulate_values_in_registers<3, Kv>(weights, v, n, d, width, o);
        break;
      case 4:
        accumulate_values_in_registers<4, Kv>(weights, v, n, d, width, o);
        break;
      case 5:
        accumulate_values_in_registers<5, Kv>(weights, v, n, d, width, o);
        break;
      case 6:
        accumulate_values_in_registers<6, Kv>(weights, v, n, d, width, o);
        break;
      case 7:
        accumulate_values_in_registers<7, Kv>(weights, v, n, d, width, o);
        break;
      default:
        accumulate_values_in_registers<8, Kv>(weights, v, n, d, width, o);
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
// Step 1: the scaled (and, with softcap > 0, soft-capped) scores of n_valid keys into scores;
// returns their max. row_scales: the keys' int8 scales (KvI8 only).
template <class Kv, bool kSoftcap>
PS_TARGET_AVX512 inline float block_scores(const float* q, const typename Kv::Type* keys,
                                           const float* row_scales, int n_valid, int d, float scale,
                                           float softcap, float* scores) {
  float block_max = -__builtin_inff();
  for (int j = 0; j < n_valid; j += 16) {
    const int count = n_valid - j < 16 ? n_valid - j : 16;
    __m512 dots = dot16<Kv>(q, keys + static_cast<long>(j) * d, d, count);
    if constexpr (Kv::kRowScaled) {
      dots = _mm512_mul_ps(dots, _mm512_maskz_loadu_ps(tail_mask(count), row_scales + j));
    }
    __m512 s = _mm512_mul_ps(dots, _mm512_set1_ps(scale));
    if (kSoftcap && softcap > 0.0f) {
      s = _mm512_mul_ps(_mm512_set1_ps(softcap),
                        tanh_avx512(_mm512_mul_ps(s, _mm512_set1_ps(1.0f / softcap))));
    }
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

// One unit of a walk: up to kMaxGroup query heads [first_head, first_head + num_heads) that
// read KV head kv_head.
struct HeadUnit {
  int kv_head;
  int first_head;
  int num_heads;
};

// Up to kMaxQueries consecutive query tokens of one sequence (positions first_pos, +1, ...) and
// up to kMaxUnits head units, walked over the blocks together: per block, the units' K and V
// are read in address order (KV heads are contiguous within a block), and each unit's K/V is
// loaded once and serves every (query, head) of the unit from L1. Every (query, head) still
// sees exactly the blocks and n_valid it would see alone, in the same order, with the same
// arithmetic: only independent work of different pairs is interleaved. q and out point at the
// first token's head 0.
// kMasked: the walk has a sliding window or soft-capping (the plain walk, every layer of most
// models, compiles without either's bookkeeping).
template <class Kv, bool kMasked>
PS_TARGET_AVX512 void attend_walk(const PagedAttentionParams& p, const float* q,
                                  const int32_t* block_table, int first_pos, int num_queries,
                                  const HeadUnit* units, int num_units, float* out) {
  using Element = typename Kv::Type;
  const int d = p.head_dim;
  const long token_stride = static_cast<long>(p.num_heads) * d;
  const long head_stride = static_cast<long>(p.block_size) * d;
  const long block_stride = p.num_kv_heads * head_stride;
  constexpr int kScoresStride = kMaxBlockSize + 16;
  // Per (query, head) of one unit: its scores, then weights, of the current block.
  alignas(64) float scores[kMaxQueries * kMaxGroup][kScoresStride];
  float block_max[kMaxQueries][kMaxGroup];
  // Per (unit, query, head): the online-softmax state, carried from block to block.
  float running_max[kMaxUnits][kMaxQueries][kMaxGroup];
  float running_sum[kMaxUnits][kMaxQueries][kMaxGroup];
  for (int u = 0; u < num_units; ++u) {
    for (int t = 0; t < num_queries; ++t) {
      for (int h = 0; h < units[u].num_heads; ++h) {
        running_max[u][t][h] = -__builtin_inff();
        running_sum[u][t][h] = 0.0f;
        float* o = out + t * token_stride + static_cast<long>(units[u].first_head + h) * d;
        for (int i = 0; i < d; i += 16) {  // out doubles as the unnormalised accumulator
          store_lanes(o + i, tail_mask(d - i), _mm512_setzero_ps());
        }
      }
    }
  }
  const Element* key_cache = static_cast<const Element*>(p.key_cache);
  const Element* value_cache = static_cast<const Element*>(p.value_cache);
  const int last_pos = first_pos + num_queries - 1;
  const int num_blocks = last_pos / p.block_size + 1;
  // Blocks wholly before the first query's window are before every query's: never read.
  const auto visible_from = [&](int pos) { return kMasked ? first_visible_position(p, pos) : 0; };
  const int first_block = visible_from(first_pos) / p.block_size;
  // Software prefetch, one 4 KiB-ish run ahead: while a unit's keys are read (scores), its
  // values are fetched, and while its values are read, the next unit's keys (the next block's
  // first unit at the end of a block, which the hardware prefetchers cannot guess: blocks are
  // scattered). Two runs in flight keep the core's memory pipeline busy through the compute
  // between loads; on this machine (AMD EPYC, huge pages) one core streams 32 x 512-token
  // decode attention at ~1.5x the rate without it, where prefetching whole blocks further
  // ahead, or only their first lines, changed nothing.
  const long run_bytes = head_stride * static_cast<long>(sizeof(Element));
  const auto prefetch_run = [run_bytes](const Element* run) {
    const char* bytes = reinterpret_cast<const char*>(run);
    for (long offset = 0; offset < run_bytes; offset += 64) {
      _mm_prefetch(bytes + offset, _MM_HINT_T0);
    }
  };
  prefetch_run(key_cache + block_table[first_block] * block_stride +
               units[0].kv_head * head_stride);
  for (int b = first_block; b < num_blocks; ++b) {
    const int32_t block_id = block_table[b];
    assert(block_id >= 0);
    const int block_start = b * p.block_size;
    // Queries are consecutive positions, so those that see this block are a range of the
    // tile: from the first whose position reaches the block (positions past a query are not
    // read) to the last whose window starts in or before it.
    int first_t = block_start - first_pos;
    first_t = first_t < 0 ? 0 : first_t;
    int end_t = num_queries;
    while (end_t > first_t && visible_from(first_pos + end_t - 1) >= block_start + p.block_size) {
      --end_t;
    }
    // Query t reads the block's keys [begin_of(t), end_of(t)): those in its window, up to its
    // own position.
    const auto begin_of = [&](int t) {
      const int begin = visible_from(first_pos + t) - block_start;
      return begin > 0 ? begin : 0;
    };
    const auto end_of = [&](int t) {
      const int remaining = first_pos + t + 1 - block_start;
      return remaining < p.block_size ? remaining : p.block_size;
    };
    for (int u = 0; u < num_units; ++u) {
      const HeadUnit unit = units[u];
      const long base = block_id * block_stride + unit.kv_head * head_stride;
      const Element* keys = key_cache + base;
      const Element* values = value_cache + base;
      // int8: the unit's rows' scales in this block (the row's element offset / d).
      const float* key_scales = Kv::kRowScaled ? p.key_scales + base / d : nullptr;
      const float* value_scales = Kv::kRowScaled ? p.value_scales + base / d : nullptr;
      prefetch_run(values);
      if (u + 1 < num_units) {
        prefetch_run(key_cache + block_id * block_stride + units[u + 1].kv_head * head_stride);
      } else if (b + 1 < num_blocks) {
        prefetch_run(key_cache + block_table[b + 1] * block_stride +
                     units[0].kv_head * head_stride);
      }
      const auto q_of = [&](int t, int h) {
        return q + t * token_stride + static_cast<long>(unit.first_head + h) * d;
      };
      const auto out_of = [&](int t, int h) {
        return out + t * token_stride + static_cast<long>(unit.first_head + h) * d;
      };
      for (int t = first_t; t < end_t; ++t) {
        const int begin = begin_of(t);
        const int n_valid = end_of(t) - begin;
        for (int h = 0; h < unit.num_heads; ++h) {
          block_max[t][h] =
              block_scores<Kv, kMasked>(q_of(t, h), keys + static_cast<long>(begin) * d,
                                        Kv::kRowScaled ? key_scales + begin : nullptr, n_valid, d,
                                        p.scale, p.logit_softcap, scores[t * kMaxGroup + h]);
        }
      }
      for (int t = first_t; t < end_t; ++t) {
        const int n_valid = end_of(t) - begin_of(t);
        for (int h = 0; h < unit.num_heads; ++h) {
          block_weights(block_max[t][h], n_valid, d, scores[t * kMaxGroup + h],
                        running_max[u][t][h], running_sum[u][t][h], out_of(t, h));
        }
      }
      for (int t = first_t; t < end_t; ++t) {
        const int begin = begin_of(t);
        const int n_valid = end_of(t) - begin;
        for (int h = 0; h < unit.num_heads; ++h) {
          float* weights = scores[t * kMaxGroup + h];
          if constexpr (Kv::kRowScaled) {
            // The softmax sum has its weights already; the values take them times each row's
            // scale.
            for (int j = 0; j < n_valid; j += 16) {
              const __mmask16 m = tail_mask(n_valid - j);
              store_lanes(weights + j, m,
                          _mm512_mul_ps(load_lanes(weights + j, m),
                                        _mm512_maskz_loadu_ps(m, value_scales + begin + j)));
            }
          }
          accumulate_values<Kv>(weights, values + static_cast<long>(begin) * d, n_valid, d,
                                out_of(t, h));
        }
      }
    }
  }
  for (int u = 0; u < num_units; ++u) {
    for (int t = 0; t < num_queries; ++t) {
      for (int h = 0; h < units[u].num_heads; ++h) {
        scale_in_place(out + t * token_stride + static_cast<long>(units[u].first_head + h) * d, d,
                       1.0f / running_sum[u][t][h]);
      }
    }
  }
}

template <class Kv>
void attend_heads_typed(const PagedAttentionParams& p, const float* q, const int32_t* block_table,
                        int first_pos, int num_queries, int first_kv_head, int num_kv_heads,
                        float* out) {
  const long token_stride = static_cast<long>(p.num_heads) * p.head_dim;
  const int group = p.num_heads / p.num_kv_heads;
  // The KV heads' units in address order, at most kMaxUnits per walk.
  HeadUnit units[kMaxUnits];
  int num_units = 0;
  const auto flush = [&] {
    for (int t0 = 0; t0 < num_queries; t0 += kMaxQueries) {
      const int queries = num_queries - t0 < kMaxQueries ? num_queries - t0 : kMaxQueries;
      if (p.sliding_window > 0 || p.logit_softcap > 0.0f) {
        attend_walk<Kv, true>(p, q + t0 * token_stride, block_table, first_pos + t0, queries, units,
                              num_units, out + t0 * token_stride);
      } else {
        attend_walk<Kv, false>(p, q + t0 * token_stride, block_table, first_pos + t0, queries,
                               units, num_units, out + t0 * token_stride);
      }
    }
    num_units = 0;
  };
  for (int kv = first_kv_head; kv < first_kv_head + num_kv_heads; ++kv) {
    for (int h0 = 0; h0 < group; h0 += kMaxGroup) {
      if (num_units == kMaxUnits) flush();
      units[num_units++] = {kv, kv * group + h0, group - h0 < kMaxGroup ? group - h0 : kMaxGroup};
    }
  }
  if (num_units > 0) flush();
}

}  // namespace

void attend_heads_avx512(const PagedAttentionParams& p, const float* q, const int32_t* block_table,
                         int first_pos, int num_queries, int first_kv_head, int num_kv_heads,
                         float* out) {
  assert(p.block_size <= kMaxBlockSize);
  switch (p.kv_dtype) {
    case KvDtype::kFloat16:
      return attend_heads_typed<KvF16>(p, q, block_table, first_pos, num_queries, first_kv_head,
                                       num_kv_heads, out);
    case KvDtype::kBFloat16:
      return attend_heads_typed<KvBF16>(p, q, block_table, first_pos, num_queries, first_kv_head,
                                        num_kv_heads, out);
    case KvDtype::kInt8:
      return attend_heads_typed<KvI8>(p, q, block_table, first_pos, num_queries, first_kv_head,
                                      num_kv_heads, out);
    default:
      return attend_heads_typed<KvF32>(p, q, block_table, first_pos, num_queries, first_kv_head,
                                       num_kv_heads, out);
  }
}

}  // namespace pagedserve::kernels::detail
