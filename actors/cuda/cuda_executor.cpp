// CudaExecutor: weights upload and conversion, the KV pool, the forward pass as a sequence of
// kernel launches and cuBLAS GEMMs on one compute stream (decode steps replayed as CUDA
// graphs) and swaps on a copy stream; sampling is in cuda_sampling.cpp. Every CUDA status is
// checked; a failure throws std::runtime_error naming the call.
#include "actors/cuda/cuda_executor.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "actors/cuda/cuda_executor_impl.h"
#include "actors/grammar_rows.h"
#include "kernels/cuda/cuda_kernels.h"
#include "model/decode_graph_plan.h"
#include "model/llama_model.h"
#include "model/rope_frequencies.h"

namespace pagedserve::actors {
namespace {

using namespace cuda_detail;

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
  if (name == "int8") {
    throw std::invalid_argument(
        "--kv-cache-dtype int8 is the CPU executor's; the CUDA executor's 8-bit cache is fp8");
  }
  throw std::invalid_argument(
      "--kv-cache-dtype must be auto, float32, float16, bfloat16 or fp8, got '" + name + "'");
}

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

HostLayer host_layer(const model::LlamaLayerTensors& t, float norm_offset) {
  HostLayer h;
  h.input_norm = model::checkpoint_norm_f32(t.input_norm, norm_offset);
  h.post_norm = model::checkpoint_norm_f32(t.post_norm, norm_offset);
  h.post_attention_norm = model::checkpoint_norm_f32(t.post_attention_norm, norm_offset);
  h.post_mlp_norm = model::checkpoint_norm_f32(t.post_mlp_norm, norm_offset);
  h.q_norm = model::checkpoint_norm_f32(t.q_norm, norm_offset);
  h.k_norm = model::checkpoint_norm_f32(t.k_norm, norm_offset);
  h.qkv_bias = model::stacked_f32({t.q_bias, t.k_bias, t.v_bias});
  h.o_bias = model::stacked_f32({t.o_bias});
  h.gate_up_bias = model::stacked_f32({t.gate_bias, t.up_bias});
  h.down_bias = model::stacked_f32({t.down_bias});
  h.wqkv = t.wqkv ? model::to_f32(*t.wqkv) : model::stacked_f32({t.wq, t.wk, t.wv});
  h.wo = model::to_f32(*t.wo);
  h.w_gate_up = t.w_gate_up ? model::to_f32(*t.w_gate_up) : model::stacked_f32({t.w_gate, t.w_up});
  h.w_down = model::to_f32(*t.w_down);
  return h;
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
  for (cudaEvent_t* e : {&forward_start, &forward_end, &step_end}) {
    check_cuda(cudaEventCreate(e), "cudaEventCreate (timing)");
  }
  check_cublas(cublasCreate(&cublas), "cublasCreate");
  check_cublas(cublasSetStream(cublas, compute), "cublasSetStream");
  // cuBLAS must not allocate while a decode graph is captured: its workspace is given now.
  cublas_workspace.reserve(size_t{32} << 20);
  check_cublas(cublasSetWorkspace(cublas, cublas_workspace.get(), cublas_workspace.bytes()),
               "cublasSetWorkspace");

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
  d.settings = config.layer_config(l);
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
  s.upload_weight(s.lm_head, model::stacked_f32({checkpoint.lm_head}), s.weight_dtype, staging);
  s.upload_weight(s.final_norm, model::checkpoint_norm_f32(checkpoint.final_norm, offset),
                  DType::kFloat32, staging);
  s.layers = std::vector<LayerWeights>(checkpoint.layers.size());
  for (size_t l = 0; l < checkpoint.layers.size(); ++l) {
    s.upload_layer(l, host_layer(checkpoint.layers[l], offset), staging);
  }
  s.finish_set_up();
}

// Workspace for the largest step the scheduler may send, then the KV pool from what is left.
void CudaExecutor::Impl::finish_set_up() {
  const model::ModelConfig& c = config;
  reserve_workspace(options.max_num_batched_tokens,
                    std::min(options.max_num_seqs, options.max_num_batched_tokens));
  reserve_sort(1);
  block_bytes = static_cast<size_t>(c.num_key_value_heads) * options.block_size * c.head_dim *
                kc::dtype_size(kv_dtype);
  const size_t bytes_per_block = 2 * static_cast<size_t>(c.num_hidden_layers) * block_bytes;
  if (options.num_device_blocks > 0) {
    num_blocks = options.num_device_blocks;
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
    num_blocks = static_cast<int>(std::min<double>(blocks, std::numeric_limits<int>::max()));
  }
  kv_pool.reserve(bytes_per_block * num_blocks);
  check_cuda(cudaMemset(kv_pool.get(), 0, bytes_per_block * num_blocks), "cudaMemset (KV)");
  num_cpu_blocks = std::max(options.num_cpu_blocks, 0);
  if (num_cpu_blocks > 0) swap_pool.reserve(bytes_per_block * num_cpu_blocks);

  std::vector<void*> buffers(2 * c.num_hidden_layers);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const kc::KvCacheLayout layer = layer_cache(l);
    buffers[2 * l] = layer.key;
    buffers[2 * l + 1] = layer.value;
  }
  kv_buffer_ptrs.reserve(buffers.size() * sizeof(void*));
  check_cuda(cudaMemcpy(kv_buffer_ptrs.get(), buffers.data(), buffers.size() * sizeof(void*),
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
size_t CudaExecutor::graph_launches() const { return impl_->graph_launches; }
CudaStepTimes CudaExecutor::step_times() const { return impl_->times; }

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
  const int max_graph_batch = std::min(options.max_num_seqs, options.max_num_batched_tokens);
  if (options.cuda_graphs && !graphs_failed &&
      model::decode_graph_eligible(batch, max_graph_batch)) {
    run_decode_graph(batch);
    return;
  }
  UploadPack pack;
  const StepPlan plan = plan_step(batch, /*bucket_partitions=*/false, pack);
  pack.upload(metadata_pinned, metadata, compute);
  launch(plan, metadata.get<char>());
}

// The split-K partition for a step (0: none): when the context is long and fewer than 2 blocks
// per SM would otherwise run (on the H200, batch 64 x 8 KV heads at 4096 tokens reads K/V
// faster unsplit: 2.67 TB/s against 2.50 split in 1024-token partitions).
int CudaExecutor::Impl::partition_for(int num_work_items, int max_seq_len) const {
  const int partition = options.attention_partition_size;
  if (partition > 0 && max_seq_len >= 2 * partition &&
      static_cast<int64_t>(num_work_items) * config.num_key_value_heads < 2 * num_sms) {
    return partition;
  }
  return 0;
}

// Packs the step's metadata and sizes the workspace. bucket_partitions rounds a split-K
// partition count up to a power of two (a graph's shape; the extra partitions are empty).
StepPlan CudaExecutor::Impl::plan_step(const model::ForwardBatch& batch, bool bucket_partitions,
                                       UploadPack& pack) {
  const model::ModelConfig& c = config;
  StepPlan plan;
  plan.num_tokens = batch.num_tokens();
  plan.num_seqs = batch.num_seqs();
  plan.num_out = static_cast<int>(batch.logits_indices.size());
  plan.max_blocks_per_seq = batch.max_blocks_per_seq;
  reserve_workspace(std::max(plan.num_tokens, token_capacity),
                    std::max(plan.num_out, row_capacity));

  const int group = c.num_attention_heads / c.num_key_value_heads;
  const std::vector<int32_t> work =
      kc::attention_work_items(batch.query_start_loc.data(), batch.num_seqs(), group);
  plan.num_work_items = static_cast<int>(work.size() / 2);
  plan.max_seq_len = *std::max_element(batch.seq_lens.begin(), batch.seq_lens.end());
  plan.partition_size = partition_for(plan.num_work_items, plan.max_seq_len);
  if (plan.partition_size > 0) {
    if (bucket_partitions) {
      plan.max_seq_len =
          plan.partition_size * model::decode_graph_bucket(kc::attention_num_partitions(
                                    plan.max_seq_len, plan.partition_size));
    }
    const size_t rows = static_cast<size_t>(plan.num_tokens) * c.num_attention_heads *
                        kc::attention_num_partitions(plan.max_seq_len, plan.partition_size);
    bool moved = partial_out.reserve(rows * c.head_dim * 4);
    moved |= partial_max.reserve(rows * 4);
    moved |= partial_sum.reserve(rows * 4);
    if (moved) drop_graphs();
  }

  plan.off_ids = pack.add(batch.token_ids);
  plan.off_pos = pack.add(batch.positions);
  plan.off_slots = pack.add(batch.slot_mapping);
  plan.off_qsl = pack.add(batch.query_start_loc);
  plan.off_lens = pack.add(batch.seq_lens);
  plan.off_tables = pack.add(batch.block_tables);
  plan.off_work = pack.add(work);
  plan.off_logit_rows = pack.add(batch.logits_indices);
  // LongRoPE picks a sequence's frequencies by its length, as the CPU does.
  std::vector<int32_t> uses_long;
  if (rope_global.inv_freq_long != nullptr) {
    uses_long.resize(static_cast<size_t>(plan.num_tokens));
    for (int s = 0; s < batch.num_seqs(); ++s) {
      std::fill(uses_long.begin() + batch.query_start_loc[s],
                uses_long.begin() + batch.query_start_loc[s + 1],
                batch.seq_lens[s] > rope_long_after ? 1 : 0);
    }
    plan.uses_long = true;
  }
  plan.off_uses_long = pack.add(uses_long);
  return plan;
}

// A decode step through the graph of its padded shape, captured on first use. The metadata
// goes to graph_metadata (whose address the graphs hold) before the replay, in stream order.
void CudaExecutor::Impl::run_decode_graph(const model::ForwardBatch& batch) {
  model::DecodeGraphKey key;
  key.batch = model::decode_graph_bucket(batch.num_seqs());
  key.table_width = model::decode_graph_bucket(std::max(batch.max_blocks_per_seq, 1));
  const model::ForwardBatch padded = model::pad_decode_batch(batch, key);
  UploadPack pack;
  const StepPlan plan = plan_step(padded, /*bucket_partitions=*/true, pack);
  key.partition_size = plan.partition_size;
  key.num_partitions = plan.partition_size > 0 ? plan.max_seq_len / plan.partition_size : 1;
  if (pack.upload(metadata_pinned, graph_metadata, compute)) drop_graphs();

  auto it = graphs.find(key);
  if (it == graphs.end()) {
    cudaGraph_t graph = nullptr;
    check_cuda(cudaStreamBeginCapture(compute, cudaStreamCaptureModeThreadLocal),
               "cudaStreamBeginCapture");
    try {
      launch(plan, graph_metadata.get<char>());
    } catch (...) {
      cudaStreamEndCapture(compute, &graph);
      if (graph != nullptr) cudaGraphDestroy(graph);
      cudaGetLastError();
      graphs_failed = true;  // eager from now on
      launch(plan, graph_metadata.get<char>());
      return;
    }
    check_cuda(cudaStreamEndCapture(compute, &graph), "cudaStreamEndCapture");
    cudaGraphExec_t exec = nullptr;
    const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    check_cuda(instantiated, "cudaGraphInstantiate");
    it = graphs.emplace(key, exec).first;
  }
  check_cuda(cudaGraphLaunch(it->second, compute), "cudaGraphLaunch");
  ++graph_launches;
}

// The forward pass's kernels and GEMMs on the compute stream, reading the step's metadata at
// `md` (eager, or recorded into a graph).
void CudaExecutor::Impl::launch(const StepPlan& plan, const char* md) {
  const model::ModelConfig& c = config;
  const int num_tokens = plan.num_tokens;
  const int hidden = c.hidden_size;
  auto at = [md](size_t offset) { return md + offset; };
  float* xf = x.get<float>();
  float* hf = h.get<float>();

  check_cuda(kc::embedding(reinterpret_cast<const int32_t*>(at(plan.off_ids)), embed_tokens.get(),
                           weight_dtype, xf, num_tokens, hidden, compute),
             "embedding");
  if (c.embedding_multiplier != 1.0f) {
    check_cuda(kc::scale(xf, int64_t{num_tokens} * hidden, c.embedding_multiplier, compute),
               "scale (embedding)");
  }

  kc::AttentionParams attention;
  attention.query = q.get<float>();
  attention.out = attn.get<float>();
  attention.query_start_loc = reinterpret_cast<const int32_t*>(at(plan.off_qsl));
  attention.seq_lens = reinterpret_cast<const int32_t*>(at(plan.off_lens));
  attention.block_tables = reinterpret_cast<const int32_t*>(at(plan.off_tables));
  attention.work_items = reinterpret_cast<const int32_t*>(at(plan.off_work));
  attention.num_work_items = plan.num_work_items;
  attention.num_tokens = num_tokens;
  attention.num_seqs = plan.num_seqs;
  attention.max_blocks_per_seq = plan.max_blocks_per_seq;
  attention.num_heads = c.num_attention_heads;
  attention.scale = c.softmax_scale();
  attention.logit_softcap = c.attn_logit_softcap;
  attention.max_seq_len = plan.max_seq_len;
  attention.partition_size = plan.partition_size;
  attention.partial_out = partial_out.get<float>();
  attention.partial_max = partial_max.get<float>();
  attention.partial_sum = partial_sum.get<float>();
  const int32_t* positions = reinterpret_cast<const int32_t*>(at(plan.off_pos));
  const int64_t* slots = reinterpret_cast<const int64_t*>(at(plan.off_slots));
  // LongRoPE's per-token choice of table for this step (global layers only).
  kc::RopeArgs global_rope = rope_global;
  if (plan.uses_long)
    global_rope.uses_long = reinterpret_cast<const int32_t*>(at(plan.off_uses_long));

  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const LayerWeights& w = layers[l];
    check_cuda(kc::rms_norm(xf, w.input_norm.get<float>(), hf, num_tokens, hidden, c.rms_norm_eps,
                            compute),
               "rms_norm");
    attention_block(w, attention, global_rope, positions, slots, num_tokens, l);
    check_cuda(
        kc::rms_norm(xf, w.post_norm.get<float>(), hf, num_tokens, hidden, c.rms_norm_eps, compute),
        "rms_norm");
    mlp_block(w, num_tokens);
  }

  const int num_out = plan.num_out;
  if (num_out == 0) return;
  float* sel = selected.get<float>();
  check_cuda(kc::gather_rows(xf, reinterpret_cast<const int32_t*>(at(plan.off_logit_rows)), sel,
                             num_out, hidden, compute),
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
                                         const kc::RopeArgs& global_rope, const int32_t* positions,
                                         const int64_t* slots, int num_tokens, int layer) {
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
    const kc::RopeArgs& rope = w.settings.local_rope ? rope_local : global_rope;
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

StepOutput CudaExecutor::execute(const StepInput& input) {
  Impl& s = *impl_;
  // The current device is per host thread, and the engine calls this from its executor thread.
  check_cuda(cudaSetDevice(s.options.device), "cudaSetDevice");
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  s.apply_block_copies(input);
  const double copies_s = std::chrono::duration<double>(Clock::now() - start).count();
  if (input.seqs.empty()) {
    check_cuda(cudaStreamSynchronize(s.compute), "cudaStreamSynchronize");
    StepOutput output;
    output.step_id = input.step_id;
    output.times.copies_s = std::chrono::duration<double>(Clock::now() - start).count();
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
  // The events sit outside any graph capture: forward() begins and ends its own.
  check_cuda(cudaEventRecord(s.forward_start, s.compute), "cudaEventRecord (forward start)");
  s.forward(batch);
  check_cuda(cudaEventRecord(s.forward_end, s.compute), "cudaEventRecord (forward end)");
  s.times.host_prepare_s += std::chrono::duration<double>(Clock::now() - start).count();
  StepOutput output = s.sample(input, static_cast<int>(batch.logits_indices.size()));
  output.times.copies_s = copies_s;
  return output;
}

}  // namespace pagedserve::actors
