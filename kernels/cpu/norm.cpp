// rms_norm: the Llama RMSNorm over each row of a [num_rows, hidden] activation (and per head,
// for the q/k norms of Qwen3 and Gemma 3).
#include <cassert>
#include <cmath>

#include "kernels/cpu/kernels.h"

namespace pagedserve::kernels {

void rms_norm(const float* x, const float* weight, float* out, int num_rows, int hidden,
              float eps) {
  assert(x != nullptr && weight != nullptr && out != nullptr);
  assert(num_rows >= 0 && hidden > 0 && eps >= 0.0f);
  // Independent partial sums let the compiler vectorise the reduction without reassociating.
  constexpr int kLanes = 8;
  for (long r = 0; r < num_rows; ++r) {
    const float* row = x + r * hidden;
    float lanes[kLanes] = {};
    const int h_vec = hidden - hidden % kLanes;
    for (int i = 0; i < h_vec; i += kLanes) {
      for (int l = 0; l < kLanes; ++l) lanes[l] += row[i + l] * row[i + l];
    }
    float sum_sq = 0.0f;
    for (int l = 0; l < kLanes; ++l) sum_sq += lanes[l];
    for (int i = h_vec; i < hidden; ++i) sum_sq += row[i] * row[i];
    const float inv_rms = 1.0f / std::sqrt(sum_sq / static_cast<float>(hidden) + eps);
    // Element-wise from here on, so out may alias x: each element is read before it is written.
    float* out_row = out + r * hidden;
    for (int i = 0; i < hidden; ++i) out_row[i] = row[i] * inv_rms * weight[i];
  }
}

void add_rms_norm(float* x, const float* delta, const float* weight, float* out, int num_rows,
                  int hidden, float eps) {
  assert(x != nullptr && delta != nullptr && weight != nullptr && out != nullptr);
  assert(num_rows >= 0 && hidden > 0 && eps >= 0.0f);
  constexpr int kLanes = 8;
  for (long r = 0; r < num_rows; ++r) {
    float* row = x + r * hidden;
    const float* d = delta + r * hidden;
    float lanes[kLanes] = {};
    const int h_vec = hidden - hidden % kLanes;
    for (int i = 0; i < h_vec; i += kLanes) {
      for (int l = 0; l < kLanes; ++l) {
        const float v = row[i + l] + d[i + l];
        row[i + l] = v;
        lanes[l] += v * v;
      }
    }
    float sum_sq = 0.0f;
    for (int l = 0; l < kLanes; ++l) sum_sq += lanes[l];
    for (int i = h_vec; i < hidden; ++i) {
      row[i] += d[i];
      sum_sq += row[i] * row[i];
    }
    const float inv_rms = 1.0f / std::sqrt(sum_sq / static_cast<float>(hidden) + eps);
    float* out_row = out + r * hidden;
    for (int i = 0; i < hidden; ++i) out_row[i] = row[i] * inv_rms * weight[i];
  }
}

void rms_norm_heads(float* x, const float* weight, int num_rows, int num_heads, int head_dim,
                    float eps) {
  assert(x != nullptr && weight != nullptr && num_rows >= 0 && num_heads > 0);
  // Every head's slice is a row of rms_norm over [num_rows * num_heads, head_dim], in place.
  rms_norm(x, weight, x, num_rows * num_heads, head_dim, eps);
}

}  // namespace pagedserve::kernels
