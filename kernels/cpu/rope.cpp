// rope_rotate_half and its table forms: rotary position embedding in Hugging Face's rotate-half
// layout, whole-head or partial, with theta-derived or given (scaled) frequencies.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/thread_pool.h"

namespace pagedserve::kernels {
namespace {

// Rotates the pairs (i, i + rotary_dim/2) of every head in `x` ([num_heads, head_dim]) by the
// angles whose cos and sin are given; dims from rotary_dim on pass unchanged.
void rotate_heads(float* x, int num_heads, int head_dim, int rotary_dim, const float* cos_a,
                  const float* sin_a) {
  const int half = rotary_dim / 2;
  for (int h = 0; h < num_heads; ++h) {
    float* lo = x + static_cast<long>(h) * head_dim;
    float* hi = lo + half;
    for (int i = 0; i < half; ++i) {
      const float a = lo[i];
      const float b = hi[i];
      lo[i] = a * cos_a[i] - b * sin_a[i];
      hi[i] = b * cos_a[i] + a * sin_a[i];
    }
  }
}

}  // namespace

void rope_cos_sin(const int32_t* positions, int num_tokens, int head_dim, float theta,
                  float* cos_sin, ThreadPool* pool) {
  assert(positions != nullptr && cos_sin != nullptr && num_tokens >= 0);
  assert(head_dim > 0 && head_dim % 2 == 0 && theta > 0.0f);
  const int half = head_dim / 2;
  // Angles are formed in double: pos * inv_freq in float loses ~1e-4 rad at positions in the
  // thousands, far more than the rounding of the rotation itself. The cos and sin in double
  // dominate the cost (~50 FLOP-equivalents per pair) when splitting tokens.
  std::vector<double> inv_freq(half);
  for (int i = 0; i < half; ++i) {
    inv_freq[i] = std::pow(static_cast<double>(theta), -2.0 * i / head_dim);
  }
  parallel_for(pool, num_tokens, 50.0 * num_tokens * half, [&](int64_t t) {
    float* row = cos_sin + t * head_dim;
    for (int i = 0; i < half; ++i) {
      const double angle = positions[t] * inv_freq[i];
      row[i] = static_cast<float>(std::cos(angle));
      row[half + i] = static_cast<float>(std::sin(angle));
    }
  });
}

void rope_cos_sin_inv_freq(const int32_t* positions, int num_tokens, int rotary_dim,
                           const float* inv_freq, const float* const* inv_freq_per_token,
                           float attention_factor, float* cos_sin, ThreadPool* pool) {
  assert(positions != nullptr && cos_sin != nullptr && num_tokens >= 0);
  assert(rotary_dim > 0 && rotary_dim % 2 == 0);
  assert(inv_freq != nullptr || inv_freq_per_token != nullptr);
  const int half = rotary_dim / 2;
  // In double for the same reason as rope_cos_sin; the attention factor is applied before the
  // one rounding to float.
  parallel_for(pool, num_tokens, 50.0 * num_tokens * half, [&](int64_t t) {
    const float* freq = inv_freq_per_token != nullptr ? inv_freq_per_token[t] : inv_freq;
    float* row = cos_sin + t * rotary_dim;
    for (int i = 0; i < half; ++i) {
      const double angle = positions[t] * static_cast<double>(freq[i]);
      row[i] = static_cast<float>(std::cos(angle) * attention_factor);
      row[half + i] = static_cast<float>(std::sin(angle) * attention_factor);
    }
  });
}

void rope_rotate_half_partial(float* q, float* k, const float* cos_sin, int num_tokens,
                              int num_heads, int num_kv_heads, int head_dim, int rotary_dim,
                              ThreadPool* pool) {
  assert(q != nullptr && cos_sin != nullptr);
  assert(num_tokens >= 0 && num_heads > 0 && (k == nullptr || num_kv_heads > 0));
  assert(rotary_dim > 0 && rotary_dim % 2 == 0 && rotary_dim <= head_dim);
  const int half = rotary_dim / 2;
  const int k_heads = k != nullptr ? num_kv_heads : 0;
  parallel_for(pool, num_tokens, 6.0 * num_tokens * (num_heads + k_heads) * half, [&](int64_t t) {
    const float* cos_a = cos_sin + t * rotary_dim;
    const float* sin_a = cos_a + half;
    rotate_heads(q + t * num_heads * head_dim, num_heads, head_dim, rotary_dim, cos_a, sin_a);
    if (k != nullptr) {
      rotate_heads(k + t * num_kv_heads * head_dim, num_kv_heads, head_dim, rotary_dim, cos_a,
                   sin_a);
    }
  });
}

void rope_rotate_half_table(float* q, float* k, const float* cos_sin, int num_tokens, int num_heads,
                            int num_kv_heads, int head_dim, ThreadPool* pool) {
  assert(k != nullptr && head_dim > 0 && head_dim % 2 == 0);
  rope_rotate_half_partial(q, k, cos_sin, num_tokens, num_heads, num_kv_heads, head_dim, head_dim,
                           pool);
}

void rope_rotate_half(float* q, float* k, const int32_t* positions, int num_tokens, int num_heads,
                      int num_kv_heads, int head_dim, float theta, ThreadPool* pool) {
  assert(q != nullptr && k != nullptr && positions != nullptr);
  std::vector<float> cos_sin(static_cast<size_t>(num_tokens) * head_dim);
  rope_cos_sin(positions, num_tokens, head_dim, theta, cos_sin.data(), pool);
  rope_rotate_half_table(q, k, cos_sin.data(), num_tokens, num_heads, num_kv_heads, head_dim, pool);
}

}  // namespace pagedserve::kernels
