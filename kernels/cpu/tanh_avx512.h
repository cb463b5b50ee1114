// tanh over 16 float lanes, for the AVX-512 kernels that need it (attention-logit soft-capping,
// Gemma 2's final-logit soft-capping). Like exp_avx512.h, include it only from translation
// units that pick their AVX-512 paths at run time: the function carries its own target.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/exp_avx512.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace pagedserve::kernels {

// |x| < 1/4: the odd Taylor series to x^11 (the next term is below 1e-9 relative there), because
// 1 - 2 / (e^2|x| + 1) loses the low bits of small results to cancellation.
// |x| >= 1/4: sign(x) (1 - 2 / (e^2|x| + 1)), within ~1e-7 absolute; exp_avx512 clamps its
// argument, so large |x| gives exactly +-1 and never inf / inf.
__attribute__((target("avx512f,avx512bw,avx512vl,fma"))) inline __m512 tanh_avx512(__m512 x) {
  const __m512 abs_x = _mm512_abs_ps(x);
  const __m512 x2 = _mm512_mul_ps(x, x);
  __m512 p = _mm512_set1_ps(-1382.0f / 155925.0f);
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(62.0f / 2835.0f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-17.0f / 315.0f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(2.0f / 15.0f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-1.0f / 3.0f));
  const __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(p, x2), x, x);
  const __m512 e = exp_avx512(_mm512_add_ps(abs_x, abs_x));
  const __m512 large_abs =
      _mm512_sub_ps(_mm512_set1_ps(1.0f),
                    _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, _mm512_set1_ps(1.0f))));
  // x's sign bit onto the magnitude (integer ops: the float and/or need AVX-512 DQ).
  const __m512i sign = _mm512_and_epi32(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN));
  const __m512 large = _mm512_castsi512_ps(_mm512_or_epi32(_mm512_castps_si512(large_abs), sign));
  const __mmask16 is_small = _mm512_cmp_ps_mask(abs_x, _mm512_set1_ps(0.25f), _CMP_LT_OQ);
  return _mm512_mask_blend_ps(is_small, large, small);
}

}  // namespace pagedserve::kernels

#pragma GCC diagnostic pop
