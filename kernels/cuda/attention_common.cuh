// What the two attention kernels share (attention.cu: any batch; decode_attention.cu:
// decode-only batches): the kernel arguments, the masking and soft-capping rules, and warp
// reductions. Internal to kernels/cuda.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/cuda_kernels.h"

namespace pagedserve::kernels::cuda::attention_detail {

constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float warp_max(float x) {
  for (int offset = 16; offset > 0; offset /= 2) {
    x = fmaxf(x, __shfl_xor_sync(kFullMask, x, offset));
  }
  return x;
}

__device__ __forceinline__ float warp_sum(float x) {
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(kFullMask, x, offset);
  return x;
}

struct AttentionArgs {
  const float* query;
  float* out;
  const void* key_cache;
  const void* value_cache;
  float k_scale;
  float v_scale;
  int block_size;
  int block_shift;  // log2(block_size) when a power of two, else -1
  int num_kv_heads;
  int head_dim;
  const int32_t* query_start_loc;
  const int32_t* seq_lens;
  const int32_t* block_tables;
  const int32_t* work_items;
  int max_blocks_per_seq;
  int num_heads;
  float scale;
  int sliding_window;   // 0: the whole context
  float logit_softcap;  // 0: none
  int partition_size;   // 0: no split
  int num_partitions;
  float* partial_out;
  float* partial_max;
  float* partial_sum;
};

// The first position the query at `pos` sees (as kernels::detail::first_visible_position).
__device__ __forceinline__ int first_visible_position(int sliding_window, int pos) {
  return sliding_window > 0 && pos >= sliding_window ? pos - sliding_window + 1 : 0;
}

__device__ __forceinline__ float soft_cap_score(float score, float cap) {
  return cap > 0.0f ? cap * tanhf(score / cap) : score;
}

// At most this many query heads per KV head take the decode kernel.
constexpr int kMaxDecodeGroup = 8;

// Whether the decode kernel is built for this cache dtype and head size: 64 and 128, and 256
// for the 8- and 16-bit caches (a float32 row of 256 is more than one warp's 16-byte reads).
inline bool decode_attention_supports(DType dtype, int head_dim) {
  return head_dim == 64 || head_dim == 128 || (head_dim == 256 && dtype != DType::kFloat32);
}

// The decode kernel (decode_attention.cu) over `grid` (sequence, KV head, partition), where
// decode_attention_supports(dtype, head_dim), for a group of at most kMaxDecodeGroup heads;
// split-K partials are merged by the caller as for the tiled kernel.
cudaError_t decode_attention(const AttentionArgs& args, dim3 grid, DType dtype, int head_dim,
                             cudaStream_t stream);

}  // namespace pagedserve::kernels::cuda::attention_detail
