// Small element-wise kernels of the model families beyond Llama: bias addition (Qwen2's q/k/v
// biases) and soft-capping (Gemma 2's final logits).
#include <immintrin.h>

#include <algorithm>
#include <cassert>
#include <cmath>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/tanh_avx512.h"
#include "kernels/cpu/thread_pool.h"

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace pagedserve::kernels {
namespace {

// soft_cap splits its elements into chunks of this many, so a row of logits of any vocabulary
// spreads over the pool and each element's arithmetic does not depend on the split.
constexpr int64_t kSoftCapChunk = 4096;

__attribute__((target("avx512f,avx512bw,avx512vl,fma"))) void soft_cap_avx512(float* x, int64_t n,
                                                                              float cap) {
  const __m512 cap_v = _mm512_set1_ps(cap);
  const __m512 inv_cap = _mm512_set1_ps(1.0f / cap);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m =
        n - i >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(cap_v, tanh_avx512(_mm512_mul_ps(v, inv_cap))));
  }
}

}  // namespace

void add_bias(float* x, const float* bias, int num_rows, int width) {
  assert(x != nullptr && bias != nullptr && num_rows >= 0 && width >= 0);
  for (long r = 0; r < num_rows; ++r) {
    float* row = x + r * width;
    for (int i = 0; i < width; ++i) row[i] += bias[i];
  }
}

void soft_cap(float* x, int64_t n, float cap, ThreadPool* pool, Isa isa) {
  assert(x != nullptr && n >= 0 && cap > 0.0f);
  assert(isa_supported(isa));
  const int64_t num_chunks = (n + kSoftCapChunk - 1) / kSoftCapChunk;
  parallel_for(pool, num_chunks, 20.0 * static_cast<double>(n), [&](int64_t c) {
    float* chunk = x + c * kSoftCapChunk;
    const int64_t count = std::min(kSoftCapChunk, n - c * kSoftCapChunk);
    if (isa == Isa::kAvx512) {
      soft_cap_avx512(chunk, count, cap);
      return;
    }
    for (int64_t i = 0; i < count; ++i) chunk[i] = cap * std::tanh(chunk[i] / cap);
  });
}

}  // namespace pagedserve::kernels
