// paged_attention's AVX-512 inner loops: for one token and one KV head, the block table is
// walked once and each block's keys and values serve every query head of the GQA group while
// they sit in L1. Per block and head: 16-lane q.k dot products, a vectorised exp of the block's
// scores, the online-softmax rescale, then the weighted sum of values, 16 dims at a time.
// Every step's order depends only on the sequence (its block boundaries), never on the batch.
#include <immintrin.h>

#include <cassert>

#include "kernels/cpu/kernels.h"

// GCC 12's intrinsics for max, roundscale, scalef and the reductions start from
// _mm512_undefined_*, which -Wmaybe-uninitialized reports as a false positive once inlined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#define PS_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))

namespace pagedserve::kernels::detail {
namespace {

constexpr int kMaxBlockSize = 128;
constexpr int kMaxGroup = 16;  // query heads handled per walk of the block table

PS_TARGET_AVX512 inline __mmask16 tail_mask(int n) {
  return n >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << n) - 1);
}

// dot(a, b) over d floats: one 16-lane FMA chain, then a fixed reduction tree.
PS_TARGET_AVX512 inline float dot(const float* a, const float* b, int d) {
  __m512 acc = _mm512_setzero_ps();
  for (int i = 0; i < d; i += 16) {
    const __mmask16 m = tail_mask(d - i);
    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

// exp(x) for x <= 0 (scores minus their running max): x = n ln2 + r with |r| <= ln2 / 2, a
// degree-7 Taylor polynomial for e^r (truncation below 1e-8 relative), scaled by 2^n. Inputs
// below -87 give about e^-87, which no softmax sum notices.
PS_TARGET_AVX512 inline __m512 exp_nonpositive(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);   // ln2 high bits
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860682030941723212e-6f), r);  // ln2 low bits
  __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

PS_TARGET_AVX512 inline void scale_in_place(float* v, int d, float factor) {
  const __m512 f = _mm512_set1_ps(factor);
  for (int i = 0; i < d; i += 16) {
    const __mmask16 m = tail_mask(d - i);
    _mm512_mask_storeu_ps(v + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, v + i), f));
  }
}

// out[0:d] += sum_j weights[j] * values[j, 0:d], with the d/16 accumulators in registers so
// the FMA chains of different vectors overlap (one chain per vector, in order of j).
template <int kVectors>
PS_TARGET_AVX512 inline void accumulate_values_in_registers(const float* weights,
                                                            const float* values, int n, int d,
                                                            int width, float* out) {
  __m512 acc[kVectors];
  __mmask16 masks[kVectors];
#pragma GCC unroll 8
  for (int v = 0; v < kVectors; ++v) {
    masks[v] = tail_mask(width - 16 * v);
    acc[v] = _mm512_maskz_loadu_ps(masks[v], out + 16 * v);
  }
  for (int j = 0; j < n; ++j) {
    const __m512 w = _mm512_set1_ps(weights[j]);
    const float* row = values + static_cast<long>(j) * d;
#pragma GCC unroll 8
    for (int v = 0; v < kVectors; ++v) {
      acc[v] = _mm512_fmadd_ps(w, _mm512_maskz_loadu_ps(masks[v], row + 16 * v), acc[v]);
    }
  }
#pragma GCC unroll 8
  for (int v = 0; v < kVectors; ++v) _mm512_mask_storeu_ps(out + 16 * v, masks[v], acc[v]);
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

// Up to kMaxGroup heads sharing one KV head, walked over the blocks together.
PS_TARGET_AVX512 void attend_group(const PagedAttentionParams& p, const float* q,
                                   const int32_t* block_table, int pos, int kv_head, int num_heads,
                                   float* out) {
  const int d = p.head_dim;
  const long head_stride = static_cast<long>(p.block_size) * d;
  const long block_stride = p.num_kv_heads * head_stride;
  alignas(64) float scores[kMaxBlockSize + 16];
  float running_max[kMaxGroup];
  float running_sum[kMaxGroup];
  for (int h = 0; h < num_heads; ++h) {
    running_max[h] = -__builtin_inff();
    running_sum[h] = 0.0f;
    for (int i = 0; i < d; i += 16) {  // out doubles as the unnormalised accumulator
      _mm512_mask_storeu_ps(out + static_cast<long>(h) * d + i, tail_mask(d - i),
                            _mm512_setzero_ps());
    }
  }
  const int num_blocks = pos / p.block_size + 1;
  for (int b = 0; b < num_blocks; ++b) {
    const int32_t block_id = block_table[b];
    assert(block_id >= 0);
    const long base = block_id * block_stride + kv_head * head_stride;
    const float* keys = p.key_cache + base;
    const float* values = p.value_cache + base;
    const int remaining = pos + 1 - b * p.block_size;  // positions past the query are not read
    const int n_valid = remaining < p.block_size ? remaining : p.block_size;
    for (int h = 0; h < num_heads; ++h) {
      const float* qh = q + static_cast<long>(h) * d;
      float* oh = out + static_cast<long>(h) * d;
      float block_max = -__builtin_inff();
      for (int j = 0; j < n_valid; ++j) {
        scores[j] = dot(qh, keys + static_cast<long>(j) * d, d) * p.scale;
        block_max = scores[j] > block_max ? scores[j] : block_max;
      }
      if (block_max > running_max[h]) {
        // The first block rescales the zero state by exp(-inf) = 0, harmlessly.
        const float rescale =
            running_max[h] == -__builtin_inff()
                ? 0.0f
                : _mm512_cvtss_f32(exp_nonpositive(_mm512_set1_ps(running_max[h] - block_max)));
        running_sum[h] *= rescale;
        scale_in_place(oh, d, rescale);
        running_max[h] = block_max;
      }
      const __m512 max_v = _mm512_set1_ps(running_max[h]);
      __m512 sum_v = _mm512_setzero_ps();
      for (int j = 0; j < n_valid; j += 16) {
        const __mmask16 m = tail_mask(n_valid - j);
        const __m512 w =
            exp_nonpositive(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, scores + j), max_v));
        sum_v = _mm512_add_ps(sum_v, _mm512_maskz_mov_ps(m, w));
        _mm512_mask_storeu_ps(scores + j, m, w);
      }
      running_sum[h] += _mm512_reduce_add_ps(sum_v);
      accumulate_values(scores, values, n_valid, d, oh);
    }
  }
  for (int h = 0; h < num_heads; ++h)
    scale_in_place(out + static_cast<long>(h) * d, d, 1.0f / running_sum[h]);
}

}  // namespace

void attend_heads_avx512(const PagedAttentionParams& p, const float* q, const int32_t* block_table,
                         int pos, int kv_head, int num_heads, float* out) {
  assert(p.block_size <= kMaxBlockSize);
  for (int h0 = 0; h0 < num_heads; h0 += kMaxGroup) {
    const int count = num_heads - h0 < kMaxGroup ? num_heads - h0 : kMaxGroup;
    const long offset = static_cast<long>(h0) * p.head_dim;
    attend_group(p, q + offset, block_table, pos, kv_head, count, out + offset);
  }
}

}  // namespace pagedserve::kernels::detail
