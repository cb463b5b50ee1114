// silu_and_mul: the gated activation of the Llama MLP, silu(gate) * up.
#include <immintrin.h>

#include <cassert>
#include <cmath>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/thread_pool.h"

// GCC 12's intrinsics for roundscale and scalef start from _mm512_undefined_*, which
// -Wmaybe-uninitialized reports as a false positive once inlined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#define PS_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))

namespace pagedserve::kernels {
namespace {

// exp(x) over the whole float range: x clamped to [-87, 88] (beyond, silu is g or 0 to float
// precision anyway), x = n ln2 + r with |r| <= ln2 / 2, a degree-7 Taylor polynomial for e^r
// (truncation below 1e-8 relative), scaled by 2^n.
PS_TARGET_AVX512 inline __m512 exp_avx512(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f));
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

// One row of silu(gate) * up, 16 lanes at a time (the tail masked). Scalar std::exp made this
// stage ~5% of a 512-token prefill.
PS_TARGET_AVX512 void silu_and_mul_row_avx512(const float* gate, const float* up, float* out,
                                              int n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int i = 0; i < n; i += 16) {
    const __mmask16 m =
        n - i >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
    const __m512 u = _mm512_maskz_loadu_ps(m, up + i);
    const __m512 e = exp_avx512(_mm512_sub_ps(_mm512_setzero_ps(), g));
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(one, e)), u));
  }
}

}  // namespace

void silu_and_mul(const float* gate, const float* up, float* out, int64_t n) {
  assert(gate != nullptr && up != nullptr && out != nullptr);
  assert(n >= 0);
  // Both inputs are read before the output is written, element by element, so out may alias
  // gate or up (no restrict here on purpose).
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void silu_and_mul_stacked(const float* gate_up, float* out, int num_rows, int ffn, ThreadPool* pool,
                          Isa isa) {
  assert(gate_up != nullptr && out != nullptr && num_rows >= 0 && ffn >= 0);
  assert(isa_supported(isa));
  if (isa == Isa::kAvx512) {
    // Vector exp: ~4 FLOP-equivalents per element.
    parallel_for(pool, num_rows, 4.0 * num_rows * ffn, [&](int64_t r) {
      const float* gate = gate_up + r * 2 * ffn;
      silu_and_mul_row_avx512(gate, gate + ffn, out + r * ffn, ffn);
    });
    return;
  }
  // exp dominates: ~20 FLOP-equivalents per element is a fair cost estimate for the split.
  parallel_for(pool, num_rows, 20.0 * num_rows * ffn, [&](int64_t r) {
    const float* gate = gate_up + r * 2 * ffn;
    const float* up = gate + ffn;
    float* o = out + r * ffn;
    for (int i = 0; i < ffn; ++i) o[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
  });
}

}  // namespace pagedserve::kernels
