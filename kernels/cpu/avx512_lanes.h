// Lane helpers shared by the AVX-512 row kernels (sampling_rows.cpp, exp_band.cpp). Include it
// only from translation units that pick their AVX-512 paths at run time (isa.h): the functions
// carry their own target attribute.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace pagedserve::kernels {

#define PS_LANES_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))

// The lanes of the 16-float vector at `remaining` elements from the row's end that lie inside it.
PS_LANES_AVX512 inline __mmask16 tail_mask16(int64_t remaining) {
  return remaining >= 16 ? static_cast<__mmask16>(0xffff)
                         : static_cast<__mmask16>((1u << remaining) - 1);
}

// The 16 floats of v as two vectors of 8 doubles (lanes 0-7, 8-15); exact.
PS_LANES_AVX512 inline void widen_to_pd(__m512 v, __m512d* lo, __m512d* hi) {
  *lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
  *hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}

#undef PS_LANES_AVX512

}  // namespace pagedserve::kernels
