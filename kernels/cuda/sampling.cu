// Sampling on the device with the CPU sampler's semantics (model/sampler.cpp): greedy as an
// argmax reduction; otherwise the row divided by the temperature is sorted (CUB segmented
// radix sort, stable, so ties keep ascending ids), then one block per draw applies top-k,
// top-p and min-p to the sorted candidates with block-wide reductions and scans in double and
// draws by inverse CDF with the same counter-based uniform as the CPU.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cub/cub.cuh>
#include <cuda/functional>

#include "kernels/cuda/cuda_kernels.h"

namespace pagedserve::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kItems = 4;  // items per thread in one scan chunk
constexpr int kChunk = kThreads * kItems;

__device__ uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// model::uniform_from_counter, bit for bit.
__device__ double uniform_from_counter(uint64_t seed, uint64_t step) {
  const uint64_t bits = splitmix64(seed ^ splitmix64(step + 0x632be59bd9b4e019ULL));
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

struct ArgMax {
  float value;
  int32_t id;
};

struct ArgMaxOp {
  __device__ ArgMax operator()(const ArgMax& a, const ArgMax& b) const {
    if (a.value > b.value) return a;
    if (b.value > a.value) return b;
    return a.id <= b.id ? a : b;
  }
};

__global__ void argmax_kernel(const float* logits, int vocab, int32_t* out) {
  using Reduce = cub::BlockReduce<ArgMax, kThreads>;
  __shared__ typename Reduce::TempStorage temp;
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  ArgMax best{-INFINITY, vocab};
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    if (row[i] > best.value || best.id == vocab) best = {row[i], i};
  }
  const ArgMax result = Reduce(temp).Reduce(best, ArgMaxOp{});
  if (threadIdx.x == 0) out[blockIdx.x] = result.id < vocab ? result.id : 0;
}

__global__ void log_sum_exp_kernel(const float* logits, int vocab, double* lse) {
  using FloatReduce = cub::BlockReduce<float, kThreads>;
  using DoubleReduce = cub::BlockReduce<double, kThreads>;
  __shared__ typename FloatReduce::TempStorage float_temp;
  __shared__ typename DoubleReduce::TempStorage double_temp;
  __shared__ float row_max;
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  float local_max = -INFINITY;
  for (int i = threadIdx.x; i < vocab; i += kThreads) local_max = fmaxf(local_max, row[i]);
  const float m = FloatReduce(float_temp).Reduce(local_max, ::cuda::maximum<>{});
  if (threadIdx.x == 0) row_max = m;
  __syncthreads();
  const double max_logit = row_max;
  double local_sum = 0.0;
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    local_sum += exp(static_cast<double>(row[i]) - max_logit);
  }
  const double total = DoubleReduce(double_temp).Sum(local_sum);
  if (threadIdx.x == 0) lse[blockIdx.x] = max_logit + log(total);
}

__global__ void adjust_logits_kernel(float* logits, int vocab, const LogitAdjustment* adjustments,
                                     int count) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const LogitAdjustment a = adjustments[i];
  float& l = logits[static_cast<int64_t>(a.row) * vocab + a.token];
  if (a.repeated) l = l > 0 ? l / a.repetition_penalty : l * a.repetition_penalty;
  if (a.count > 0) l -= a.frequency_penalty * static_cast<float>(a.count) + a.presence_penalty;
  if (a.banned) l = -INFINITY;
}

// One grid row (blockIdx.y) per masked row, one thread per logit: a grammar's bitmask is
// tiny next to the row, so each thread reads its word (cached) and clears its own logit.
__global__ void apply_token_bitmask_kernel(float* logits, int vocab, const int32_t* rows,
                                           const uint32_t* bitmasks, int words_per_row,
                                           const int32_t* allowed_ids) {
  const int m = blockIdx.y;
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= vocab) return;
  const uint32_t* mask = bitmasks + static_cast<int64_t>(m) * words_per_row;
  const bool allowed = i < allowed_ids[m] && ((__ldg(mask + i / 32) >> (i % 32)) & 1u) != 0;
  if (!allowed) logits[static_cast<int64_t>(rows[m]) * vocab + i] = -INFINITY;
}

__global__ void fill_sort_input_kernel(const float* logits, int vocab, const int32_t* seg_rows,
                                       const float* seg_temperatures, int num_segments, float* keys,
                                       int32_t* ids, int32_t* offsets) {
  const int s = blockIdx.x;
  const float* row = logits + static_cast<int64_t>(seg_rows[s]) * vocab;
  const float temperature = seg_temperatures[s];
  float* k = keys + static_cast<int64_t>(s) * vocab;
  int32_t* v = ids + static_cast<int64_t>(s) * vocab;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
    k[i] = row[i] / temperature;  // a division, as the CPU sampler (not a multiply by 1/T)
    v[i] = i;
  }
  if (threadIdx.x == 0) offsets[s] = s * vocab;
  if (threadIdx.x == 0 && s == 0) offsets[num_segments] = num_segments * vocab;
}

using Scan = cub::BlockScan<double, kThreads>;
using DoubleReduce = cub::BlockReduce<double, kThreads>;
using IntReduce = cub::BlockReduce<int, kThreads>;

struct SampleShared {
  union {
    typename Scan::TempStorage scan;
    typename DoubleReduce::TempStorage reduce;
    typename IntReduce::TempStorage int_reduce;
  } temp;
  double broadcast;
  int found;
};

// First index i in [0, n) whose inclusive prefix sum of weight(i) exceeds `target` (or reaches
// it, with `inclusive_ge`); n when none does. Chunks of kChunk with a running carry.
template <typename Weight>
__device__ int first_prefix_crossing(int n, double target, bool inclusive_ge, Weight weight,
                                     SampleShared& sh) {
  double carry = 0.0;
  for (int c0 = 0; c0 < n; c0 += kChunk) {
    double items[kItems];
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      const int i = c0 + threadIdx.x * kItems + j;
      items[j] = i < n ? weight(i) : 0.0;
    }
    double chunk_total;
    Scan(sh.temp.scan).InclusiveSum(items, items, chunk_total);
    int candidate = n;
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      const int i = c0 + threadIdx.x * kItems + j;
      const double cumulative = carry + items[j];
      const bool crossed = inclusive_ge ? cumulative >= target : cumulative > target;
      if (i < n && crossed && candidate == n) candidate = i;
    }
    __syncthreads();
    const int first = IntReduce(sh.temp.int_reduce).Reduce(candidate, ::cuda::minimum<>{});
    if (threadIdx.x == 0) sh.found = first;
    __syncthreads();
    if (sh.found < n) return sh.found;
    carry += chunk_total;
  }
  return n;
}

__device__ double block_sum_double(double x, SampleShared& sh) {
  __syncthreads();
  const double total = DoubleReduce(sh.temp.reduce).Sum(x);
  if (threadIdx.x == 0) sh.broadcast = total;
  __syncthreads();
  return sh.broadcast;
}

__global__ void sample_sorted_kernel(const float* sorted_keys, const int32_t* sorted_ids, int vocab,
                                     const SampleDraw* draws, const float* logits,
                                     const double* lse, int32_t* tokens, float* logprobs) {
  __shared__ SampleShared sh;
  const SampleDraw draw = draws[blockIdx.x];
  const float* keys = sorted_keys + static_cast<int64_t>(draw.segment) * vocab;
  const int32_t* ids = sorted_ids + static_cast<int64_t>(draw.segment) * vocab;
  const int keep = draw.top_k > 0 && draw.top_k < vocab ? draw.top_k : vocab;
  const double max_logit = keys[0];
  auto weight = [&](int i) { return exp(static_cast<double>(keys[i]) - max_logit); };

  double local = 0.0;
  for (int i = threadIdx.x; i < keep; i += kThreads) local += weight(i);
  const double total = block_sum_double(local, sh);
  auto prob = [&](int i) { return weight(i) / total; };

  // Top-p: the smallest prefix whose probability reaches top_p (at least one token).
  int n = keep;
  if (draw.top_p < 1.0f) {
    const int first = first_prefix_crossing(keep, draw.top_p, true, prob, sh);
    n = first < keep ? first + 1 : keep;
  }
  // Min-p: keep the (descending) prefix at least min_p times as likely as the first token.
  if (draw.min_p > 0.0f) {
    const double threshold = draw.min_p * prob(0);
    double count = 0.0;
    for (int i = threadIdx.x; i < n; i += kThreads) count += prob(i) >= threshold ? 1.0 : 0.0;
    n = max(static_cast<int>(block_sum_double(count, sh)), 1);
  }
  double local_mass = 0.0;
  for (int i = threadIdx.x; i < n; i += kThreads) local_mass += prob(i);
  const double mass = block_sum_double(local_mass, sh);
  const double target = uniform_from_counter(draw.seed, draw.step) * mass;
  int chosen = first_prefix_crossing(n, target, false, prob, sh);
  if (chosen >= n) chosen = n - 1;
  if (threadIdx.x == 0) {
    const int32_t token = ids[chosen];
    tokens[blockIdx.x] = token;
    logprobs[blockIdx.x] = static_cast<float>(
        static_cast<double>(logits[static_cast<int64_t>(draw.row) * vocab + token]) -
        lse[draw.row]);
  }
}

__global__ void token_logprobs_kernel(const float* logits, int vocab, const double* lse,
                                      const int32_t* rows, const int32_t* tokens, int n,
                                      float* logprobs) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int64_t row = rows[i];
  logprobs[i] = static_cast<float>(static_cast<double>(logits[row * vocab + tokens[i]]) - lse[row]);
}

}  // namespace

cudaError_t argmax_rows(const float* logits, int num_rows, int vocab, int32_t* out,
                        cudaStream_t stream) {
  if (num_rows == 0) return cudaSuccess;
  argmax_kernel<<<num_rows, kThreads, 0, stream>>>(logits, vocab, out);
  return cudaGetLastError();
}

cudaError_t log_sum_exp_rows(const float* logits, int num_rows, int vocab, double* lse,
                             cudaStream_t stream) {
  if (num_rows == 0) return cudaSuccess;
  log_sum_exp_kernel<<<num_rows, kThreads, 0, stream>>>(logits, vocab, lse);
  return cudaGetLastError();
}

cudaError_t adjust_logits(float* logits, int vocab, const LogitAdjustment* adjustments, int count,
                          cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  adjust_logits_kernel<<<(count + 255) / 256, 256, 0, stream>>>(logits, vocab, adjustments, count);
  return cudaGetLastError();
}

cudaError_t apply_token_bitmask(float* logits, int vocab, const int32_t* rows,
                                const uint32_t* bitmasks, int words_per_row,
                                const int32_t* allowed_ids, int num_masked, cudaStream_t stream) {
  if (num_masked == 0) return cudaSuccess;
  const dim3 grid((vocab + kThreads - 1) / kThreads, num_masked);
  apply_token_bitmask_kernel<<<grid, kThreads, 0, stream>>>(logits, vocab, rows, bitmasks,
                                                            words_per_row, allowed_ids);
  return cudaGetLastError();
}

size_t sort_temp_bytes(int num_segments, int vocab) {
  size_t bytes = 0;
  const int32_t* offsets = nullptr;
  cub::DeviceSegmentedRadixSort::SortPairsDescending(
      nullptr, bytes, static_cast<const float*>(nullptr), static_cast<float*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr),
      static_cast<int64_t>(num_segments) * vocab, num_segments, offsets, offsets + 1);
  return bytes;
}

cudaError_t sort_segments(const float* logits, int vocab, const int32_t* seg_rows,
                          const float* seg_temperatures, int num_segments, SortBuffers& b,
                          cudaStream_t stream) {
  if (num_segments == 0) return cudaSuccess;
  fill_sort_input_kernel<<<num_segments, 256, 0, stream>>>(
      logits, vocab, seg_rows, seg_temperatures, num_segments, b.keys_in, b.ids_in, b.offsets);
  if (cudaError_t status = cudaGetLastError(); status != cudaSuccess) return status;
  size_t temp_bytes = b.temp_bytes;
  return cub::DeviceSegmentedRadixSort::SortPairsDescending(
      b.temp, temp_bytes, b.keys_in, b.keys_out, b.ids_in, b.ids_out,
      static_cast<int64_t>(num_segments) * vocab, num_segments, b.offsets, b.offsets + 1, 0,
      static_cast<int>(sizeof(float) * 8), stream);
}

cudaError_t sample_sorted(const float* sorted_keys, const int32_t* sorted_ids, int vocab,
                          const SampleDraw* draws, int num_draws, const float* logits,
                          const double* lse, int32_t* tokens, float* logprobs,
                          cudaStream_t stream) {
  if (num_draws == 0) return cudaSuccess;
  sample_sorted_kernel<<<num_draws, kThreads, 0, stream>>>(sorted_keys, sorted_ids, vocab, draws,
                                                           logits, lse, tokens, logprobs);
  return cudaGetLastError();
}

cudaError_t token_logprobs(const float* logits, int vocab, const double* lse, const int32_t* rows,
                           const int32_t* tokens, int n, float* logprobs, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  token_logprobs_kernel<<<(n + 127) / 128, 128, 0, stream>>>(logits, vocab, lse, rows, tokens, n,
                                                             logprobs);
  return cudaGetLastError();
}

}  // namespace pagedserve::kernels::cuda
