// exp over 8 double lanes, for the sampler's row kernels (sampling_rows.cpp), which want
// probabilities as close to std::exp as the scalar sampler they replaced. Include it only
// from translation units that pick their AVX-512 paths at run time (isa.h).
#pragma once

#include <immintrin.h>

#pragma GCC diagnostic push
#if !defined(__clang__)  // GCC only: clang has no such warning and warns of the name
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace pagedserve::kernels {

// x clamped to [-746, 709.5] (below, e^x rounds to 0 in double, so -inf gives 0 as std::exp
// does), x = n ln2 + r with |r| <= ln2 / 2 (ln2 split in fdlibm's two parts so that n * hi
// is exact), a degree-13 Taylor polynomial for e^r (truncation below 1e-17 relative), scaled
// by 2^n with scalef, which also rounds the subnormal results. Within ~2 ulp of std::exp.
__attribute__((target("avx512f,avx512bw,avx512vl,fma"))) inline __m512d exp_avx512_pd(__m512d x) {
  x = _mm512_min_pd(_mm512_max_pd(x, _mm512_set1_pd(-746.0)), _mm512_set1_pd(709.5));
  const __m512d n = _mm512_roundscale_pd(_mm512_mul_pd(x, _mm512_set1_pd(1.4426950408889634)),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512d r = _mm512_fnmadd_pd(n, _mm512_set1_pd(6.93147180369123816490e-01), x);
  r = _mm512_fnmadd_pd(n, _mm512_set1_pd(1.90821492927058770002e-10), r);
  // Estrin's scheme: the 14 coefficients 1/k! paired, then combined with r^2, r^4 and r^8,
  // so the dependent chain is ~6 operations deep instead of Horner's 13 (the exp is most of
  // the sampler's histogram pass).
  const __m512d r2 = _mm512_mul_pd(r, r);
  const __m512d r4 = _mm512_mul_pd(r2, r2);
  const __m512d r8 = _mm512_mul_pd(r4, r4);
  const __m512d p01 = _mm512_fmadd_pd(r, _mm512_set1_pd(1.0), _mm512_set1_pd(1.0));
  const __m512d p23 = _mm512_fmadd_pd(r, _mm512_set1_pd(1.0 / 6), _mm512_set1_pd(1.0 / 2));
  const __m512d p45 = _mm512_fmadd_pd(r, _mm512_set1_pd(1.0 / 120), _mm512_set1_pd(1.0 / 24));
  const __m512d p67 = _mm512_fmadd_pd(r, _mm512_set1_pd(1.0 / 5040), _mm512_set1_pd(1.0 / 720));
  const __m512d p89 = _mm512_fmadd_pd(r, _mm512_set1_pd(1.0 / 362880), _mm512_set1_pd(1.0 / 40320));
  const __m512d p1011 =
      _mm512_fmadd_pd(r, _mm512_set1_pd(1.0 / 39916800), _mm512_set1_pd(1.0 / 3628800));
  const __m512d p1213 =
      _mm512_fmadd_pd(r, _mm512_set1_pd(1.0 / 6227020800.0), _mm512_set1_pd(1.0 / 479001600));
  const __m512d p03 = _mm512_fmadd_pd(r2, p23, p01);
  const __m512d p47 = _mm512_fmadd_pd(r2, p67, p45);
  const __m512d p811 = _mm512_fmadd_pd(r2, p1011, p89);
  const __m512d p07 = _mm512_fmadd_pd(r4, p47, p03);
  const __m512d p813 = _mm512_fmadd_pd(r4, p1213, p811);
  const __m512d p = _mm512_fmadd_pd(r8, p813, p07);
  return _mm512_scalef_pd(p, n);
}

}  // namespace pagedserve::kernels

#pragma GCC diagnostic pop
