// exp over 16 float lanes, for the AVX-512 kernels that need it (SiLU-and-multiply, the online
// softmax of paged attention). Include it only from translation units that already pick their
// AVX-512 paths at run time (isa.h): the function carries its own target attribute.
#pragma once

#include <immintrin.h>

// GCC 12's roundscale and scalef intrinsics start from _mm512_undefined_ps, which
// -Wmaybe-uninitialized reports as a false positive once inlined.
#pragma GCC diagnostic push
#if !defined(__clang__)  // GCC only: clang has no such warning and warns of the name
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace pagedserve::kernels {

// e^x = 2^n * e^r, x = n ln2 + r with |r| <= ln2 / 2 (Cody-Waite: the ln2_hi step is exact):
// returns e^r by a degree-7 Taylor polynomial (truncation below 1e-8 relative) and sets *n.
__attribute__((target("avx512f,avx512bw,avx512vl,fma"))) inline __m512 exp_avx512_reduced(
    __m512 x, __m512* n) {
  *n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(*n, _mm512_set1_ps(0.693145751953125f), x);   // ln2 high bits
  r = _mm512_fnmadd_ps(*n, _mm512_set1_ps(1.42860682030941723212e-6f), r);  // ln2 low bits
  __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
}

// e^x for x in [-87, 88] (no clamp: for callers whose arguments are bounded already).
__attribute__((target("avx512f,avx512bw,avx512vl,fma"))) inline __m512 exp_avx512_in_range(
    __m512 x) {
  __m512 n;
  const __m512 p = exp_avx512_reduced(x, &n);
  return _mm512_scalef_ps(p, n);
}

// e^x * 2^-k for x / ln2 - k in [-126, 127], |x| < 2^22 and k integral: k is taken off the
// power of two the result is scaled by, so x is never shifted by a float subtraction first.
// That makes the result's error independent of the shift. e^(s - m) as
// exp_avx512_in_range(s - m) carries the rounding of s - m (up to (s - m) * 2^-24, relative);
// e^s * 2^-k, with k = round(m / ln2), is within 3 * 2^-24 of itself, relative (the ln2_lo
// step rounds below 2^-26, the polynomial's Horner steps are damped by |r| <= ln2 / 2;
// tests/kernels/exp_band_test.cpp checks it), and differs from e^(s - m) by the factor
// e^(m - k ln2), the same for every s.
__attribute__((target("avx512f,avx512bw,avx512vl,fma"))) inline __m512 exp_avx512_times_pow2(
    __m512 x, __m512 minus_k) {
  __m512 n;
  const __m512 p = exp_avx512_reduced(x, &n);
  return _mm512_scalef_ps(p, _mm512_add_ps(n, minus_k));
}

// x clamped to [-87, 88] (beyond, e^x is 0 or inf to float precision in every use here), then
// exp_avx512_in_range.
__attribute__((target("avx512f,avx512bw,avx512vl,fma"))) inline __m512 exp_avx512(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f));
  return exp_avx512_in_range(x);
}

}  // namespace pagedserve::kernels

#pragma GCC diagnostic pop
