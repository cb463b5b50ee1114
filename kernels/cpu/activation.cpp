// silu_and_mul: the gated activation of the Llama MLP, silu(gate) * up.
#include <cassert>
#include <cmath>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/thread_pool.h"

namespace pagedserve::kernels {

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

void silu_and_mul_stacked(const float* gate_up, float* out, int num_rows, int ffn,
                          ThreadPool* pool) {
  assert(gate_up != nullptr && out != nullptr && num_rows >= 0 && ffn >= 0);
  // exp dominates: ~20 FLOP-equivalents per element is a fair cost estimate for the split.
  parallel_for(pool, num_rows, 20.0 * num_rows * ffn, [&](int64_t r) {
    const float* gate = gate_up + r * 2 * ffn;
    const float* up = gate + ffn;
    float* o = out + r * ffn;
    for (int i = 0; i < ffn; ++i) o[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
  });
}

}  // namespace pagedserve::kernels
