// rope_rotate_half: rotary position embedding in Hugging Face's rotate-half layout.
#include <algorithm>
#include <cassert>
#include <cmath>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/thread_pool.h"

namespace pagedserve::kernels {
namespace {

// Rotates the pairs (i, i + half) for i in [i0, i0 + count) of every head in `x`
// ([num_heads, head_dim]) by the angles whose cos and sin are given.
void rotate_heads(float* x, int num_heads, int head_dim, int i0, int count, const float* cos_a,
                  const float* sin_a) {
  const int half = head_dim / 2;
  for (int h = 0; h < num_heads; ++h) {
    float* lo = x + static_cast<long>(h) * head_dim + i0;
    float* hi = lo + half;
    for (int i = 0; i < count; ++i) {
      const float a = lo[i];
      const float b = hi[i];
      lo[i] = a * cos_a[i] - b * sin_a[i];
      hi[i] = b * cos_a[i] + a * sin_a[i];
    }
  }
}

}  // namespace

void rope_rotate_half(float* q, float* k, const int32_t* positions, int num_tokens, int num_heads,
                      int num_kv_heads, int head_dim, float theta, ThreadPool* pool) {
  assert(q != nullptr && k != nullptr && positions != nullptr);
  assert(num_tokens >= 0 && num_heads > 0 && num_kv_heads > 0);
  assert(head_dim > 0 && head_dim % 2 == 0 && theta > 0.0f);
  const int half = head_dim / 2;
  // Pairs are handled kChunk at a time so the frequencies and angles fit in stack arrays for
  // any head_dim. Angles are formed in double: pos * inv_freq in float loses ~1e-4 rad at
  // positions in the thousands, far more than the rounding of the rotation itself. The cos and
  // sin in double dominate the cost (~50 FLOP-equivalents per pair) when splitting tokens.
  constexpr int kChunk = 64;
  parallel_for(pool, num_tokens, 50.0 * num_tokens * half, [&](int64_t t) {
    double inv_freq[kChunk];
    float cos_a[kChunk];
    float sin_a[kChunk];
    for (int i0 = 0; i0 < half; i0 += kChunk) {
      const int count = std::min(kChunk, half - i0);
      for (int i = 0; i < count; ++i) {
        inv_freq[i] = std::pow(static_cast<double>(theta), -2.0 * (i0 + i) / head_dim);
        const double angle = positions[t] * inv_freq[i];
        cos_a[i] = static_cast<float>(std::cos(angle));
        sin_a[i] = static_cast<float>(std::sin(angle));
      }
      rotate_heads(q + t * num_heads * head_dim, num_heads, head_dim, i0, count, cos_a, sin_a);
      rotate_heads(k + t * num_kv_heads * head_dim, num_kv_heads, head_dim, i0, count, cos_a,
                   sin_a);
    }
  });
}

}  // namespace pagedserve::kernels
