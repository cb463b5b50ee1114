// Paged attention (decode, prefill and chunked prefill in one kernel, optionally split-K; decode-
// only batches go to decode_attention.cu), the K/V write into cache slots, and block copies
// for copy-on-write.
//
// Attention: one thread block per (work item, KV head, partition). A work item is up to
// kAttentionRowsPerBlock query rows of one sequence, each row a (query token, query head) pair
// of that KV head's GQA group, and each warp owns one row. The block walks the context in
// tiles of kTile tokens: all threads load the tile's keys and values (through the block table,
// converted to float) into shared memory, then every warp scores its row against the tile with
// one key per lane, updates its running max and sum (online softmax, FlashAttention style) and
// accumulates the values with each lane owning head_dim / 32 output dimensions. K/V are thus
// read once per block for all heads of a group (decode) and for several tokens (prefill).
// With a sliding window the walk starts at the first row's window, so a row costs O(window);
// each row masks the keys before its own window. Soft-capping bends each score (already
// scaled: q is pre-scaled) before the online softmax, as in the CPU twin.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/dtype_convert.cuh"

namespace pagedserve::kernels::cuda {
namespace {

using namespace attention_detail;

constexpr int kWarps = kAttentionRowsPerBlock;
constexpr int kThreads = kWarps * 32;
constexpr int kTile = 32;  // context tokens per shared-memory tile: one per lane
constexpr int kMaxGenericHeadDim = 128;
// kHeadDim 0: head_dim read at run time (at most kMaxGenericHeadDim).
template <typename CacheT, int kHeadDim>
__global__ void __launch_bounds__(kThreads) attention_kernel(AttentionArgs a) {
  constexpr int kPer = (kHeadDim > 0 ? kHeadDim : kMaxGenericHeadDim) / 32;  // dims per lane
  // 16-byte loads of the cache when a token's head_dim elements split into whole vectors.
  constexpr int kVec = 16 / sizeof(CacheT);
  const int head_dim = kHeadDim > 0 ? kHeadDim : a.head_dim;
  const int k_stride = head_dim + 1;  // padding: lane j reads row j without bank conflicts

  extern __shared__ float smem[];
  float* q_s = smem;                     // [kWarps, head_dim], pre-scaled
  float* k_s = q_s + kWarps * head_dim;  // [kTile, head_dim + 1]
  float* v_s = k_s + kTile * k_stride;   // [kTile, head_dim]

  const int seq = a.work_items[2 * blockIdx.x];
  const int first_row = a.work_items[2 * blockIdx.x + 1];
  const int kv_head = blockIdx.y;
  const int part = blockIdx.z;
  const int q_start = a.query_start_loc[seq];
  const int q_len = a.query_start_loc[seq + 1] - q_start;
  const int seq_len = a.seq_lens[seq];
  const int group = a.num_heads / a.num_kv_heads;
  const int num_rows = q_len * group;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;

  const int row = first_row + warp;
  const bool row_valid = row < num_rows;
  int token = 0, head = 0, pos = -1;
  if (row_valid) {
    const int i = row / group;
    token = q_start + i;
    head = kv_head * group + row % group;
    pos = seq_len - q_len + i;
  }
  // Rows are ordered by token, so the block's last row sees the most context and its first
  // row's window starts first.
  const int last_row = min(first_row + kWarps, num_rows) - 1;
  const int first_visible = row_valid ? first_visible_position(a.sliding_window, pos) : 0;
  int kv_begin = first_visible_position(a.sliding_window, seq_len - q_len + first_row / group);
  int kv_end = seq_len - q_len + last_row / group + 1;
  if (a.partition_size > 0) {
    kv_begin = max(kv_begin, part * a.partition_size);
    kv_end = min(kv_end, part * a.partition_size + a.partition_size);
  }

  if (row_valid) {
    const float* q = a.query + (static_cast<int64_t>(token) * a.num_heads + head) * head_dim;
    for (int d = lane; d < head_dim; d += 32) q_s[warp * head_dim + d] = q[d] * a.scale;
  }

  const CacheT* key_cache = static_cast<const CacheT*>(a.key_cache);
  const CacheT* value_cache = static_cast<const CacheT*>(a.value_cache);
  const int32_t* table = a.block_tables + static_cast<int64_t>(seq) * a.max_blocks_per_seq;
  const bool vector_loads = head_dim % kVec == 0;
  const int chunks_per_token = vector_loads ? head_dim / kVec : head_dim;
  const int elems_per_chunk = vector_loads ? kVec : 1;

  float running_max = -INFINITY;
  float running_sum = 0.0f;
  float acc[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) acc[i] = 0.0f;

  for (int t0 = kv_begin; t0 < kv_end; t0 += kTile) {
    const int n = min(kTile, kv_end - t0);
    __syncthreads();  // the previous tile is consumed (and q_s is visible on the first pass)
    for (int c = threadIdx.x; c < n * chunks_per_token; c += kThreads) {
      const int j = c / chunks_per_token;
      const int d0 = (c - j * chunks_per_token) * elems_per_chunk;
      const int t = t0 + j;
      const int64_t block = table[t / a.block_size];
      const int64_t base =
          ((block * a.num_kv_heads + kv_head) * a.block_size + t % a.block_size) * head_dim + d0;
      if (vector_loads) {
        alignas(16) CacheT k_raw[kVec];
        alignas(16) CacheT v_raw[kVec];
        *reinterpret_cast<uint4*>(k_raw) = *reinterpret_cast<const uint4*>(key_cache + base);
        *reinterpret_cast<uint4*>(v_raw) = *reinterpret_cast<const uint4*>(value_cache + base);
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          k_s[j * k_stride + d0 + e] = to_float(k_raw[e]) * a.k_scale;
          v_s[j * head_dim + d0 + e] = to_float(v_raw[e]) * a.v_scale;
        }
      } else {
        k_s[j * k_stride + d0] = to_float(key_cache[base]) * a.k_scale;
        v_s[j * head_dim + d0] = to_float(value_cache[base]) * a.v_scale;
      }
    }
    __syncthreads();
    // Warp-uniform condition: some key of the tile is visible to this row.
    if (row_valid && t0 <= pos && t0 + n > first_visible) {
      float score = -INFINITY;
      if (lane < n && t0 + lane <= pos && t0 + lane >= first_visible) {
        const float* q = q_s + warp * head_dim;
        const float* k = k_s + lane * k_stride;
        float dot = 0.0f;
        if constexpr (kHeadDim > 0) {
#pragma unroll 16
          for (int d = 0; d < kHeadDim; ++d) dot += q[d] * k[d];
        } else {
          for (int d = 0; d < head_dim; ++d) dot += q[d] * k[d];
        }
        score = soft_cap_score(dot, a.logit_softcap);
      }
      // Finite: some key of the tile is visible.
      const float new_max = fmaxf(running_max, warp_max(score));
      const float p = expf(score - new_max);                 // 0 for masked keys
      const float correction = expf(running_max - new_max);  // 0 on the first tile
      running_sum = running_sum * correction + warp_sum(p);
#pragma unroll
      for (int i = 0; i < kPer; ++i) acc[i] *= correction;
      for (int j = 0; j < n; ++j) {
        const float pj = __shfl_sync(kFullMask, p, j);
#pragma unroll
        for (int i = 0; i < kPer; ++i) {
          const int d = lane + 32 * i;
          if (kHeadDim > 0 || d < head_dim) acc[i] += pj * v_s[j * head_dim + d];
        }
      }
      running_max = new_max;
    }
  }

  if (!row_valid) return;
  const int64_t out_row = static_cast<int64_t>(token) * a.num_heads + head;
  if (a.partition_size == 0) {
    const float inv = running_sum > 0.0f ? 1.0f / running_sum : 0.0f;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int d = lane + 32 * i;
      if (kHeadDim > 0 || d < head_dim) a.out[out_row * head_dim + d] = acc[i] * inv;
    }
  } else {
    const int64_t slot = out_row * a.num_partitions + part;
    if (lane == 0) {
      a.partial_max[slot] = running_max;
      a.partial_sum[slot] = running_sum;
    }
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int d = lane + 32 * i;
      if (kHeadDim > 0 || d < head_dim) a.partial_out[slot * head_dim + d] = acc[i];
    }
  }
}

// Merges the partitions of one (token, head) row: rescales each partition's sum and
// unnormalised output by exp(its max - the overall max). The partition holding the row's own
// position always has a key, so the overall max is finite; empty partitions (those past the
// row, or before its sliding window: max -inf, sum 0) contribute nothing.
__global__ void attention_reduce_kernel(const float* partial_out, const float* partial_max,
                                        const float* partial_sum, float* out, int num_partitions,
                                        int head_dim) {
  const int64_t row = blockIdx.x;
  const float* maxes = partial_max + row * num_partitions;
  const float* sums = partial_sum + row * num_partitions;
  float overall_max = -INFINITY;
  for (int p = 0; p < num_partitions; ++p) overall_max = fmaxf(overall_max, maxes[p]);
  float total = 0.0f;
  for (int p = 0; p < num_partitions; ++p) {
    if (sums[p] > 0.0f) total += sums[p] * expf(maxes[p] - overall_max);
  }
  const float inv = total > 0.0f ? 1.0f / total : 0.0f;
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float o = 0.0f;
    for (int p = 0; p < num_partitions; ++p) {
      if (sums[p] > 0.0f) {
        o += partial_out[(row * num_partitions + p) * head_dim + d] * expf(maxes[p] - overall_max);
      }
    }
    out[row * head_dim + d] = o * inv;
  }
}

template <typename CacheT>
__global__ void write_kv_kernel(const float* key, const float* value, const int64_t* slot_mapping,
                                void* key_cache, void* value_cache, int num_kv_heads, int head_dim,
                                int block_size, float inv_k_scale, float inv_v_scale) {
  const int token = blockIdx.x;
  const int kv_head = blockIdx.y;
  const int64_t slot = slot_mapping[token];
  if (slot < 0) return;
  const int64_t block = slot / block_size;
  const int64_t offset = slot % block_size;
  const int64_t dst = ((block * num_kv_heads + kv_head) * block_size + offset) * head_dim;
  const int64_t src = (static_cast<int64_t>(token) * num_kv_heads + kv_head) * head_dim;
  CacheT* k = static_cast<CacheT*>(key_cache);
  CacheT* v = static_cast<CacheT*>(value_cache);
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    k[dst + d] = from_float<CacheT>(key[src + d] * inv_k_scale);
    v[dst + d] = from_float<CacheT>(value[src + d] * inv_v_scale);
  }
}

template <typename Word>
__global__ void copy_blocks_kernel(void* const* buffers, const int32_t* pairs,
                                   size_t words_per_block) {
  Word* buffer = static_cast<Word*>(buffers[blockIdx.y]);
  const int64_t src = static_cast<int64_t>(pairs[2 * blockIdx.x]) * words_per_block;
  const int64_t dst = static_cast<int64_t>(pairs[2 * blockIdx.x + 1]) * words_per_block;
  for (size_t i = threadIdx.x; i < words_per_block; i += blockDim.x) {
    buffer[dst + i] = buffer[src + i];
  }
}

template <typename CacheT, int kHeadDim>
cudaError_t launch_attention(const AttentionArgs& args, dim3 grid, int head_dim,
                             cudaStream_t stream) {
  const size_t smem =
      sizeof(float) * (kWarps * head_dim + kTile * (head_dim + 1) + kTile * head_dim);
  if constexpr (kHeadDim == 256) {
    // 72 KiB: over the default 48 KiB of dynamic shared memory (allowed once per kernel).
    static const cudaError_t allowed = cudaFuncSetAttribute(
        attention_kernel<CacheT, kHeadDim>, cudaFuncAttributeMaxDynamicSharedMemorySize,
        static_cast<int>(sizeof(float) * (kWarps * 256 + kTile * 257 + kTile * 256)));
    if (allowed != cudaSuccess) return allowed;
  }
  attention_kernel<CacheT, kHeadDim><<<grid, kThreads, smem, stream>>>(args);
  return cudaGetLastError();
}

template <typename CacheT>
cudaError_t dispatch_head_dim(const AttentionArgs& args, dim3 grid, int head_dim,
                              cudaStream_t stream) {
  switch (head_dim) {
    case 64:
      return launch_attention<CacheT, 64>(args, grid, head_dim, stream);
    case 128:
      return launch_attention<CacheT, 128>(args, grid, head_dim, stream);
    case 256:
      return launch_attention<CacheT, 256>(args, grid, head_dim, stream);
    default:
      return launch_attention<CacheT, 0>(args, grid, head_dim, stream);
  }
}

}  // namespace

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 4;
    case DType::kFloat16:
    case DType::kBFloat16:
      return 2;
    case DType::kFp8E4M3:
      return 1;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat16:
      return "float16";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kFp8E4M3:
      return "fp8_e4m3";
  }
  return "?";
}

std::vector<int32_t> attention_work_items(const int32_t* query_start_loc, int num_seqs, int group) {
  std::vector<int32_t> items;
  for (int s = 0; s < num_seqs; ++s) {
    const int rows = (query_start_loc[s + 1] - query_start_loc[s]) * group;
    for (int r = 0; r < rows; r += kAttentionRowsPerBlock) {
      items.push_back(s);
      items.push_back(r);
    }
  }
  return items;
}

int attention_num_partitions(int max_seq_len, int partition_size) {
  if (partition_size <= 0) return 1;
  return std::max(1, (max_seq_len + partition_size - 1) / partition_size);
}

cudaError_t paged_attention(const AttentionParams& p, cudaStream_t stream) {
  const KvCacheLayout& c = p.cache;
  if (p.num_work_items == 0) return cudaSuccess;
  if (c.head_dim < 1 ||
      (c.head_dim != 64 && c.head_dim != 128 && c.head_dim != 256 &&
       c.head_dim > kMaxGenericHeadDim) ||
      c.num_kv_heads < 1 || p.num_heads % c.num_kv_heads != 0 || c.block_size < 1 ||
      p.sliding_window < 0 || !(p.logit_softcap >= 0.0f)) {
    return cudaErrorInvalidValue;
  }
  if (p.partition_size > 0 &&
      (p.partial_out == nullptr || p.partial_max == nullptr || p.partial_sum == nullptr)) {
    return cudaErrorInvalidValue;
  }
  const bool fp8 = c.dtype == DType::kFp8E4M3;
  AttentionArgs args{p.query,
                     p.out,
                     c.key,
                     c.value,
                     fp8 ? c.k_scale : 1.0f,
                     fp8 ? c.v_scale : 1.0f,
                     c.block_size,
                     (c.block_size & (c.block_size - 1)) == 0 ? __builtin_ctz(c.block_size) : -1,
                     c.num_kv_heads,
                     c.head_dim,
                     p.query_start_loc,
                     p.seq_lens,
                     p.block_tables,
                     p.work_items,
                     p.max_blocks_per_seq,
                     p.num_heads,
                     p.scale,
                     p.sliding_window,
                     p.logit_softcap,
                     p.partition_size,
                     attention_num_partitions(p.max_seq_len, p.partition_size),
                     p.partial_out,
                     p.partial_max,
                     p.partial_sum};
  const dim3 grid(p.num_work_items, c.num_kv_heads, args.num_partitions);
  // A decode-only batch (as many query tokens as sequences) takes the decode kernel, for the
  // head dims it is built for.
  const bool decode = p.use_decode_kernel && p.num_seqs > 0 && p.num_tokens == p.num_seqs &&
                      p.num_heads / c.num_kv_heads <= kMaxDecodeGroup &&
                      decode_attention_supports(c.dtype, c.head_dim);
  cudaError_t status = cudaSuccess;
  if (decode) {
    const dim3 decode_grid(p.num_seqs, c.num_kv_heads, args.num_partitions);
    status = decode_attention(args, decode_grid, c.dtype, c.head_dim, stream);
  } else {
    switch (c.dtype) {
      case DType::kFloat32:
        status = dispatch_head_dim<float>(args, grid, c.head_dim, stream);
        break;
      case DType::kFloat16:
        status = dispatch_head_dim<__half>(args, grid, c.head_dim, stream);
        break;
      case DType::kBFloat16:
        status = dispatch_head_dim<__nv_bfloat16>(args, grid, c.head_dim, stream);
        break;
      case DType::kFp8E4M3:
        status = dispatch_head_dim<__nv_fp8_e4m3>(args, grid, c.head_dim, stream);
        break;
    }
  }
  if (status != cudaSuccess || p.partition_size == 0) return status;
  const int rows = p.num_tokens * p.num_heads;
  attention_reduce_kernel<<<rows, std::min(128, ((c.head_dim + 31) / 32) * 32), 0, stream>>>(
      p.partial_out, p.partial_max, p.partial_sum, p.out, args.num_partitions, c.head_dim);
  return cudaGetLastError();
}

cudaError_t write_kv(const float* key, const float* value, const int64_t* slot_mapping,
                     int num_tokens, const KvCacheLayout& c, cudaStream_t stream) {
  if (num_tokens == 0) return cudaSuccess;
  const dim3 grid(num_tokens, c.num_kv_heads);
  const int threads = std::min(128, ((c.head_dim + 31) / 32) * 32);
  const float inv_k = c.dtype == DType::kFp8E4M3 ? 1.0f / c.k_scale : 1.0f;
  const float inv_v = c.dtype == DType::kFp8E4M3 ? 1.0f / c.v_scale : 1.0f;
  switch (c.dtype) {
    case DType::kFloat32:
      write_kv_kernel<float><<<grid, threads, 0, stream>>>(key, value, slot_mapping, c.key, c.value,
                                                           c.num_kv_heads, c.head_dim, c.block_size,
                                                           inv_k, inv_v);
      break;
    case DType::kFloat16:
      write_kv_kernel<__half><<<grid, threads, 0, stream>>>(key, value, slot_mapping, c.key,
                                                            c.value, c.num_kv_heads, c.head_dim,
                                                            c.block_size, inv_k, inv_v);
      break;
    case DType::kBFloat16:
      write_kv_kernel<__nv_bfloat16>
          <<<grid, threads, 0, stream>>>(key, value, slot_mapping, c.key, c.value, c.num_kv_heads,
                                         c.head_dim, c.block_size, inv_k, inv_v);
      break;
    case DType::kFp8E4M3:
      write_kv_kernel<__nv_fp8_e4m3>
          <<<grid, threads, 0, stream>>>(key, value, slot_mapping, c.key, c.value, c.num_kv_heads,
                                         c.head_dim, c.block_size, inv_k, inv_v);
      break;
  }
  return cudaGetLastError();
}

cudaError_t copy_blocks(void* const* buffers, int num_buffers, const int32_t* pairs, int num_pairs,
                        size_t bytes_per_block, cudaStream_t stream) {
  if (num_pairs == 0 || num_buffers == 0) return cudaSuccess;
  const dim3 grid(num_pairs, num_buffers);
  if (bytes_per_block % sizeof(uint4) == 0) {
    copy_blocks_kernel<uint4>
        <<<grid, 256, 0, stream>>>(buffers, pairs, bytes_per_block / sizeof(uint4));
  } else {
    copy_blocks_kernel<unsigned char><<<grid, 256, 0, stream>>>(buffers, pairs, bytes_per_block);
  }
  return cudaGetLastError();
}

}  // namespace pagedserve::kernels::cuda
