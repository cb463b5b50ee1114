// The gated activations of the MLP: silu(gate) * up (Llama and most others) and
// gelu_tanh(gate) * up (Gemma's GeGLU).
#include <immintrin.h>

#include <cassert>
#include <cmath>

#include "kernels/cpu/exp_avx512.h"
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

// One row of gelu_tanh(gate) * up, 16 lanes at a time. 0.5 x (1 + tanh(u)) is evaluated as
// x / (1 + exp(-2u)), the same function (1 + tanh(u) = 2 / (1 + exp(-2u))) without the
// cancellation of 1 + tanh(u) for negative u; exp_avx512's clamp keeps large |u| finite.
PS_TARGET_AVX512 void gelu_tanh_and_mul_row_avx512(const float* gate, const float* up, float* out,
                                                   int n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  // -2u = x * (-2 sqrt(2/pi) - 2 sqrt(2/pi) 0.044715 x^2)
  const __m512 c1 = _mm512_set1_ps(-1.5957691216057308f);
  const __m512 c3 = _mm512_set1_ps(-0.0713548162726f);
  for (int i = 0; i < n; i += 16) {
    const __mmask16 m =
        n - i >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
    const __m512 u = _mm512_maskz_loadu_ps(m, up + i);
    const __m512 minus_2u = _mm512_mul_ps(g, _mm512_fmadd_ps(c3, _mm512_mul_ps(g, g), c1));
    const __m512 e = exp_avx512(minus_2u);
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(one, e)), u));
  }
}

void gelu_tanh_and_mul_row(const float* gate, const float* up, float* out, int n) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  for (int i = 0; i < n; ++i) {
    const float g = gate[i];
    const float inner = kSqrt2OverPi * (g + 0.044715f * g * g * g);
    out[i] = 0.5f * g * (1.0f + std::tanh(inner)) * up[i];
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
    silu_and_mul(gate, gate + ffn, out + r * ffn, ffn);
  });
}

void gelu_tanh_and_mul_stacked(const float* gate_up, float* out, int num_rows, int ffn,
                               ThreadPool* pool, Isa isa) {
  assert(gate_up != nullptr && out != nullptr && num_rows >= 0 && ffn >= 0);
  assert(isa_supported(isa));
  if (isa == Isa::kAvx512) {
    parallel_for(pool, num_rows, 6.0 * num_rows * ffn, [&](int64_t r) {
      const float* gate = gate_up + r * 2 * ffn;
      gelu_tanh_and_mul_row_avx512(gate, gate + ffn, out + r * ffn, ffn);
    });
    return;
  }
  parallel_for(pool, num_rows, 25.0 * num_rows * ffn, [&](int64_t r) {
    const float* gate = gate_up + r * 2 * ffn;
    gelu_tanh_and_mul_row(gate, gate + ffn, out + r * ffn, ffn);
  });
}

}  // namespace pagedserve::kernels
