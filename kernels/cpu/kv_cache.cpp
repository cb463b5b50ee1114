// write_kv: scatters a step's new keys and values into their paged KV cache slots, rounding
// them to the cache's element type (or, for int8, quantizing each row with its scale).
#include <immintrin.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/avx512_lanes.h"
#include "kernels/cpu/kernels.h"

// GCC 12's intrinsics for max, the conversions and the reductions start from
// _mm512_undefined_*, which -Wmaybe-uninitialized reports as a false positive once inlined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace pagedserve::kernels {
namespace {

inline void store_row(const float* src, int n, float* dst) { std::copy_n(src, n, dst); }

// The scalar conversions are the specification (round to nearest even); bfloat16's is
// branch-free and vectorises as it is.
template <KvDtype kDtype>
inline void store_row(const float* src, int n, uint16_t* dst) {
  for (int i = 0; i < n; ++i) {
    dst[i] = kDtype == KvDtype::kFloat16 ? f32_to_f16(src[i]) : f32_to_bf16(src[i]);
  }
}

// float16 with F16C (every AVX2 and AVX-512 machine here): vcvtps2ph rounding to nearest even
// gives f32_to_f16's bits (kv_dtype_test checks them against each other), ~10x faster than
// the branchy scalar code on a 512-token prefill's K/V.
__attribute__((target("avx2,fma,f16c"))) void store_row_f16c(const float* src, int n,
                                                             uint16_t* dst) {
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i half =
        _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), half);
  }
  for (; i < n; ++i) dst[i] = f32_to_f16(src[i]);
}

template <KvDtype kDtype, class Element>
void write_kv_typed(const float* key, const float* value, const int64_t* slot_mapping,
                    int num_tokens, const KvCacheView& cache, bool f16c) {
  const long row = static_cast<long>(cache.num_kv_heads) * cache.head_dim;  // one token
  const long head_stride = static_cast<long>(cache.block_size) * cache.head_dim;
  Element* key_cache = static_cast<Element*>(cache.key);
  Element* value_cache = static_cast<Element*>(cache.value);
  for (int t = 0; t < num_tokens; ++t) {
    const int64_t slot = slot_mapping[t];
    if (slot < 0) continue;  // padding token: nothing to store
    const int64_t block = slot / cache.block_size;
    const int64_t offset = slot % cache.block_size;
    assert(block < cache.num_blocks);
    // Within a block the layout is [num_kv_heads, block_size, head_dim], so one token's heads
    // are block_size * head_dim apart.
    const int64_t base = block * cache.num_kv_heads * head_stride + offset * cache.head_dim;
    for (int h = 0; h < cache.num_kv_heads; ++h) {
      const float* k_src = key + t * row + static_cast<long>(h) * cache.head_dim;
      const float* v_src = value + t * row + static_cast<long>(h) * cache.head_dim;
      if constexpr (kDtype == KvDtype::kFloat32) {
        store_row(k_src, cache.head_dim, key_cache + base + h * head_stride);
        store_row(v_src, cache.head_dim, value_cache + base + h * head_stride);
      } else if (kDtype == KvDtype::kFloat16 && f16c) {
        store_row_f16c(k_src, cache.head_dim, key_cache + base + h * head_stride);
        store_row_f16c(v_src, cache.head_dim, value_cache + base + h * head_stride);
      } else {
        store_row<kDtype>(k_src, cache.head_dim, key_cache + base + h * head_stride);
        store_row<kDtype>(v_src, cache.head_dim, value_cache + base + h * head_stride);
      }
    }
  }
}

// quantize_kv_row_int8 on AVX-512, the same bits: vmaxps keeps its second operand when the
// first is NaN (the scalar loop's skip), vcvtps2dq rounds the float product to nearest even
// (the scalar add-and-subtract), and a NaN element's conversion is masked to 0.
__attribute__((target("avx512f,avx512bw,avx512vl,fma"))) float quantize_kv_row_int8_avx512(
    const float* x, int n, int8_t* q) {
  __m512 amax_lanes = _mm512_setzero_ps();
  for (int i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask16(n - i);
    const __m512 magnitude = _mm512_abs_ps(_mm512_maskz_loadu_ps(m, x + i));
    amax_lanes = _mm512_max_ps(magnitude, amax_lanes);
  }
  const float amax = _mm512_reduce_max_ps(amax_lanes);
  if (!(amax >= kKvInt8MinAmax) || !std::isfinite(amax)) {
    std::fill_n(q, n, int8_t{0});
    return 0.0f;
  }
  const __m512 inverse = _mm512_set1_ps(127.0f / amax);
  for (int i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask16(n - i);
    const __m512 product = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inverse);
    const __mmask16 ordered = _mm512_cmp_ps_mask(product, product, _CMP_ORD_Q);
    const __m512i rounded = _mm512_maskz_mov_epi32(ordered, _mm512_cvtps_epi32(product));
    _mm512_mask_cvtsepi32_storeu_epi8(q + i, m, rounded);
  }
  return amax / 127.0f;
}

// int8: each (token, head) row quantized with its own scale, stored at the row's element
// offset / head_dim in the scale arrays.
void write_kv_int8(const float* key, const float* value, const int64_t* slot_mapping,
                   int num_tokens, const KvCacheView& cache, Isa isa) {
  const auto quantize_row =
      isa == Isa::kAvx512 ? quantize_kv_row_int8_avx512 : quantize_kv_row_int8;
  assert(cache.key_scales != nullptr && cache.value_scales != nullptr);
  const long row = static_cast<long>(cache.num_kv_heads) * cache.head_dim;  // one token
  auto* key_cache = static_cast<int8_t*>(cache.key);
  auto* value_cache = static_cast<int8_t*>(cache.value);
  for (int t = 0; t < num_tokens; ++t) {
    const int64_t slot = slot_mapping[t];
    if (slot < 0) continue;
    const int64_t block = slot / cache.block_size;
    const int64_t offset = slot % cache.block_size;
    assert(block < cache.num_blocks);
    for (int h = 0; h < cache.num_kv_heads; ++h) {
      const int64_t scale_index = (block * cache.num_kv_heads + h) * cache.block_size + offset;
      const int64_t base = scale_index * cache.head_dim;
      const long src = t * row + static_cast<long>(h) * cache.head_dim;
      cache.key_scales[scale_index] = quantize_row(key + src, cache.head_dim, key_cache + base);
      cache.value_scales[scale_index] =
          quantize_row(value + src, cache.head_dim, value_cache + base);
    }
  }
}

}  // namespace

void write_kv(const float* key, const float* value, const int64_t* slot_mapping, int num_tokens,
              const KvCacheView& cache, Isa isa) {
  assert(num_tokens >= 0);
  assert(num_tokens == 0 || (key != nullptr && value != nullptr && slot_mapping != nullptr));
  assert(cache.key != nullptr && cache.value != nullptr);
  assert(cache.block_size > 0 && cache.num_kv_heads > 0 && cache.head_dim > 0);
  assert(isa_supported(isa));
  const bool f16c = isa != Isa::kPortable;  // AVX2 and AVX-512 paths both have F16C
  switch (cache.dtype) {
    case KvDtype::kFloat16:
      return write_kv_typed<KvDtype::kFloat16, uint16_t>(key, value, slot_mapping, num_tokens,
                                                         cache, f16c);
    case KvDtype::kBFloat16:
      return write_kv_typed<KvDtype::kBFloat16, uint16_t>(key, value, slot_mapping, num_tokens,
                                                          cache, f16c);
    case KvDtype::kInt8:
      return write_kv_int8(key, value, slot_mapping, num_tokens, cache, isa);
    default:
      return write_kv_typed<KvDtype::kFloat32, float>(key, value, slot_mapping, num_tokens, cache,
                                                      f16c);
  }
}

}  // namespace pagedserve::kernels
