// Row-wise and element-wise kernels of the forward pass: RMSNorm, rotary embedding,
// SiLU-and-multiply, embedding lookup, float conversion for the GEMM inputs, row gather.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/dtype_convert.cuh"

namespace pagedserve::kernels::cuda {
namespace {

constexpr int kRowThreads = 256;

__device__ __forceinline__ float block_sum(float x, float* scratch) {
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  const int num_warps = blockDim.x / 32;
  float total = 0.0f;
  for (int w = 0; w < num_warps; ++w) total += scratch[w];
  __syncthreads();  // scratch may be reused by the caller
  return total;
}

__global__ void rms_norm_kernel(const float* x, const float* weight, float* out, int hidden,
                                float eps) {
  __shared__ float scratch[kRowThreads / 32];
  const float* row = x + static_cast<int64_t>(blockIdx.x) * hidden;
  float* out_row = out + static_cast<int64_t>(blockIdx.x) * hidden;
  float sum_sq = 0.0f;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) sum_sq += row[i] * row[i];
  const float total = block_sum(sum_sq, scratch);
  const float inv_rms = rsqrtf(total / static_cast<float>(hidden) + eps);
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) out_row[i] = row[i] * inv_rms * weight[i];
}

// One thread per (token, head, pair i < rotary_dim / 2): rotates (x[i], x[i + half]).
__global__ void rope_kernel(float* q, float* k, const int32_t* positions, int num_tokens,
                            int num_heads, int num_kv_heads, int head_dim, RopeArgs rope) {
  const int half = rope.rotary_dim / 2;
  const int64_t heads = num_heads + num_kv_heads;
  const int64_t total = static_cast<int64_t>(num_tokens) * heads * half;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int i = static_cast<int>(idx % half);
    const int64_t th = idx / half;
    const int head = static_cast<int>(th % heads);
    const int64_t token = th / heads;
    float* x = head < num_heads ? q + (token * num_heads + head) * head_dim
                                : k + (token * num_kv_heads + (head - num_heads)) * head_dim;
    // Same expressions as the CPU twins: theta^(-2i/rotary_dim) or the given frequencies, the
    // angle in double for long contexts, the attention factor before the rounding to float.
    const float* table = rope.uses_long != nullptr && rope.uses_long[token] != 0
                             ? rope.inv_freq_long
                             : rope.inv_freq;
    const double inv_freq = table != nullptr
                                ? static_cast<double>(table[i])
                                : pow(static_cast<double>(rope.theta), -2.0 * i / rope.rotary_dim);
    const double angle = static_cast<double>(positions[token]) * inv_freq;
    const float c = static_cast<float>(cos(angle) * rope.attention_factor);
    const float s = static_cast<float>(sin(angle) * rope.attention_factor);
    const float x0 = x[i];
    const float x1 = x[i + half];
    x[i] = x0 * c - x1 * s;
    x[i + half] = x1 * c + x0 * s;
  }
}

__global__ void split_qkv_kernel(const float* qkv, const float* bias, float* q, float* k, float* v,
                                 int num_tokens, int q_width, int kv_width) {
  const int width = q_width + 2 * kv_width;
  const int64_t total = static_cast<int64_t>(num_tokens) * width;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int col = static_cast<int>(idx % width);
    const int64_t token = idx / width;
    const float value = qkv[idx] + (bias != nullptr ? bias[col] : 0.0f);
    if (col < q_width) {
      q[token * q_width + col] = value;
    } else if (col < q_width + kv_width) {
      k[token * kv_width + (col - q_width)] = value;
    } else {
      v[token * kv_width + (col - q_width - kv_width)] = value;
    }
  }
}

__global__ void gated_activation_kernel(const float* gate_up, const float* bias, float* out,
                                        int num_tokens, int ffn, GatedActivation activation) {
  const int64_t total = static_cast<int64_t>(num_tokens) * ffn;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int i = static_cast<int>(idx % ffn);
    const int64_t token = idx / ffn;
    const float* row = gate_up + token * 2 * ffn;
    const float g = row[i] + (bias != nullptr ? bias[i] : 0.0f);
    const float u = row[ffn + i] + (bias != nullptr ? bias[ffn + i] : 0.0f);
    float a;
    if (activation == GatedActivation::kGeluTanh) {
      constexpr float kSqrt2OverPi = 0.7978845608028654f;
      a = 0.5f * g * (1.0f + tanhf(kSqrt2OverPi * (g + 0.044715f * g * g * g)));
    } else {
      a = g / (1.0f + expf(-g));
    }
    out[idx] = a * u;
  }
}

__global__ void add_bias_kernel(float* x, const float* bias, int64_t total, int width) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[idx] += bias[idx % width];
  }
}

__global__ void add_kernel(float* x, const float* y, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] += y[i];
  }
}

__global__ void scale_kernel(float* x, int64_t n, float factor) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] *= factor;
  }
}

__global__ void soft_cap_kernel(float* x, int64_t n, float cap) {
  const float inv_cap = 1.0f / cap;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] = cap * tanhf(x[i] * inv_cap);
  }
}

__global__ void silu_and_mul_kernel(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

template <typename T>
__global__ void embedding_kernel(const int32_t* ids, const T* table, float* out, int hidden) {
  const int64_t id = ids[blockIdx.x];
  const T* row = table + id * hidden;
  float* out_row = out + static_cast<int64_t>(blockIdx.x) * hidden;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) out_row[i] = to_float(row[i]);
}

template <typename T>
__global__ void convert_kernel(const float* in, T* out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = from_float<T>(in[i]);
  }
}

__global__ void gather_rows_kernel(const float* in, const int32_t* rows, float* out, int width) {
  const float* src = in + static_cast<int64_t>(rows[blockIdx.x]) * width;
  float* dst = out + static_cast<int64_t>(blockIdx.x) * width;
  for (int i = threadIdx.x; i < width; i += blockDim.x) dst[i] = src[i];
}

int grid_for(int64_t n, int threads) {
  return static_cast<int>(std::clamp<int64_t>((n + threads - 1) / threads, 1, 65535));
}

}  // namespace

cudaError_t rms_norm(const float* x, const float* weight, float* out, int num_rows, int hidden,
                     float eps, cudaStream_t stream) {
  if (num_rows == 0) return cudaSuccess;
  rms_norm_kernel<<<num_rows, kRowThreads, 0, stream>>>(x, weight, out, hidden, eps);
  return cudaGetLastError();
}

cudaError_t rope_rotate_half(float* q, float* k, const int32_t* positions, int num_tokens,
                             int num_heads, int num_kv_heads, int head_dim, float theta,
                             cudaStream_t stream) {
  RopeArgs rope;
  rope.rotary_dim = head_dim;
  rope.theta = theta;
  return rope_rotate_half_partial(q, k, positions, num_tokens, num_heads, num_kv_heads, head_dim,
                                  rope, stream);
}

cudaError_t rope_rotate_half_partial(float* q, float* k, const int32_t* positions, int num_tokens,
                                     int num_heads, int num_kv_heads, int head_dim,
                                     const RopeArgs& rope, cudaStream_t stream) {
  if (rope.rotary_dim <= 0 || rope.rotary_dim % 2 != 0 || rope.rotary_dim > head_dim) {
    return cudaErrorInvalidValue;
  }
  const int64_t total =
      static_cast<int64_t>(num_tokens) * (num_heads + num_kv_heads) * (rope.rotary_dim / 2);
  if (total == 0) return cudaSuccess;
  rope_kernel<<<grid_for(total, 256), 256, 0, stream>>>(q, k, positions, num_tokens, num_heads,
                                                        num_kv_heads, head_dim, rope);
  return cudaGetLastError();
}

cudaError_t split_qkv(const float* qkv, const float* bias, float* q, float* k, float* v,
                      int num_tokens, int q_width, int kv_width, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(num_tokens) * (q_width + 2 * kv_width);
  if (total == 0) return cudaSuccess;
  split_qkv_kernel<<<grid_for(total, 256), 256, 0, stream>>>(qkv, bias, q, k, v, num_tokens,
                                                             q_width, kv_width);
  return cudaGetLastError();
}

cudaError_t gated_activation(const float* gate_up, const float* bias, float* out, int num_tokens,
                             int ffn, GatedActivation activation, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(num_tokens) * ffn;
  if (total == 0) return cudaSuccess;
  gated_activation_kernel<<<grid_for(total, 256), 256, 0, stream>>>(gate_up, bias, out, num_tokens,
                                                                    ffn, activation);
  return cudaGetLastError();
}

cudaError_t add_bias(float* x, const float* bias, int num_rows, int width, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(num_rows) * width;
  if (total == 0) return cudaSuccess;
  add_bias_kernel<<<grid_for(total, 256), 256, 0, stream>>>(x, bias, total, width);
  return cudaGetLastError();
}

cudaError_t add(float* x, const float* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  add_kernel<<<grid_for(n, 256), 256, 0, stream>>>(x, y, n);
  return cudaGetLastError();
}

cudaError_t scale(float* x, int64_t n, float factor, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  scale_kernel<<<grid_for(n, 256), 256, 0, stream>>>(x, n, factor);
  return cudaGetLastError();
}

cudaError_t soft_cap(float* x, int64_t n, float cap, cudaStream_t stream) {
  if (!(cap > 0.0f)) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  soft_cap_kernel<<<grid_for(n, 256), 256, 0, stream>>>(x, n, cap);
  return cudaGetLastError();
}

cudaError_t silu_and_mul(const float* gate, const float* up, float* out, int64_t n,
                         cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  silu_and_mul_kernel<<<grid_for(n, 256), 256, 0, stream>>>(gate, up, out, n);
  return cudaGetLastError();
}

cudaError_t embedding(const int32_t* ids, const void* table, DType table_dtype, float* out,
                      int num_tokens, int hidden, cudaStream_t stream) {
  if (num_tokens == 0) return cudaSuccess;
  switch (table_dtype) {
    case DType::kFloat32:
      embedding_kernel<<<num_tokens, 256, 0, stream>>>(ids, static_cast<const float*>(table), out,
                                                       hidden);
      break;
    case DType::kFloat16:
      embedding_kernel<<<num_tokens, 256, 0, stream>>>(ids, static_cast<const __half*>(table), out,
                                                       hidden);
      break;
    case DType::kBFloat16:
      embedding_kernel<<<num_tokens, 256, 0, stream>>>(
          ids, static_cast<const __nv_bfloat16*>(table), out, hidden);
      break;
    case DType::kFp8E4M3:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t convert_floats(const float* in, void* out, DType out_dtype, int64_t n,
                           cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const int grid = grid_for(n, 256);
  switch (out_dtype) {
    case DType::kFloat32:
      return cudaMemcpyAsync(out, in, n * sizeof(float), cudaMemcpyDeviceToDevice, stream);
    case DType::kFloat16:
      convert_kernel<<<grid, 256, 0, stream>>>(in, static_cast<__half*>(out), n);
      break;
    case DType::kBFloat16:
      convert_kernel<<<grid, 256, 0, stream>>>(in, static_cast<__nv_bfloat16*>(out), n);
      break;
    case DType::kFp8E4M3:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t gather_rows(const float* in, const int32_t* rows, float* out, int num_rows, int width,
                        cudaStream_t stream) {
  if (num_rows == 0) return cudaSuccess;
  gather_rows_kernel<<<num_rows, 256, 0, stream>>>(in, rows, out, width);
  return cudaGetLastError();
}

}  // namespace pagedserve::kernels::cuda
