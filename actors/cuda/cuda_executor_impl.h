// What the CUDA executor's translation units share (cuda_executor.cpp: set-up, block copies
// and the forward pass; cuda_sampling.cpp: sampling): the device buffers, the step's metadata
// pack and plan, the layer weights, and CudaExecutor::Impl itself. Internal to actors/cuda.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "actors/cuda/cuda_executor.h"
#include "actors/grammar_rows.h"
#include "kernels/cuda/cuda_kernels.h"
#include "model/decode_graph_plan.h"
#include "model/llama_model.h"

namespace pagedserve::actors {
namespace cuda_detail {

using kernels::cuda::DType;

inline void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string("CUDA error in ") + what + ": " +
                             cudaGetErrorString(status));
  }
}

inline void check_cublas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string("cuBLAS error in ") + what + ": " +
                             cublasGetStatusString(status));
  }
}

// A grow-only device allocation.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(ptr_); }
  // Returns whether the buffer moved (captured graphs hold its old address).
  bool reserve(size_t bytes) {
    if (bytes <= bytes_) return false;
    cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
    check_cuda(cudaMalloc(&ptr_, bytes), "cudaMalloc");
    bytes_ = bytes;
    return true;
  }
  template <typename T = void>
  T* get() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// The device pointer of an optional float32 tensor, null when the model has none.
inline const float* optional_ptr(const DeviceBuffer& buffer) {
  return buffer.bytes() > 0 ? buffer.get<float>() : nullptr;
}

// A grow-only pinned host allocation (the swap pool and the staging area for uploads).
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() { cudaFreeHost(ptr_); }
  void reserve(size_t bytes) {
    if (bytes <= bytes_) return;
    cudaFreeHost(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
    check_cuda(cudaHostAlloc(&ptr_, bytes, cudaHostAllocDefault), "cudaHostAlloc");
    bytes_ = bytes;
  }
  char* get() const { return static_cast<char*>(ptr_); }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Packs several host arrays into one pinned staging buffer so a step's metadata goes to the
// device in one copy; each array starts on a 16-byte boundary.
class UploadPack {
 public:
  template <typename T>
  size_t add(const T* data, size_t count) {
    const size_t offset = (bytes_.size() + 15) / 16 * 16;
    bytes_.resize(offset + count * sizeof(T));
    if (count > 0) std::memcpy(bytes_.data() + offset, data, count * sizeof(T));
    return offset;
  }
  template <typename T>
  size_t add(const std::vector<T>& v) {
    return add(v.data(), v.size());
  }
  // Copies the pack into `device` through `pinned` on `stream`; returns whether `device` moved.
  bool upload(PinnedBuffer& pinned, DeviceBuffer& device, cudaStream_t stream) {
    if (bytes_.empty()) return false;
    pinned.reserve(bytes_.size());
    const bool moved = device.reserve(bytes_.size());
    std::memcpy(pinned.get(), bytes_.data(), bytes_.size());
    check_cuda(
        cudaMemcpyAsync(device.get(), pinned.get(), bytes_.size(), cudaMemcpyHostToDevice, stream),
        "cudaMemcpyAsync (step metadata)");
    return moved;
  }

 private:
  std::vector<char> bytes_;
};

// One layer on the device. q/k/v and gate/up are stacked into one matrix each (one GEMM
// each, as the CPU packs them); every optional tensor of a family is empty (0 bytes) when the
// model has none.
struct LayerWeights {
  DeviceBuffer input_norm, post_norm;                               // float32
  DeviceBuffer post_attention_norm, post_mlp_norm, q_norm, k_norm;  // float32, optional
  DeviceBuffer qkv_bias, o_bias, gate_up_bias, down_bias;           // float32, optional
  DeviceBuffer wqkv, wo, w_gate_up, w_down;                         // weight dtype
  model::LayerConfig settings;  // window, RoPE on/off, which RoPE
};

// The same layer in float32 on the host, in the device's layout, from either weight source.
struct HostLayer {
  std::vector<float> input_norm, post_norm, post_attention_norm, post_mlp_norm, q_norm, k_norm;
  std::vector<float> qkv_bias, o_bias, gate_up_bias, down_bias;
  std::vector<float> wqkv, wo, w_gate_up, w_down;
};

// One forward pass's shape and where each array of its metadata sits in the uploaded pack:
// everything the kernel launches need besides the weights and workspace.
struct StepPlan {
  int num_tokens = 0;
  int num_seqs = 0;
  int num_out = 0;
  int max_blocks_per_seq = 0;
  int num_work_items = 0;
  int max_seq_len = 0;
  int partition_size = 0;
  bool uses_long = false;
  size_t off_ids = 0, off_pos = 0, off_slots = 0, off_qsl = 0, off_lens = 0, off_tables = 0,
         off_work = 0, off_logit_rows = 0, off_uses_long = 0;
};

// The cuBLAS type of a weight dtype.
inline cudaDataType_t cublas_type(DType dtype) {
  switch (dtype) {
    case DType::kFloat16:
      return CUDA_R_16F;
    case DType::kBFloat16:
      return CUDA_R_16BF;
    default:
      return CUDA_R_32F;
  }
}

}  // namespace cuda_detail

// Impl's inline members below use these unqualified, as the .cpp files do.
namespace kc = kernels::cuda;
using cuda_detail::check_cublas;
using cuda_detail::check_cuda;
using cuda_detail::cublas_type;
using cuda_detail::optional_ptr;

struct CudaExecutor::Impl {
  using DeviceBuffer = cuda_detail::DeviceBuffer;
  using PinnedBuffer = cuda_detail::PinnedBuffer;
  using UploadPack = cuda_detail::UploadPack;
  using LayerWeights = cuda_detail::LayerWeights;
  using HostLayer = cuda_detail::HostLayer;
  using StepPlan = cuda_detail::StepPlan;
  using DType = cuda_detail::DType;

  model::ModelConfig config;
  CudaExecutorOptions options;
  DType weight_dtype = DType::kFloat32;
  DType kv_dtype = DType::kFloat32;
  std::string device_name;
  int num_sms = 1;

  cudaStream_t compute = nullptr;
  cudaStream_t copy = nullptr;
  cudaEvent_t compute_done = nullptr;
  cudaEvent_t copy_done = nullptr;
  // Timing events around a step's forward and sampling (CudaStepTimes).
  cudaEvent_t forward_start = nullptr, forward_end = nullptr, step_end = nullptr;
  CudaStepTimes times;
  cublasHandle_t cublas = nullptr;

  DeviceBuffer embed_tokens, lm_head, final_norm;
  std::vector<LayerWeights> layers;
  // RoPE of the global and (Gemma 3) local layers: frequencies on the device, or plain theta.
  // LongRoPE: sequences longer than rope_long_after tokens take the long frequencies.
  kc::RopeArgs rope_global, rope_local;
  DeviceBuffer rope_global_freq, rope_local_freq, rope_global_freq_long;
  int rope_long_after = 0;

  // KV: [layer][key, value][num_blocks][block bytes]; swap pool: the same with num_cpu_blocks.
  int num_blocks = 0;
  int num_cpu_blocks = 0;
  size_t block_bytes = 0;  // one block of one layer's keys (or values)
  DeviceBuffer kv_pool;
  PinnedBuffer swap_pool;
  DeviceBuffer kv_buffer_ptrs;  // [2 * layers] device pointers for copy_blocks

  // Per-step workspace (grown on demand).
  int token_capacity = 0;
  int row_capacity = 0;
  DeviceBuffer x, h, hw, qkv, q, k, v, attn, gate_up, act, proj, selected, logits;
  DeviceBuffer partial_out, partial_max, partial_sum;
  DeviceBuffer lse;
  DeviceBuffer argmax_tokens, greedy_logprobs;
  DeviceBuffer draw_tokens, draw_logprobs;
  DeviceBuffer sort_keys_in, sort_keys_out, sort_ids_in, sort_ids_out, sort_offsets, sort_temp;
  DeviceBuffer metadata, sample_metadata;
  // Decode steps replayed as CUDA graphs (model/decode_graph_plan.h), one per padded shape,
  // captured on first use and dropped when a buffer they read moves.
  std::map<model::DecodeGraphKey, cudaGraphExec_t> graphs;
  DeviceBuffer graph_metadata;    // the metadata graphs read: its address is baked in
  DeviceBuffer cublas_workspace;  // cuBLAS must not allocate while a graph is captured
  size_t graph_launches = 0;
  bool graphs_failed = false;  // a capture failed: eager from then on
  PinnedBuffer metadata_pinned, sample_metadata_pinned, results_pinned;
  GrammarRowStates grammars;  // matchers of constrained sequences, kept across steps

  ~Impl() {
    if (compute) cudaStreamSynchronize(compute);
    if (copy) cudaStreamSynchronize(copy);
    drop_graphs();
    if (cublas) cublasDestroy(cublas);
    if (compute_done) cudaEventDestroy(compute_done);
    if (copy_done) cudaEventDestroy(copy_done);
    for (cudaEvent_t e : {forward_start, forward_end, step_end}) {
      if (e) cudaEventDestroy(e);
    }
    if (compute) cudaStreamDestroy(compute);
    if (copy) cudaStreamDestroy(copy);
  }

  void upload_weight(DeviceBuffer& dst, const std::vector<float>& src, DType dtype,
                     DeviceBuffer& staging) {
    if (src.empty()) return;  // an optional tensor the model does not have
    dst.reserve(std::max<size_t>(src.size() * kc::dtype_size(dtype), 16));
    if (dtype == DType::kFloat32) {
      check_cuda(
          cudaMemcpy(dst.get(), src.data(), src.size() * sizeof(float), cudaMemcpyHostToDevice),
          "cudaMemcpy (weights)");
      return;
    }
    // Float32 goes up in chunks through a staging buffer and is converted on the device.
    const size_t chunk = staging.bytes() / sizeof(float);
    for (size_t begin = 0; begin < src.size(); begin += chunk) {
      const size_t n = std::min(chunk, src.size() - begin);
      check_cuda(
          cudaMemcpy(staging.get(), src.data() + begin, n * sizeof(float), cudaMemcpyHostToDevice),
          "cudaMemcpy (weights)");
      check_cuda(
          kc::convert_floats(staging.get<float>(), dst.get<char>() + begin * kc::dtype_size(dtype),
                             dtype, static_cast<int64_t>(n), nullptr),
          "convert_floats (weights)");
    }
    check_cuda(cudaDeviceSynchronize(), "weight conversion");
  }

  void drop_graphs() {
    for (auto& [key, exec] : graphs) cudaGraphExecDestroy(exec);
    graphs.clear();
  }

  void reserve_workspace(int tokens, int rows) {
    const size_t t = static_cast<size_t>(std::max(tokens, 1));
    const size_t r = static_cast<size_t>(std::max(rows, 1));
    const size_t hidden = config.hidden_size;
    const size_t q_width = static_cast<size_t>(config.num_attention_heads) * config.head_dim;
    const size_t kv_width = static_cast<size_t>(config.num_key_value_heads) * config.head_dim;
    const size_t ffn = config.intermediate_size;
    const size_t widest = std::max({hidden, q_width, ffn});
    bool moved = x.reserve(t * hidden * 4);
    moved |= h.reserve(t * hidden * 4);
    moved |= hw.reserve(t * widest * kc::dtype_size(weight_dtype));
    moved |= qkv.reserve(t * (q_width + 2 * kv_width) * 4);
    moved |= q.reserve(t * q_width * 4);
    moved |= k.reserve(t * kv_width * 4);
    moved |= v.reserve(t * kv_width * 4);
    moved |= attn.reserve(t * q_width * 4);
    moved |= gate_up.reserve(t * 2 * ffn * 4);
    moved |= act.reserve(t * ffn * 4);
    moved |= proj.reserve(t * hidden * 4);
    moved |= selected.reserve(r * hidden * 4);
    moved |= logits.reserve(r * config.vocab_size * 4);
    moved |= lse.reserve(r * sizeof(double));
    moved |= argmax_tokens.reserve(r * 4);
    moved |= greedy_logprobs.reserve(r * 4);
    if (moved) drop_graphs();
    token_capacity = std::max(token_capacity, tokens);
    row_capacity = std::max(row_capacity, rows);
  }

  void reserve_sort(int segments) {
    const size_t n = static_cast<size_t>(std::max(segments, 1)) * config.vocab_size;
    sort_keys_in.reserve(n * 4);
    sort_keys_out.reserve(n * 4);
    sort_ids_in.reserve(n * 4);
    sort_ids_out.reserve(n * 4);
    sort_offsets.reserve((static_cast<size_t>(segments) + 2) * 4);
    sort_temp.reserve(
        std::max<size_t>(kc::sort_temp_bytes(std::max(segments, 1), config.vocab_size), 16));
  }

  kc::KvCacheLayout layer_cache(int layer) const {
    kc::KvCacheLayout c;
    const size_t pool_bytes = block_bytes * num_blocks;
    c.key = kv_pool.get<char>() + (2 * layer) * pool_bytes;
    c.value = kv_pool.get<char>() + (2 * layer + 1) * pool_bytes;
    c.dtype = kv_dtype;
    c.num_blocks = num_blocks;
    c.block_size = options.block_size;
    c.num_kv_heads = config.num_key_value_heads;
    c.head_dim = config.head_dim;
    return c;
  }

  // out[m, n] (+)= x[m, k] * w[n, k]^T: row-major out is cuBLAS's column-major out^T = w x^T.
  void gemm(const void* x_in, const void* w, float* out, int m, int n, int k, bool accumulate) {
    const float alpha = 1.0f;
    const float beta = accumulate ? 1.0f : 0.0f;
    const cudaDataType_t type = cublas_type(weight_dtype);
    check_cublas(
        cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, w, type, k, x_in, type, k,
                     &beta, out, CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
  }

  // The GEMM input for float activations: themselves for float32 weights, else a converted copy.
  const void* gemm_input(const float* in, int64_t n) {
    if (weight_dtype == DType::kFloat32) return in;
    check_cuda(kc::convert_floats(in, hw.get(), weight_dtype, n, compute), "convert_floats");
    return hw.get();
  }

  void start(const model::ModelConfig& model_config, const CudaExecutorOptions& opts);
  void upload_layer(size_t l, HostLayer&& w, DeviceBuffer& staging);
  void finish_set_up();
  void apply_block_copies(const StepInput& input);
  void forward(const model::ForwardBatch& batch);
  int partition_for(int num_work_items, int max_seq_len) const;
  StepPlan plan_step(const model::ForwardBatch& batch, bool bucket_partitions, UploadPack& pack);
  void run_decode_graph(const model::ForwardBatch& batch);
  void launch(const StepPlan& plan, const char* md);
  void attention_block(const LayerWeights& w, kc::AttentionParams& attention,
                       const kc::RopeArgs& global_rope, const int32_t* positions,
                       const int64_t* slots, int num_tokens, int layer);
  void mlp_block(const LayerWeights& w, int num_tokens);
  // x += out, where out is a projection's output (bias, post-norm if the family has them).
  void add_projection(const void* in, const DeviceBuffer& weight, const DeviceBuffer& bias,
                      const DeviceBuffer& post_norm, int num_tokens, int in_width);
  StepOutput sample(const StepInput& input, int num_rows);
  // Waits for the step's last work and adds its times (CudaStepTimes, output.times), the
  // sampling set-up's from sample_start; returns when the wait ended.
  std::chrono::steady_clock::time_point finish_step(
      StepOutput& output, std::chrono::steady_clock::time_point sample_start);
};

}  // namespace pagedserve::actors
