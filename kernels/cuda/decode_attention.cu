// The decode kernel: paged attention for decode-only batches (one query token per sequence).
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/dtype_convert.cuh"

namespace pagedserve::kernels::cuda::attention_detail {
namespace {

// Decode-only batches (one query token per sequence), for head_dim 64 and 128: one block of
// kDecodeThreads per (sequence, KV head, partition) serving every head of the GQA group, so
// each K/V byte is read once. The context is walked in tiles of kDecodeTileBytes of keys (and
// as many of values), copied into shared memory by cp.async in two stages: the copy of tile
// i + 1 is in flight while tile i is computed, so the memory system never waits for the
// arithmetic. In a tile, a row of K or V is read by kThreadsPerRow neighbouring threads (16
// bytes each, 8 for fp8) and each thread owns every kRowsPerPass-th row:
//   scores: each thread dots its K pieces with the group's q pieces (kept in registers), and a
//     reduction over the row's threads finishes each score, into shared memory;
//   softmax: one warp per head takes the tile's max, rescales the running sum and writes
//     p = exp(score - max) back (one exp per score);
//   values: each thread adds p * v for its rows to its accumulators (group x its dims),
//     rescaled once per tile.
// At the end the accumulators of the threads sharing dims are summed in shared memory.
constexpr int kDecodeThreads = 128;
constexpr int kDecodeWarps = kDecodeThreads / 32;
// 8 KiB of keys per tile (and as many of values): 32 KiB of shared memory per block for the
// two stages (under the default 48 KiB limit), so shared memory leaves room for 4+ blocks
// (16 warps) per SM.
constexpr int kDecodeTileBytes = 8192;
constexpr size_t kDecodeSmemBytes = 2 * 2 * kDecodeTileBytes;  // 2 stages x (K, V)

__device__ __forceinline__ void cp_async_16(void* smem, const void* global, bool valid) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  // A zero source size fills the 16 bytes with zeros and reads nothing.
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(address), "l"(global),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// Sums each of kGroup partial dot products over the kLanes neighbouring lanes of a row with
// fewer shuffles than kGroup separate reductions: at each step a lane sends half of its values
// to its partner (lane ^ offset) and keeps the other half, adding what it receives, until one
// head is left per lane; the rest is an ordinary reduction. Returns the lane's head's sum and
// sets `head`; lanes whose bits under kScatterLowMask are zero hold distinct heads.
template <int kGroup, int kLanes>
constexpr int kScatterSteps = (kGroup < kLanes ? kGroup : kLanes) <= 1
                                  ? 0
                                  : (kGroup >= 8 && kLanes >= 8   ? 3
                                     : kGroup >= 4 && kLanes >= 4 ? 2
                                                                  : 1);
template <int kGroup, int kLanes>
constexpr int kScatterLowMask = (kLanes >> kScatterSteps<kGroup, kLanes>)-1;

template <int kGroup, int kLanes>
__device__ __forceinline__ float reduce_scatter_heads(float (&v)[kGroup], int piece, int& head) {
  static_assert((kGroup & (kGroup - 1)) == 0 && (kLanes & (kLanes - 1)) == 0, "powers of two");
  static_assert(kGroup <= kLanes, "one head per lane at the end");
  head = 0;
#pragma unroll
  for (int step = 0; step < kScatterSteps<kGroup, kLanes>; ++step) {
    const int offset = kLanes >> (step + 1);
    const int half = kGroup >> (step + 1);
    const bool upper = (piece & offset) != 0;
#pragma unroll
    for (int i = 0; i < half; ++i) {
      const float send = upper ? v[i] : v[i + half];
      const float keep = upper ? v[i + half] : v[i];
      v[i] = keep + __shfl_xor_sync(kFullMask, send, offset);
    }
    if (upper) head += half;
  }
  float sum = v[0];
#pragma unroll
  for (int offset = kLanes >> (kScatterSteps<kGroup, kLanes> + 1); offset > 0; offset /= 2) {
    sum += __shfl_xor_sync(kFullMask, sum, offset);
  }
  return sum;
}

// The floats of one read of the cache, two elements per conversion for the 8- and 16-bit types.
template <typename CacheT, typename Raw, int kVec>
__device__ __forceinline__ void unpack(const Raw& raw, float (&out)[kVec]) {
  if constexpr (std::is_same_v<CacheT, __nv_fp8_e4m3>) {
    const __nv_fp8x2_storage_t* pairs = reinterpret_cast<const __nv_fp8x2_storage_t*>(&raw);
#pragma unroll
    for (int i = 0; i < kVec / 2; ++i) {
      const __half2 h = __half2(__nv_cvt_fp8x2_to_halfraw2(pairs[i], __NV_E4M3));
      const float2 f = __half22float2(h);
      out[2 * i] = f.x;
      out[2 * i + 1] = f.y;
    }
  } else if constexpr (std::is_same_v<CacheT, __half>) {
    const __half2* pairs = reinterpret_cast<const __half2*>(&raw);
#pragma unroll
    for (int i = 0; i < kVec / 2; ++i) {
      const float2 f = __half22float2(pairs[i]);
      out[2 * i] = f.x;
      out[2 * i + 1] = f.y;
    }
  } else if constexpr (std::is_same_v<CacheT, __nv_bfloat16>) {
    const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
    for (int i = 0; i < kVec / 2; ++i) {
      const float2 f = __bfloat1622float2(pairs[i]);
      out[2 * i] = f.x;
      out[2 * i + 1] = f.y;
    }
  } else {
    const CacheT* e = reinterpret_cast<const CacheT*>(&raw);
#pragma unroll
    for (int i = 0; i < kVec; ++i) out[i] = to_float(e[i]);
  }
}

template <typename CacheT, int kHeadDim, int kGroup>
__global__ void __launch_bounds__(kDecodeThreads, kGroup >= 8 ? 3 : 5)
    decode_attention_kernel(AttentionArgs a) {
  constexpr int kRowBytes = kHeadDim * static_cast<int>(sizeof(CacheT));
  constexpr int kTileTokens = kDecodeTileBytes / kRowBytes;
  constexpr int kChunksPerRow = kRowBytes / 16;  // cp.async copies 16 bytes
  constexpr int kChunksPerThread = kTileTokens * kChunksPerRow / kDecodeThreads;
  // fp8 is read 8 bytes at a time: 16 of its elements per thread would need more registers
  // than there are (q and the accumulators are group x kVec each).
  constexpr int kLoadBytes = sizeof(CacheT) == 1 ? 8 : 16;
  using Raw = std::conditional_t<kLoadBytes == 16, uint4, uint2>;
  constexpr int kVec = kLoadBytes / sizeof(CacheT);  // elements per read
  constexpr int kThreadsPerRow = kHeadDim / kVec;    // threads reading one row
  static_assert(kThreadsPerRow <= 32 && 32 % kThreadsPerRow == 0, "a row within one warp");
  constexpr int kRowsPerPass = kDecodeThreads / kThreadsPerRow;
  constexpr int kRowsPerThread = kTileTokens / kRowsPerPass;
  static_assert(kChunksPerThread * kDecodeThreads == kTileTokens * kChunksPerRow, "whole tiles");

  extern __shared__ uint4 decode_smem[];      // [stage][K, V][kTileTokens * kHeadDim] of CacheT
  __shared__ float s_p[kGroup][kTileTokens];  // scores, then probabilities
  __shared__ float s_acc[kGroup][kHeadDim];
  __shared__ float s_max[kGroup], s_sum[kGroup], s_correction[kGroup];
  auto tile_of = [&](int stage, int kv) {
    return reinterpret_cast<CacheT*>(reinterpret_cast<char*>(decode_smem) +
                                     (2 * stage + kv) * kDecodeTileBytes);
  };

  const int seq = blockIdx.x;
  const int kv_head = blockIdx.y;
  const int part = blockIdx.z;
  const int token = a.query_start_loc[seq];
  const int seq_len = a.seq_lens[seq];
  const int group = a.num_heads / a.num_kv_heads;  // <= kGroup
  const int row = threadIdx.x / kThreadsPerRow;    // row within a pass
  const int piece = threadIdx.x % kThreadsPerRow;  // which read of the row
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;

  int kv_begin = first_visible_position(a.sliding_window, seq_len - 1);
  int kv_end = seq_len;
  if (a.partition_size > 0) {
    kv_begin = max(kv_begin, part * a.partition_size);
    kv_end = min(kv_end, part * a.partition_size + a.partition_size);
  }

  const char* key_cache = static_cast<const char*>(a.key_cache);
  const char* value_cache = static_cast<const char*>(a.value_cache);
  const int32_t* table = a.block_tables + static_cast<int64_t>(seq) * a.max_blocks_per_seq;
  // Issues the copies of the tile starting at `tile` into `stage` (zeros past kv_end).
  auto load_tile = [&](int tile, int stage) {
    CacheT* k_dst = tile_of(stage, 0);
    CacheT* v_dst = tile_of(stage, 1);
#pragma unroll
    for (int c = 0; c < kChunksPerThread; ++c) {
      const int idx = threadIdx.x + c * kDecodeThreads;
      const int t_local = idx / kChunksPerRow;
      const int chunk = idx % kChunksPerRow;
      const int t = tile + t_local;
      const bool valid = t < kv_end;
      int64_t offset = 0;  // bytes into the layer's key (or value) pool
      if (valid) {
        // Block sizes are powers of two in practice: a shift, not a division, per chunk.
        const int block_index = a.block_shift >= 0 ? t >> a.block_shift : t / a.block_size;
        const int in_block = t - block_index * a.block_size;
        const int64_t block = table[block_index];
        offset =
            ((block * a.num_kv_heads + kv_head) * a.block_size + in_block) * kRowBytes + chunk * 16;
      }
      const int dst = t_local * kHeadDim + chunk * (16 / static_cast<int>(sizeof(CacheT)));
      cp_async_16(k_dst + dst, key_cache + offset, valid);
      cp_async_16(v_dst + dst, value_cache + offset, valid);
    }
    cp_async_commit();
  };
  if (kv_begin < kv_end) load_tile(kv_begin, 0);

  float q[kGroup][kVec];
  float acc[kGroup][kVec];
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
    const int64_t q_row = static_cast<int64_t>(token) * a.num_heads + kv_head * group + g;
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      // The fp8 key scale is folded into q (q . (s k) = (s q) . k) and the value scale into
      // the output, so the tiles are used as stored.
      q[g][i] =
          g < group ? a.query[q_row * kHeadDim + piece * kVec + i] * a.scale * a.k_scale : 0.0f;
      acc[g][i] = 0.0f;
    }
  }
  for (int i = threadIdx.x; i < kGroup * kHeadDim; i += kDecodeThreads) {
    s_acc[i / kHeadDim][i % kHeadDim] = 0.0f;
  }
  if (threadIdx.x < kGroup) {
    s_max[threadIdx.x] = -INFINITY;
    s_sum[threadIdx.x] = 0.0f;
  }

  int stage = 0;
  for (int tile = kv_begin; tile < kv_end; tile += kTileTokens, stage ^= 1) {
    if (tile + kTileTokens < kv_end) {
      load_tile(tile + kTileTokens, stage ^ 1);
      cp_async_wait<1>();  // this tile's copies are done, the next one's may still run
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const CacheT* k_tile = tile_of(stage, 0);
    const CacheT* v_tile = tile_of(stage, 1);
    // Scores.
#pragma unroll 4
    for (int j = 0; j < kRowsPerThread; ++j) {
      const int t_local = row + j * kRowsPerPass;
      float k[kVec];
      unpack<CacheT, Raw, kVec>(
          *reinterpret_cast<const Raw*>(k_tile + t_local * kHeadDim + piece * kVec), k);
      float dot[kGroup];
#pragma unroll
      for (int g = 0; g < kGroup; ++g) {
        dot[g] = 0.0f;
#pragma unroll
        for (int i = 0; i < kVec; ++i) dot[g] += q[g][i] * k[i];
      }
      int head = 0;
      const float score = reduce_scatter_heads<kGroup, kThreadsPerRow>(dot, piece, head);
      if ((piece & kScatterLowMask<kGroup, kThreadsPerRow>) == 0) {
        s_p[head][t_local] =
            tile + t_local < kv_end ? soft_cap_score(score, a.logit_softcap) : -INFINITY;
      }
    }
    __syncthreads();
    // Softmax of the tile, one warp per head.
    for (int g = warp; g < kGroup; g += kDecodeWarps) {
      float tile_max = -INFINITY;
      for (int t = lane; t < kTileTokens; t += 32) tile_max = fmaxf(tile_max, s_p[g][t]);
      tile_max = warp_max(tile_max);
      const float old_max = s_max[g];
      const float new_max = fmaxf(old_max, tile_max);  // finite: the tile's first token is real
      float tile_sum = 0.0f;
      for (int t = lane; t < kTileTokens; t += 32) {
        const float p = expf(s_p[g][t] - new_max);
        s_p[g][t] = p;
        tile_sum += p;
      }
      tile_sum = warp_sum(tile_sum);
      if (lane == 0) {
        const float correction = expf(old_max - new_max);  // 0 on the first tile
        s_correction[g] = correction;
        s_sum[g] = s_sum[g] * correction + tile_sum;
        s_max[g] = new_max;
      }
    }
    __syncthreads();
    // Values.
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      const float correction = s_correction[g];
#pragma unroll
      for (int i = 0; i < kVec; ++i) acc[g][i] *= correction;
    }
#pragma unroll 4
    for (int j = 0; j < kRowsPerThread; ++j) {
      const int t_local = row + j * kRowsPerPass;
      float v[kVec];
      unpack<CacheT, Raw, kVec>(
          *reinterpret_cast<const Raw*>(v_tile + t_local * kHeadDim + piece * kVec), v);
#pragma unroll
      for (int g = 0; g < kGroup; ++g) {
        const float p = s_p[g][t_local];
#pragma unroll
        for (int i = 0; i < kVec; ++i) acc[g][i] += p * v[i];
      }
    }
    __syncthreads();  // the stage and s_p are rewritten next
  }

  // Sum the rows' accumulators per dim, then normalise (or write this partition's partials).
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
    if (g >= group) break;
#pragma unroll
    for (int i = 0; i < kVec; ++i) atomicAdd(&s_acc[g][piece * kVec + i], acc[g][i]);
  }
  __syncthreads();
  const int num_partitions = a.num_partitions;
  for (int idx = threadIdx.x; idx < group * kHeadDim; idx += kDecodeThreads) {
    const int g = idx / kHeadDim;
    const int d = idx - g * kHeadDim;
    const float total = s_sum[g];
    const float o = s_acc[g][d] * a.v_scale;
    const int64_t out_row = static_cast<int64_t>(token) * a.num_heads + kv_head * group + g;
    if (a.partition_size == 0) {
      a.out[out_row * kHeadDim + d] = total > 0.0f ? o / total : 0.0f;
    } else {
      const int64_t slot = out_row * num_partitions + part;
      a.partial_out[slot * kHeadDim + d] = o;
      if (d == 0) {
        a.partial_max[slot] = s_max[g];
        a.partial_sum[slot] = total;
      }
    }
  }
}

// The kernel for a group size rounded up to a power of two (the extra heads are masked).
template <typename CacheT, int kHeadDim>
cudaError_t launch(const AttentionArgs& args, dim3 grid, int group, cudaStream_t stream) {
  if (group <= 1) {
    decode_attention_kernel<CacheT, kHeadDim, 1>
        <<<grid, kDecodeThreads, kDecodeSmemBytes, stream>>>(args);
  } else if (group <= 2) {
    decode_attention_kernel<CacheT, kHeadDim, 2>
        <<<grid, kDecodeThreads, kDecodeSmemBytes, stream>>>(args);
  } else if (group <= 4) {
    decode_attention_kernel<CacheT, kHeadDim, 4>
        <<<grid, kDecodeThreads, kDecodeSmemBytes, stream>>>(args);
  } else {
    decode_attention_kernel<CacheT, kHeadDim, 8>
        <<<grid, kDecodeThreads, kDecodeSmemBytes, stream>>>(args);
  }
  return cudaGetLastError();
}

template <typename CacheT>
cudaError_t launch_head_dim(const AttentionArgs& args, dim3 grid, int head_dim, int group,
                            cudaStream_t stream) {
  if (head_dim == 64) return launch<CacheT, 64>(args, grid, group, stream);
  if (head_dim == 128) return launch<CacheT, 128>(args, grid, group, stream);
  if constexpr (sizeof(CacheT) < 4) {
    if (head_dim == 256) return launch<CacheT, 256>(args, grid, group, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t decode_attention(const AttentionArgs& args, dim3 grid, DType dtype, int head_dim,
                             cudaStream_t stream) {
  const int group = args.num_heads / args.num_kv_heads;
  if (group < 1 || group > kMaxDecodeGroup) return cudaErrorInvalidValue;
  switch (dtype) {
    case DType::kFloat32:
      return launch_head_dim<float>(args, grid, head_dim, group, stream);
    case DType::kFloat16:
      return launch_head_dim<__half>(args, grid, head_dim, group, stream);
    case DType::kBFloat16:
      return launch_head_dim<__nv_bfloat16>(args, grid, head_dim, group, stream);
    case DType::kFp8E4M3:
      return launch_head_dim<__nv_fp8_e4m3>(args, grid, head_dim, group, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace pagedserve::kernels::cuda::attention_detail
