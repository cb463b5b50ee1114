// CudaExecutor: weights upload and conversion, the KV pool, the forward pass as a sequence of
// kernel launches and cuBLAS GEMMs on one compute stream, swaps on a copy stream, and device
// sampling. Every CUDA status is checked; a failure throws std::runtime_error naming the call.
#include "actors/cuda/cuda_executor.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "actors/grammar_rows.h"
#include "kernels/cuda/cuda_kernels.h"
#include "model/llama_model.h"
#include "model/rope_frequencies.h"

namespace pagedserve::actors {
namespace {

namespace kc = kernels::cuda;
using kc::DType;

void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string("CUDA error in ") + what + ": " +
                             cudaGetErrorString(status));
  }
}

void check_cublas(cublasStatus_t status, const char* what) {
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
  void reserve(size_t bytes) {
    if (bytes <= bytes_) return;
    cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
    check_cuda(cudaMalloc(&ptr_, bytes), "cudaMalloc");
    bytes_ = bytes;
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
const float* optional_ptr(const DeviceBuffer& buffer) {
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
  // Copies the pack into `device` through `pinned` on `stream`.
  void upload(PinnedBuffer& pinned, DeviceBuffer& device, cudaStream_t stream) {
    if (bytes_.empty()) return;
    pinned.reserve(bytes_.size());
    device.reserve(bytes_.size());
    std::memcpy(pinned.get(), bytes_.data(), bytes_.size());
    check_cuda(
        cudaMemcpyAsync(device.get(), pinned.get(), bytes_.size(), cudaMemcpyHostToDevice, stream),
        "cudaMemcpyAsync (step metadata)");
  }

 private:
  std::vector<char> bytes_;
};

// The grammar masks of a step's constrained rows (structured outputs), computed on the host
// while the device still runs the forward pass, and applied by kc::apply_token_bitmask before
// any other sampling kernel reads the logits.
struct StepMasks {
  int words_per_row = 0;
  std::vector<int32_t> rows;
  std::vector<int32_t> allowed_ids;
  std::vector<uint32_t> words;  // [rows.size(), words_per_row]

  // Adds row `row`'s mask from `state` (synced to the sequence's output). Returns whether the
  // row's banned tokens still apply: not when the grammar allows only banned tokens (it is
  // complete and EOS is banned), where the grammar wins, as in the CPU sampler.
  bool add(const GrammarRowState& state, const ScheduledSequence& seq, int row, int vocab) {
    thread_local std::vector<uint32_t> mask;
    if (!next_token_bitmask(state, tokens_after(*seq.sampling, seq.sample_step), mask)) {
      return true;  // broken, terminated or nothing allowed: sampled unconstrained
    }
    const int allowed = static_cast<int>(std::min<size_t>(state.vocab_size, vocab));
    rows.push_back(row);
    allowed_ids.push_back(allowed);
    const size_t first = words.size();
    words.resize(first + words_per_row, 0);
    std::copy_n(mask.begin(), std::min<size_t>(mask.size(), words_per_row), words.begin() + first);
    const auto is_allowed = [&](int32_t id) {
      return id >= 0 && id < allowed && ((mask[id / 32] >> (id % 32)) & 1u) != 0;
    };
    for (int32_t id = 0; id < allowed; ++id) {
      if (is_allowed(id) && std::find(seq.banned_token_ids.begin(), seq.banned_token_ids.end(),
                                      id) == seq.banned_token_ids.end()) {
        return true;
      }
    }
    return false;
  }
};

DType parse_weight_dtype(const std::string& name, const std::string& torch_dtype) {
  const std::string n = name == "auto" ? (torch_dtype.empty() ? "float32" : torch_dtype) : name;
  if (n == "float32" || n == "float") return DType::kFloat32;
  if (n == "float16" || n == "half") return DType::kFloat16;
  if (n == "bfloat16") return DType::kBFloat16;
  throw std::invalid_argument(
      "--dtype must be auto, float32, float16 or bfloat16, got '" + name +
      (name == "auto" ? "' (the model's torch_dtype is '" + n + "')" : std::string("'")));
}

DType parse_kv_dtype(const std::string& name, DType weight_dtype) {
  if (name == "auto") return weight_dtype;
  if (name == "float32") return DType::kFloat32;
  if (name == "float16") return DType::kFloat16;
  if (name == "bfloat16") return DType::kBFloat16;
  if (name == "fp8" || name == "fp8_e4m3") return DType::kFp8E4M3;
  throw std::invalid_argument(
      "--kv-cache-dtype must be auto, float32, float16, bfloat16 or fp8, got '" + name + "'");
}

cudaDataType_t cublas_type(DType dtype) {
  switch (dtype) {
    case DType::kFloat16:
      return CUDA_R_16F;
    case DType::kBFloat16:
      return CUDA_R_16BF;
    default:
      return CUDA_R_32F;
  }
}

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

std::vector<float> stacked(std::initializer_list<std::vector<float>*> parts) {
  std::vector<float> out;
  for (std::vector<float>* part : parts) {
    out.insert(out.end(), part->begin(), part->end());
    *part = {};
  }
  return out;
}

HostLayer host_layer(model::LlamaLayerWeights&& w) {
  HostLayer h;
  h.input_norm = std::move(w.input_norm);
  h.post_norm = std::move(w.post_norm);
  h.wqkv = stacked({&w.wq, &w.wk, &w.wv});
  h.wo = std::move(w.wo);
  h.w_gate_up = stacked({&w.w_gate, &w.w_up});
  h.w_down = std::move(w.w_down);
  return h;
}

// Optional tensors become empty vectors; norms get the family's weight offset (Gemma's 1 + w).
std::vector<float> optional_f32(const model::TensorView* view, float offset = 0.0f) {
  if (view == nullptr) return {};
  std::vector<float> values = model::to_f32(*view);
  if (offset != 0.0f) {
    for (float& v : values) v += offset;
  }
  return values;
}

// Biases of stacked projections, concatenated; empty when any part is missing.
std::vector<float> stacked_f32(std::initializer_list<const model::TensorView*> parts) {
  std::vector<float> out;
  for (const model::TensorView* part : parts) {
    if (part == nullptr) return {};
    const std::vector<float> values = model::to_f32(*part);
    out.insert(out.end(), values.begin(), values.end());
  }
  return out;
}

HostLayer host_layer(const model::LlamaLayerTensors& t, float norm_offset) {
  HostLayer h;
  h.input_norm = optional_f32(t.input_norm, norm_offset);
  h.post_norm = optional_f32(t.post_norm, norm_offset);
  h.post_attention_norm = optional_f32(t.post_attention_norm, norm_offset);
  h.post_mlp_norm = optional_f32(t.post_mlp_norm, norm_offset);
  h.q_norm = optional_f32(t.q_norm, norm_offset);
  h.k_norm = optional_f32(t.k_norm, norm_offset);
  h.qkv_bias = stacked_f32({t.q_bias, t.k_bias, t.v_bias});
  h.o_bias = optional_f32(t.o_bias);
  h.gate_up_bias = stacked_f32({t.gate_bias, t.up_bias});
  h.down_bias = optional_f32(t.down_bias);
  h.wqkv = t.wqkv ? model::to_f32(*t.wqkv) : stacked_f32({t.wq, t.wk, t.wv});
  h.wo = model::to_f32(*t.wo);
  h.w_gate_up = t.w_gate_up ? model::to_f32(*t.w_gate_up) : stacked_f32({t.w_gate, t.w_up});
  h.w_down = model::to_f32(*t.w_down);
  return h;
}

model::LayerConfig layer_settings(const model::ModelConfig& c, size_t l) {
  return l < c.layers.size() ? c.layers[l] : model::LayerConfig{};
}

}  // namespace

size_t cuda_kv_dtype_bytes(const CudaExecutorOptions& options, const std::string& torch_dtype) {
  const DType weights = parse_weight_dtype(options.weight_dtype, torch_dtype);
  return kc::dtype_size(parse_kv_dtype(options.kv_cache_dtype, weights));
}

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" status
    return 0;
  }
  return count;
}

struct CudaExecutor::Impl {
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
  cublasHandle_t cublas = nullptr;

  DeviceBuffer embed_tokens, lm_head, final_norm;
  std::vector<LayerWeights> layers;
  // RoPE of the global and (Gemma 3) local layers: frequencies on the device, or plain theta.
  // LongRoPE: sequences longer than rope_long_after tokens take the long frequencies.
  kc::RopeArgs rope_global, rope_local;
  DeviceBuffer rope_global_freq, rope_local_freq, rope_global_freq_long;
  int rope_long_after = 0;
  const int32_t* step_uses_long = nullptr;  // this step's per-token choice (device), LongRoPE

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
  PinnedBuffer metadata_pinned, sample_metadata_pinned, results_pinned;
  GrammarRowStates grammars;  // matchers of constrained sequences, kept across steps

  ~Impl() {
    if (compute) cudaStreamSynchronize(compute);
    if (copy) cudaStreamSynchronize(copy);
    if (cublas) cublasDestroy(cublas);
    if (compute_done) cudaEventDestroy(compute_done);
    if (copy_done) cudaEventDestroy(copy_done);
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

  void reserve_workspace(int tokens, int rows) {
    const size_t t = static_cast<size_t>(std::max(tokens, 1));
    const size_t r = static_cast<size_t>(std::max(rows, 1));
    const size_t hidden = config.hidden_size;
    const size_t q_width = static_cast<size_t>(config.num_attention_heads) * config.head_dim;
    const size_t kv_width = static_cast<size_t>(config.num_key_value_heads) * config.head_dim;
    const size_t ffn = config.intermediate_size;
    const size_t widest = std::max({hidden, q_width, ffn});
    x.reserve(t * hidden * 4);
    h.reserve(t * hidden * 4);
    hw.reserve(t * widest * kc::dtype_size(weight_dtype));
    qkv.reserve(t * (q_width + 2 * kv_width) * 4);
    q.reserve(t * q_width * 4);
    k.reserve(t * kv_width * 4);
    v.reserve(t * kv_width * 4);
    attn.reserve(t * q_width * 4);
    gate_up.reserve(t * 2 * ffn * 4);
    act.reserve(t * ffn * 4);
    proj.reserve(t * hidden * 4);
    selected.reserve(r * hidden * 4);
    logits.reserve(r * config.vocab_size * 4);
    lse.reserve(r * sizeof(double));
    argmax_tokens.reserve(r * 4);
    greedy_logprobs.reserve(r * 4);
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
  void attention_block(const LayerWeights& w, kc::AttentionParams& attention,
                       const int32_t* positions, const int64_t* slots, int num_tokens, int layer);
  void mlp_block(const LayerWeights& w, int num_tokens);
  // x += out, where out is a projection's output (bias, post-norm if the family has them).
  void add_projection(const void* in, const DeviceBuffer& weight, const DeviceBuffer& bias,
                      const DeviceBuffer& post_norm, int num_tokens, int in_width);
  StepOutput sample(const StepInput& input, int num_rows);
};

// Checks the options, opens the device, its streams and cuBLAS, and puts the RoPE
// frequencies on the device: everything before the weights.
void CudaExecutor::Impl::start(const model::ModelConfig& model_config,
                               const CudaExecutorOptions& opts) {
  config = model_config;
  options = opts;
  const model::ModelConfig& c = config;
  if (options.block_size < 1) throw std::invalid_argument("block size must be positive");
  if (!(options.gpu_memory_utilization > 0.0 && options.gpu_memory_utilization <= 1.0)) {
    throw std::invalid_argument("--gpu-memory-utilization must be in (0, 1], got " +
                                std::to_string(options.gpu_memory_utilization));
  }
  if (c.head_dim > 128 && c.head_dim != 256) {
    throw std::invalid_argument(
        "the CUDA attention kernels support head_dim up to 128 and 256, got " +
        std::to_string(c.head_dim) + "; use --device cpu");
  }
  weight_dtype = parse_weight_dtype(options.weight_dtype, c.torch_dtype);
  kv_dtype = parse_kv_dtype(options.kv_cache_dtype, weight_dtype);

  const int devices = cuda_device_count();
  if (devices == 0) {
    throw std::runtime_error("--device cuda: no CUDA device is visible (cudaGetDeviceCount)");
  }
  if (options.device < 0 || options.device >= devices) {
    throw std::invalid_argument("CUDA device " + std::to_string(options.device) +
                                " does not exist (" + std::to_string(devices) + " visible)");
  }
  check_cuda(cudaSetDevice(options.device), "cudaSetDevice");
  cudaDeviceProp prop{};
  check_cuda(cudaGetDeviceProperties(&prop, options.device), "cudaGetDeviceProperties");
  device_name = prop.name;
  num_sms = prop.multiProcessorCount;
  check_cuda(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking), "cudaStreamCreate");
  check_cuda(cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking), "cudaStreamCreate");
  check_cuda(cudaEventCreateWithFlags(&compute_done, cudaEventDisableTiming), "cudaEventCreate");
  check_cuda(cudaEventCreateWithFlags(&copy_done, cudaEventDisableTiming), "cudaEventCreate");
  check_cublas(cublasCreate(&cublas), "cublasCreate");
  check_cublas(cublasSetStream(cublas, compute), "cublasSetStream");

  // The CPU's frequencies: plain ones from theta in double on the device, others as computed
  // on the host (rope_frequencies) and uploaded.
  auto upload = [](DeviceBuffer& dst, const std::vector<float>& table) {
    dst.reserve(table.size() * sizeof(float));
    check_cuda(
        cudaMemcpy(dst.get(), table.data(), table.size() * sizeof(float), cudaMemcpyHostToDevice),
        "cudaMemcpy (RoPE frequencies)");
    return dst.get<float>();
  };
  const model::RopeFrequencies global = model::rope_frequencies(c, false);
  const model::RopeFrequencies local = model::rope_frequencies(c, true);
  for (auto [f, args, freq] : {std::tuple{&global, &rope_global, &rope_global_freq},
                               std::tuple{&local, &rope_local, &rope_local_freq}}) {
    args->rotary_dim = c.rope_dims();
    args->theta = c.rope_theta;
    args->attention_factor = f->attention_factor;
    if (!f->plain) args->inv_freq = upload(*freq, f->inv_freq);
  }
  // Only global layers scale (Gemma 3's local ones never do), so only they can be LongRoPE.
  if (!global.inv_freq_long.empty()) {
    rope_global.inv_freq_long = upload(rope_global_freq_long, global.inv_freq_long);
    rope_long_after = global.long_after;
  }
}

void CudaExecutor::Impl::upload_layer(size_t l, HostLayer&& w, DeviceBuffer& staging) {
  LayerWeights& d = layers.at(l);
  d.settings = layer_settings(config, l);
  using Upload = std::pair<DeviceBuffer*, std::vector<float>*>;
  const Upload float32_tensors[] = {{&d.input_norm, &w.input_norm},
                                    {&d.post_norm, &w.post_norm},
                                    {&d.post_attention_norm, &w.post_attention_norm},
                                    {&d.post_mlp_norm, &w.post_mlp_norm},
                                    {&d.q_norm, &w.q_norm},
                                    {&d.k_norm, &w.k_norm},
                                    {&d.qkv_bias, &w.qkv_bias},
                                    {&d.o_bias, &w.o_bias},
                                    {&d.gate_up_bias, &w.gate_up_bias},
                                    {&d.down_bias, &w.down_bias}};
  for (const auto& [dst, src] : float32_tensors)
    upload_weight(*dst, *src, DType::kFloat32, staging);
  const Upload matrices[] = {
      {&d.wqkv, &w.wqkv}, {&d.wo, &w.wo}, {&d.w_gate_up, &w.w_gate_up}, {&d.w_down, &w.w_down}};
  for (const auto& [dst, src] : matrices) {
    upload_weight(*dst, *src, weight_dtype, staging);
    *src = {};  // the host copy is no longer needed
  }
}

CudaExecutor::CudaExecutor(model::LlamaWeights weights, const CudaExecutorOptions& options)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.start(weights.config, options);
  DeviceBuffer staging;
  staging.reserve(size_t{64} << 20);
  s.upload_weight(s.embed_tokens, weights.embed_tokens, s.weight_dtype, staging);
  weights.embed_tokens = {};
  s.upload_weight(s.lm_head, weights.lm_head, s.weight_dtype, staging);
  weights.lm_head = {};
  s.upload_weight(s.final_norm, weights.final_norm, DType::kFloat32, staging);
  s.layers = std::vector<LayerWeights>(weights.layers.size());
  for (size_t l = 0; l < weights.layers.size(); ++l) {
    s.upload_layer(l, host_layer(std::move(weights.layers[l])), staging);
  }
  s.finish_set_up();
}

CudaExecutor::CudaExecutor(const model::LlamaCheckpoint& checkpoint,
                           const CudaExecutorOptions& options)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.start(checkpoint.config, options);
  const float offset = s.config.norm_weight_offset;
  DeviceBuffer staging;
  staging.reserve(size_t{64} << 20);
  s.upload_weight(s.embed_tokens, model::to_f32(*checkpoint.embed_tokens), s.weight_dtype, staging);
  s.upload_weight(s.lm_head, optional_f32(checkpoint.lm_head), s.weight_dtype, staging);
  s.upload_weight(s.final_norm, optional_f32(checkpoint.final_norm, offset), DType::kFloat32,
                  staging);
  s.layers = std::vector<LayerWeights>(checkpoint.layers.size());
  for (size_t l = 0; l < checkpoint.layers.size(); ++l) {
    s.upload_layer(l, host_layer(checkpoint.layers[l], offset), staging);
  }
  s.finish_set_up();
}

// Workspace for the largest step the scheduler may send, then the KV pool from what is left.
void CudaExecutor::Impl::finish_set_up() {
  Impl& s = *this;
  const model::ModelConfig& c = config;
  s.reserve_workspace(options.max_num_batched_tokens,
                      std::min(options.max_num_seqs, options.max_num_batched_tokens));
  s.reserve_sort(1);
  s.block_bytes = static_cast<size_t>(c.num_key_value_heads) * options.block_size * c.head_dim *
                  kc::dtype_size(s.kv_dtype);
  const size_t bytes_per_block = 2 * static_cast<size_t>(c.num_hidden_layers) * s.block_bytes;
  if (options.num_device_blocks > 0) {
    s.num_blocks = options.num_device_blocks;
  } else {
    size_t free_bytes = 0, total_bytes = 0;
    check_cuda(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
    const double reserved =
        (1.0 - options.gpu_memory_utilization) * static_cast<double>(total_bytes);
    const double budget = static_cast<double>(free_bytes) - reserved;
    const double blocks = std::floor(budget / static_cast<double>(bytes_per_block));
    if (blocks < 1.0) {
      throw std::runtime_error(
          "no device memory left for the KV cache: " + std::to_string(free_bytes >> 20) +
          " MiB free of " + std::to_string(total_bytes >> 20) +
          " MiB after the weights; raise --gpu-memory-utilization (now " +
          std::to_string(options.gpu_memory_utilization) + ")");
    }
    s.num_blocks = static_cast<int>(std::min<double>(blocks, std::numeric_limits<int>::max()));
  }
  s.kv_pool.reserve(bytes_per_block * s.num_blocks);
  check_cuda(cudaMemset(s.kv_pool.get(), 0, bytes_per_block * s.num_blocks), "cudaMemset (KV)");
  s.num_cpu_blocks = std::max(options.num_cpu_blocks, 0);
  if (s.num_cpu_blocks > 0) s.swap_pool.reserve(bytes_per_block * s.num_cpu_blocks);

  std::vector<void*> buffers(2 * c.num_hidden_layers);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const kc::KvCacheLayout layer = s.layer_cache(l);
    buffers[2 * l] = layer.key;
    buffers[2 * l + 1] = layer.value;
  }
  s.kv_buffer_ptrs.reserve(buffers.size() * sizeof(void*));
  check_cuda(cudaMemcpy(s.kv_buffer_ptrs.get(), buffers.data(), buffers.size() * sizeof(void*),
                        cudaMemcpyHostToDevice),
             "cudaMemcpy (KV pointers)");
  // The set-up ran on the legacy default stream, which the non-blocking compute stream does
  // not wait for.
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize (set-up)");
}

CudaExecutor::~CudaExecutor() = default;

const model::ModelConfig& CudaExecutor::model_config() const { return impl_->config; }
int CudaExecutor::num_device_blocks() const { return impl_->num_blocks; }
int CudaExecutor::num_cpu_blocks() const { return impl_->num_cpu_blocks; }
int CudaExecutor::block_size() const { return impl_->options.block_size; }
size_t CudaExecutor::kv_bytes_per_block() const {
  return 2 * static_cast<size_t>(impl_->config.num_hidden_layers) * impl_->block_bytes;
}
std::string CudaExecutor::weight_dtype() const { return kc::dtype_name(impl_->weight_dtype); }
std::string CudaExecutor::kv_cache_dtype() const { return kc::dtype_name(impl_->kv_dtype); }
std::string CudaExecutor::device_name() const { return impl_->device_name; }

// Swaps on the copy stream after the compute stream's earlier work (a swap-out reads blocks the
// previous step wrote); the compute stream then waits for every swap, since blocks swapped out
// may be this step's destinations and swapped-in blocks are read by it. Copy-on-write runs on
// the compute stream.
void CudaExecutor::Impl::apply_block_copies(const StepInput& input) {
  const int layers = config.num_hidden_layers;
  auto check_copy = [](const cache::BlockCopy& copy, int src_limit, int dst_limit,
                       const char* what) {
    if (copy.src < 0 || copy.src >= src_limit || copy.dst < 0 || copy.dst >= dst_limit) {
      throw std::out_of_range(std::string(what) + " (" + std::to_string(copy.src) + " -> " +
                              std::to_string(copy.dst) + ") outside the block pools");
    }
  };
  if (!input.swap_out.empty() || !input.swap_in.empty()) {
    check_cuda(cudaEventRecord(compute_done, compute), "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(copy, compute_done, 0), "cudaStreamWaitEvent");
    const size_t device_pool = block_bytes * num_blocks;
    const size_t host_pool = block_bytes * num_cpu_blocks;
    for (const cache::BlockCopy& c : input.swap_out) {
      check_copy(c, num_blocks, num_cpu_blocks, "swap-out");
      for (int b = 0; b < 2 * layers; ++b) {
        check_cuda(cudaMemcpyAsync(swap_pool.get() + b * host_pool + c.dst * block_bytes,
                                   kv_pool.get<char>() + b * device_pool + c.src * block_bytes,
                                   block_bytes, cudaMemcpyDeviceToHost, copy),
                   "cudaMemcpyAsync (swap out)");
      }
    }
    for (const cache::BlockCopy& c : input.swap_in) {
      check_copy(c, num_cpu_blocks, num_blocks, "swap-in");
      for (int b = 0; b < 2 * layers; ++b) {
        check_cuda(cudaMemcpyAsync(kv_pool.get<char>() + b * device_pool + c.dst * block_bytes,
                                   swap_pool.get() + b * host_pool + c.src * block_bytes,
                                   block_bytes, cudaMemcpyHostToDevice, copy),
                   "cudaMemcpyAsync (swap in)");
      }
    }
    check_cuda(cudaEventRecord(copy_done, copy), "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(compute, copy_done, 0), "cudaStreamWaitEvent");
  }
  if (!input.block_copies.empty()) {
    std::vector<int32_t> pairs;
    for (const cache::BlockCopy& c : input.block_copies) {
      check_copy(c, num_blocks, num_blocks, "block copy");
      pairs.push_back(c.src);
      pairs.push_back(c.dst);
    }
    UploadPack pack;
    pack.add(pairs);
    pack.upload(sample_metadata_pinned, sample_metadata, compute);
    check_cuda(
        kc::copy_blocks(kv_buffer_ptrs.get<void*>(), 2 * layers, sample_metadata.get<int32_t>(),
                        static_cast<int>(pairs.size() / 2), block_bytes, compute),
        "copy_blocks");
    // The pinned staging area is reused by the sampler this step: finish the upload first.
    check_cuda(cudaStreamSynchronize(compute), "cudaStreamSynchronize");
  }
}

void CudaExecutor::Impl::forward(const model::ForwardBatch& batch) {
  const model::ModelConfig& c = config;
  const int num_tokens = batch.num_tokens();
  const int hidden = c.hidden_size;
  const int head_dim = c.head_dim;
  const int num_out = static_cast<int>(batch.logits_indices.size());
  reserve_workspace(std::max(num_tokens, token_capacity), std::max(num_out, row_capacity));

  for (int32_t id : batch.token_ids) {
    if (id < 0 || id >= c.vocab_size) {
      throw std::out_of_range("token id " + std::to_string(id) + " outside the vocabulary of " +
                              std::to_string(c.vocab_size));
    }
  }
  for (int32_t block : batch.block_tables) {
    // kNoBlock: released by the sliding window; the kernels start at each row's window.
    if (block < cache::kNoBlock || block >= num_blocks) {
      throw std::out_of_range("block " + std::to_string(block) + " outside the KV pool of " +
                              std::to_string(num_blocks) + " blocks");
    }
  }

  const int group = c.num_attention_heads / c.num_key_value_heads;
  const std::vector<int32_t> work =
      kc::attention_work_items(batch.query_start_loc.data(), batch.num_seqs(), group);
  const int num_work_items = static_cast<int>(work.size() / 2);
  const int max_seq_len = *std::max_element(batch.seq_lens.begin(), batch.seq_lens.end());
  // Split-K when the context is long and fewer than 2 blocks per SM would otherwise run (on
  // the H200, batch 64 x 8 KV heads at 4096 tokens reads K/V faster unsplit: 2.67 TB/s against
  // 2.50 split in 1024-token partitions).
  int partition_size = 0;
  const int partition = options.attention_partition_size;
  if (partition > 0 && max_seq_len >= 2 * partition &&
      static_cast<int64_t>(num_work_items) * c.num_key_value_heads < 2 * num_sms) {
    partition_size = partition;
    const size_t rows = static_cast<size_t>(num_tokens) * c.num_attention_heads *
                        kc::attention_num_partitions(max_seq_len, partition);
    partial_out.reserve(rows * head_dim * 4);
    partial_max.reserve(rows * 4);
    partial_sum.reserve(rows * 4);
  }

  UploadPack pack;
  const size_t off_ids = pack.add(batch.token_ids);
  const size_t off_pos = pack.add(batch.positions);
  const size_t off_slots = pack.add(batch.slot_mapping);
  const size_t off_qsl = pack.add(batch.query_start_loc);
  const size_t off_lens = pack.add(batch.seq_lens);
  const size_t off_tables = pack.add(batch.block_tables);
  const size_t off_work = pack.add(work);
  const size_t off_logit_rows = pack.add(batch.logits_indices);
  // LongRoPE picks a sequence's frequencies by its length, as the CPU does.
  std::vector<int32_t> uses_long;
  if (rope_global.inv_freq_long != nullptr) {
    uses_long.resize(static_cast<size_t>(num_tokens));
    for (int s = 0; s < batch.num_seqs(); ++s) {
      std::fill(uses_long.begin() + batch.query_start_loc[s],
                uses_long.begin() + batch.query_start_loc[s + 1],
                batch.seq_lens[s] > rope_long_after ? 1 : 0);
    }
  }
  const size_t off_uses_long = pack.add(uses_long);
  pack.upload(metadata_pinned, metadata, compute);
  const char* md = metadata.get<char>();
  auto at = [md](size_t offset) { return md + offset; };

  float* xf = x.get<float>();
  float* hf = h.get<float>();

  check_cuda(kc::embedding(reinterpret_cast<const int32_t*>(at(off_ids)), embed_tokens.get(),
                           weight_dtype, xf, num_tokens, hidden, compute),
             "embedding");
  if (c.embedding_multiplier != 1.0f) {
    check_cuda(kc::scale(xf, int64_t{num_tokens} * hidden, c.embedding_multiplier, compute),
               "scale (embedding)");
  }

  kc::AttentionParams attention;
  attention.query = q.get<float>();
  attention.out = attn.get<float>();
  attention.query_start_loc = reinterpret_cast<const int32_t*>(at(off_qsl));
  attention.seq_lens = reinterpret_cast<const int32_t*>(at(off_lens));
  attention.block_tables = reinterpret_cast<const int32_t*>(at(off_tables));
  attention.work_items = reinterpret_cast<const int32_t*>(at(off_work));
  attention.num_work_items = num_work_items;
  attention.num_tokens = num_tokens;
  attention.num_seqs = batch.num_seqs();
  attention.max_blocks_per_seq = batch.max_blocks_per_seq;
  attention.num_heads = c.num_attention_heads;
  attention.scale = c.softmax_scale();
  attention.logit_softcap = c.attn_logit_softcap;
  attention.max_seq_len = max_seq_len;
  attention.partition_size = partition_size;
  attention.partial_out = partial_out.get<float>();
  attention.partial_max = partial_max.get<float>();
  attention.partial_sum = partial_sum.get<float>();
  const int32_t* positions = reinterpret_cast<const int32_t*>(at(off_pos));
  const int64_t* slots = reinterpret_cast<const int64_t*>(at(off_slots));
  step_uses_long =
      uses_long.empty() ? nullptr : reinterpret_cast<const int32_t*>(at(off_uses_long));

  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const LayerWeights& w = layers[l];
    check_cuda(kc::rms_norm(xf, w.input_norm.get<float>(), hf, num_tokens, hidden, c.rms_norm_eps,
                            compute),
               "rms_norm");
    attention_block(w, attention, positions, slots, num_tokens, l);
    check_cuda(
        kc::rms_norm(xf, w.post_norm.get<float>(), hf, num_tokens, hidden, c.rms_norm_eps, compute),
        "rms_norm");
    mlp_block(w, num_tokens);
  }

  if (num_out == 0) return;
  float* sel = selected.get<float>();
  check_cuda(kc::gather_rows(xf, reinterpret_cast<const int32_t*>(at(off_logit_rows)), sel, num_out,
                             hidden, compute),
             "gather_rows");
  check_cuda(
      kc::rms_norm(sel, final_norm.get<float>(), sel, num_out, hidden, c.rms_norm_eps, compute),
      "rms_norm");
  const void* head = lm_head.bytes() > 0 ? lm_head.get() : embed_tokens.get();
  gemm(gemm_input(sel, int64_t{num_out} * hidden), head, logits.get<float>(), num_out, c.vocab_size,
       hidden, false);
  if (c.final_logit_softcap > 0.0f) {
    check_cuda(kc::soft_cap(logits.get<float>(), int64_t{num_out} * c.vocab_size,
                            c.final_logit_softcap, compute),
               "soft_cap (logits)");
  }
}

// q/k/v in one GEMM (split with the bias added), the family's q/k norms and RoPE, the cache
// write, attention, and the output projection added to the residual.
void CudaExecutor::Impl::attention_block(const LayerWeights& w, kc::AttentionParams& attention,
                                         const int32_t* positions, const int64_t* slots,
                                         int num_tokens, int layer) {
  const model::ModelConfig& c = config;
  const int hidden = c.hidden_size;
  const int head_dim = c.head_dim;
  const int q_width = c.num_attention_heads * head_dim;
  const int kv_width = c.num_key_value_heads * head_dim;
  float* qf = q.get<float>();
  float* kf = k.get<float>();
  gemm(gemm_input(h.get<float>(), int64_t{num_tokens} * hidden), w.wqkv.get(), qkv.get<float>(),
       num_tokens, q_width + 2 * kv_width, hidden, false);
  check_cuda(kc::split_qkv(qkv.get<float>(), optional_ptr(w.qkv_bias), qf, kf, v.get<float>(),
                           num_tokens, q_width, kv_width, compute),
             "split_qkv");
  if (w.q_norm.bytes() > 0) {
    // Per head: rows of head_dim.
    check_cuda(kc::rms_norm(qf, w.q_norm.get<float>(), qf, num_tokens * c.num_attention_heads,
                            head_dim, c.rms_norm_eps, compute),
               "rms_norm (q)");
    check_cuda(kc::rms_norm(kf, w.k_norm.get<float>(), kf, num_tokens * c.num_key_value_heads,
                            head_dim, c.rms_norm_eps, compute),
               "rms_norm (k)");
  }
  if (w.settings.use_rope) {
    kc::RopeArgs rope = w.settings.local_rope ? rope_local : rope_global;
    if (!w.settings.local_rope) rope.uses_long = step_uses_long;
    check_cuda(kc::rope_rotate_half_partial(qf, kf, positions, num_tokens, c.num_attention_heads,
                                            c.num_key_value_heads, head_dim, rope, compute),
               "rope_rotate_half_partial");
  }
  attention.cache = layer_cache(layer);
  attention.sliding_window = w.settings.sliding_window;
  check_cuda(kc::write_kv(kf, v.get<float>(), slots, num_tokens, attention.cache, compute),
             "write_kv");
  check_cuda(kc::paged_attention(attention, compute), "paged_attention");
  add_projection(gemm_input(attn.get<float>(), int64_t{num_tokens} * q_width), w.wo, w.o_bias,
                 w.post_attention_norm, num_tokens, q_width);
}

// gate and up in one GEMM, the gated activation (bias included), and the down projection
// added to the residual.
void CudaExecutor::Impl::mlp_block(const LayerWeights& w, int num_tokens) {
  const model::ModelConfig& c = config;
  const int hidden = c.hidden_size;
  const int ffn = c.intermediate_size;
  gemm(gemm_input(h.get<float>(), int64_t{num_tokens} * hidden), w.w_gate_up.get(),
       gate_up.get<float>(), num_tokens, 2 * ffn, hidden, false);
  const kc::GatedActivation activation = c.activation == model::Activation::kGeluTanh
                                             ? kc::GatedActivation::kGeluTanh
                                             : kc::GatedActivation::kSilu;
  check_cuda(kc::gated_activation(gate_up.get<float>(), optional_ptr(w.gate_up_bias),
                                  act.get<float>(), num_tokens, ffn, activation, compute),
             "gated_activation");
  add_projection(gemm_input(act.get<float>(), int64_t{num_tokens} * ffn), w.w_down, w.down_bias,
                 w.post_mlp_norm, num_tokens, ffn);
}

void CudaExecutor::Impl::add_projection(const void* in, const DeviceBuffer& weight,
                                        const DeviceBuffer& bias, const DeviceBuffer& post_norm,
                                        int num_tokens, int in_width) {
  const model::ModelConfig& c = config;
  const int hidden = c.hidden_size;
  float* xf = x.get<float>();
  if (post_norm.bytes() == 0) {
    // The residual add folded into the GEMM (beta = 1), then the bias.
    gemm(in, weight.get(), xf, num_tokens, hidden, in_width, true);
    if (bias.bytes() > 0) {
      check_cuda(kc::add_bias(xf, bias.get<float>(), num_tokens, hidden, compute), "add_bias");
    }
    return;
  }
  // Gemma's sandwich norm: the projection is normalised before it joins the residual.
  float* pf = proj.get<float>();
  gemm(in, weight.get(), pf, num_tokens, hidden, in_width, false);
  if (bias.bytes() > 0) {
    check_cuda(kc::add_bias(pf, bias.get<float>(), num_tokens, hidden, compute), "add_bias");
  }
  check_cuda(
      kc::rms_norm(pf, post_norm.get<float>(), pf, num_tokens, hidden, c.rms_norm_eps, compute),
      "rms_norm (post)");
  check_cuda(kc::add(xf, pf, int64_t{num_tokens} * hidden, compute), "add (residual)");
}

StepOutput CudaExecutor::Impl::sample(const StepInput& input, int num_rows) {
  const int vocab = config.vocab_size;
  StepOutput output;
  output.step_id = input.step_id;
  output.seqs.resize(input.seqs.size());
  if (num_rows == 0) {
    // Nothing to sample (prompt chunks only); still finish the step, so the next one may reuse
    // the pinned staging buffers and errors surface here.
    check_cuda(cudaStreamSynchronize(compute), "cudaStreamSynchronize (step)");
    return output;
  }

  // Penalties and bans, one entry per (row, token).
  std::vector<kc::LogitAdjustment> adjustments;
  // Sort segments: non-greedy sampling rows (scaled by temperature) and top-logprob rows (raw).
  std::vector<int32_t> seg_rows;
  std::vector<float> seg_temperatures;
  std::vector<kc::SampleDraw> draws;
  struct TopRequest {
    size_t seq;
    int segment;
    int row;
    int k;
  };
  std::vector<TopRequest> tops;
  StepMasks masks;
  masks.words_per_row = static_cast<int>(model::grammar::bitmask_words(vocab));
  std::vector<GrammarRowState*> row_grammars;  // [row], null when unconstrained
  int row = 0;
  for (size_t i = 0; i < input.seqs.size(); ++i) {
    const ScheduledSequence& seq = input.seqs[i];
    if (!seq.sample) continue;
    if (!seq.sampling) {
      throw std::invalid_argument("CudaExecutor: sequence " + std::to_string(seq.seq_id) +
                                  " samples but has no sampling params");
    }
    const model::SamplingParams& p = *seq.sampling;
    GrammarRowState* grammar = p.grammar ? &grammars.sync(seq, input.step_id) : nullptr;
    row_grammars.push_back(grammar);
    const bool bans_apply = grammar == nullptr || masks.add(*grammar, seq, row, vocab);
    if ((bans_apply && !seq.banned_token_ids.empty()) || p.has_penalties()) {
      std::map<int32_t, kc::LogitAdjustment> by_token;
      auto entry = [&](int32_t id) -> kc::LogitAdjustment& {
        kc::LogitAdjustment& a = by_token[id];
        a.row = row;
        a.token = id;
        a.repetition_penalty = p.repetition_penalty;
        a.presence_penalty = p.presence_penalty;
        a.frequency_penalty = p.frequency_penalty;
        return a;
      };
      auto in_vocab = [vocab](int32_t id) { return id >= 0 && id < vocab; };
      if (p.repetition_penalty != 1.0f) {
        for (int32_t id : seq.penalty_prompt_ids)
          if (in_vocab(id)) entry(id).repeated = 1;
        for (int32_t id : seq.penalty_output_ids)
          if (in_vocab(id)) entry(id).repeated = 1;
      }
      if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
        for (int32_t id : seq.penalty_output_ids)
          if (in_vocab(id)) ++entry(id).count;
      }
      if (bans_apply) {
        for (int32_t id : seq.banned_token_ids)
          if (in_vocab(id)) entry(id).banned = 1;
      }
      for (const auto& [id, a] : by_token) adjustments.push_back(a);
    }
    if (!p.is_greedy() && !seq.sample_seeds.empty()) {
      const int segment = static_cast<int>(seg_rows.size());
      seg_rows.push_back(row);
      seg_temperatures.push_back(p.temperature);
      for (uint64_t seed : seq.sample_seeds) {
        kc::SampleDraw d;
        d.segment = segment;
        d.row = row;
        d.top_k = p.top_k;
        d.top_p = p.top_p;
        d.min_p = p.min_p;
        d.seed = seed;
        d.step = seq.sample_step;
        draws.push_back(d);
      }
    }
    if (seq.num_top_logprobs > 0) {
      tops.push_back(
          {i, static_cast<int>(seg_rows.size()), row, std::min(seq.num_top_logprobs, vocab)});
      seg_rows.push_back(row);
      seg_temperatures.push_back(1.0f);
    }
    ++row;
  }

  grammars.prune(input.step_id);

  const int num_segments = static_cast<int>(seg_rows.size());
  const int num_draws = static_cast<int>(draws.size());
  reserve_sort(num_segments);
  draw_tokens.reserve(std::max<size_t>(draws.size(), 1) * 4);
  draw_logprobs.reserve(std::max<size_t>(draws.size(), 1) * 4);

  UploadPack pack;
  const size_t off_adj = pack.add(adjustments);
  const size_t off_seg_rows = pack.add(seg_rows);
  const size_t off_seg_temps = pack.add(seg_temperatures);
  const size_t off_draws = pack.add(draws);
  std::vector<int32_t> all_rows(num_rows);
  for (int r = 0; r < num_rows; ++r) all_rows[r] = r;
  const size_t off_all_rows = pack.add(all_rows);
  const size_t off_mask_rows = pack.add(masks.rows);
  const size_t off_mask_allowed = pack.add(masks.allowed_ids);
  const size_t off_mask_words = pack.add(masks.words);
  pack.upload(sample_metadata_pinned, sample_metadata, compute);
  const char* md = sample_metadata.get<char>();

  float* lg = logits.get<float>();
  check_cuda(kc::apply_token_bitmask(
                 lg, vocab, reinterpret_cast<const int32_t*>(md + off_mask_rows),
                 reinterpret_cast<const uint32_t*>(md + off_mask_words), masks.words_per_row,
                 reinterpret_cast<const int32_t*>(md + off_mask_allowed),
                 static_cast<int>(masks.rows.size()), compute),
             "apply_token_bitmask");
  check_cuda(
      kc::adjust_logits(lg, vocab, reinterpret_cast<const kc::LogitAdjustment*>(md + off_adj),
                        static_cast<int>(adjustments.size()), compute),
      "adjust_logits");
  double* lse_d = lse.get<double>();
  check_cuda(kc::log_sum_exp_rows(lg, num_rows, vocab, lse_d, compute), "log_sum_exp_rows");
  int32_t* argmax_d = argmax_tokens.get<int32_t>();
  check_cuda(kc::argmax_rows(lg, num_rows, vocab, argmax_d, compute), "argmax_rows");
  check_cuda(
      kc::token_logprobs(lg, vocab, lse_d, reinterpret_cast<const int32_t*>(md + off_all_rows),
                         argmax_d, num_rows, greedy_logprobs.get<float>(), compute),
      "token_logprobs");
  kc::SortBuffers sort;
  sort.keys_in = sort_keys_in.get<float>();
  sort.keys_out = sort_keys_out.get<float>();
  sort.ids_in = sort_ids_in.get<int32_t>();
  sort.ids_out = sort_ids_out.get<int32_t>();
  sort.offsets = sort_offsets.get<int32_t>();
  sort.temp = sort_temp.get();
  sort.temp_bytes = sort_temp.bytes();
  check_cuda(kc::sort_segments(lg, vocab, reinterpret_cast<const int32_t*>(md + off_seg_rows),
                               reinterpret_cast<const float*>(md + off_seg_temps), num_segments,
                               sort, compute),
             "sort_segments");
  check_cuda(
      kc::sample_sorted(sort.keys_out, sort.ids_out, vocab,
                        reinterpret_cast<const kc::SampleDraw*>(md + off_draws), num_draws, lg,
                        lse_d, draw_tokens.get<int32_t>(), draw_logprobs.get<float>(), compute),
      "sample_sorted");

  // Results back to the host: argmax tokens and their logprobs, draws, lse, top candidates.
  size_t top_total = 0;
  for (const TopRequest& t : tops) top_total += t.k;
  const size_t results_bytes = num_rows * (4 + 4 + 8) + draws.size() * 8 + top_total * 8 + 64;
  results_pinned.reserve(results_bytes);
  char* res = results_pinned.get();
  int32_t* h_argmax = reinterpret_cast<int32_t*>(res);
  float* h_greedy_lp = reinterpret_cast<float*>(h_argmax + num_rows);
  double* h_lse = reinterpret_cast<double*>(res + ((num_rows * 8 + 7) / 8) * 8);
  int32_t* h_draw_tokens = reinterpret_cast<int32_t*>(h_lse + num_rows);
  float* h_draw_lp = reinterpret_cast<float*>(h_draw_tokens + draws.size());
  float* h_top_keys = h_draw_lp + draws.size();
  int32_t* h_top_ids = reinterpret_cast<int32_t*>(h_top_keys + top_total);
  auto d2h = [this](void* dst, const void* src, size_t bytes) {
    if (bytes == 0) return;
    check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, compute),
               "cudaMemcpyAsync (results)");
  };
  d2h(h_argmax, argmax_d, num_rows * 4);
  d2h(h_greedy_lp, greedy_logprobs.get(), num_rows * 4);
  d2h(h_lse, lse_d, num_rows * 8);
  d2h(h_draw_tokens, draw_tokens.get(), draws.size() * 4);
  d2h(h_draw_lp, draw_logprobs.get(), draws.size() * 4);
  size_t top_offset = 0;
  for (const TopRequest& t : tops) {
    const size_t seg = static_cast<size_t>(t.segment) * vocab;
    d2h(h_top_keys + top_offset, sort.keys_out + seg, t.k * 4);
    d2h(h_top_ids + top_offset, sort.ids_out + seg, t.k * 4);
    top_offset += t.k;
  }
  check_cuda(cudaStreamSynchronize(compute), "cudaStreamSynchronize (step)");

  row = 0;
  size_t draw = 0;
  top_offset = 0;
  size_t top_index = 0;
  for (size_t i = 0; i < input.seqs.size(); ++i) {
    const ScheduledSequence& seq = input.seqs[i];
    if (!seq.sample) continue;
    SequenceStepOutput& out = output.seqs[i];
    if (seq.sampling->is_greedy()) {
      for (size_t n = 0; n < seq.sample_seeds.size(); ++n) {
        out.samples.push_back({h_argmax[row], h_greedy_lp[row]});
      }
    } else {
      for (size_t n = 0; n < seq.sample_seeds.size(); ++n, ++draw) {
        out.samples.push_back({h_draw_tokens[draw], h_draw_lp[draw]});
      }
    }
    if (row_grammars[row] != nullptr) {
      out.grammar_ended = advance_on_draws(*row_grammars[row], out.samples);
    }
    if (top_index < tops.size() && tops[top_index].seq == i) {
      const TopRequest& t = tops[top_index++];
      for (int n = 0; n < t.k; ++n) {
        out.top_logprobs.push_back(
            {h_top_ids[top_offset + n],
             static_cast<float>(static_cast<double>(h_top_keys[top_offset + n]) - h_lse[row])});
      }
      top_offset += t.k;
    }
    ++row;
  }
  return output;
}

StepOutput CudaExecutor::execute(const StepInput& input) {
  Impl& s = *impl_;
  // The current device is per host thread, and the engine calls this from its executor thread.
  check_cuda(cudaSetDevice(s.options.device), "cudaSetDevice");
  s.apply_block_copies(input);
  if (input.seqs.empty()) {
    check_cuda(cudaStreamSynchronize(s.compute), "cudaStreamSynchronize");
    StepOutput output;
    output.step_id = input.step_id;
    return output;
  }
  model::ForwardBatch batch;
  for (const ScheduledSequence& seq : input.seqs) {
    if (seq.new_token_ids.empty()) {
      throw std::invalid_argument("a scheduled sequence has no new tokens");
    }
    const int64_t needed =
        int64_t{seq.num_computed_tokens} + static_cast<int64_t>(seq.new_token_ids.size());
    if (static_cast<int64_t>(seq.block_table.size()) * s.options.block_size < needed) {
      throw std::invalid_argument("a block table covers fewer tokens than the sequence has");
    }
    batch.add_sequence(seq.new_token_ids, seq.num_computed_tokens, seq.block_table,
                       s.options.block_size, seq.sample);
  }
  s.forward(batch);
  return s.sample(input, static_cast<int>(batch.logits_indices.size()));
}

}  // namespace pagedserve::actors
