// CudaExecutor: the Executor on one NVIDIA GPU. Weights live on the device (float32, float16 or
// bfloat16; linear layers through cuBLAS with float32 accumulation), the KV cache is one paged
// pool in device memory (float32, float16, bfloat16 or fp8 e4m3) sized from free memory, and
// swap space is pinned host memory reached by cudaMemcpyAsync on a dedicated copy stream
// ordered against the compute stream with CUDA events. Sampling runs on the device with the
// CPU sampler's semantics. Plain C++ header (the CUDA types stay in the .cpp), so engine code
// can include it without CUDA headers. Lives on the executor thread; not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "actors/executor.h"
#include "model/loader/llama_weights.h"

namespace pagedserve::actors {

struct CudaExecutorOptions {
  int device = 0;
  int block_size = 16;
  int num_device_blocks = 0;            // 0: as many as gpu_memory_utilization leaves room for
  int num_cpu_blocks = 0;               // pinned host swap blocks
  double gpu_memory_utilization = 0.9;  // share of the device's total memory this process may use
  // "auto" (the model's torch_dtype; float32 stays float32), "float32", "float16", "bfloat16".
  std::string weight_dtype = "auto";
  // "auto" (the weight dtype), "float32", "float16", "bfloat16", "fp8" (e4m3, scale 1).
  std::string kv_cache_dtype = "auto";
  // Workspace is reserved up front for these (and grown if a step ever needs more).
  int max_num_batched_tokens = 8192;
  int max_num_seqs = 256;
  // Context tokens per split-K attention partition; 0 turns split-K off.
  int attention_partition_size = 512;
  // Decode steps replay CUDA graphs captured per padded shape (batch rounded up to a power of
  // two, up to min(max_num_seqs, max_num_batched_tokens)); false runs every step eagerly
  // (`--enforce-eager`, as vLLM's flag).
  bool cuda_graphs = true;
};

// Devices the CUDA runtime sees; 0 when there is none or no usable driver.
int cuda_device_count();

// Bytes per KV-cache element the executor will use for these options and the model's
// torch_dtype, "auto" resolved exactly as the executor resolves it (so the engine sizes the
// pool with the executor's names). Throws std::invalid_argument for a name it refuses. Needs
// no device.
size_t cuda_kv_dtype_bytes(const CudaExecutorOptions& options, const std::string& torch_dtype);

// Where the CUDA executor's steps spent their time, summed since it started over the steps
// that sampled or computed rows (`steps`). Host times are wall clock on the executor thread;
// GPU times are CUDA events on the compute stream. At batch 1 a decode step's GPU work is
// short enough that the host's part decides the step: these say which part.
struct CudaStepTimes {
  uint64_t steps = 0;
  double host_prepare_s = 0;  // execute() until the forward is enqueued: block copies, checks,
                              // the step plan, metadata upload, launches or the graph replay
  double host_sample_s = 0;   // sampling set-up and launches, until the step's final wait
  double wait_s = 0;          // blocked in that wait: the GPU still running the step
  double host_results_s = 0;  // the results unpacked into the StepOutput after it
  // Stream time between events: the kernels and any gaps where the GPU waited for the host
  // to enqueue more (an eager batch-1 forward is launch-bound), so gpu_forward_s close to
  // host_prepare_s says the launches, not the kernels, set the pace.
  double gpu_forward_s = 0;   // the forward on the GPU
  double gpu_sampling_s = 0;  // sampling kernels and result copies on the GPU
};

class CudaExecutor final : public Executor {
 public:
  // Throws std::runtime_error naming the CUDA or cuBLAS failure (no device, out of memory) and
  // std::invalid_argument for bad options.
  // From float32 Llama weights (tests and benchmarks build these in memory).
  CudaExecutor(model::LlamaWeights weights, const CudaExecutorOptions& options);
  // From an opened checkpoint of any supported family (Hugging Face or GGUF; quantized GGUF
  // tensors are dequantized to the weight dtype). Refuses what the CUDA forward does not model
  // (head_dims over 128 but 256) with std::invalid_argument naming it.
  CudaExecutor(const model::LlamaCheckpoint& checkpoint, const CudaExecutorOptions& options);
  ~CudaExecutor() override;
  CudaExecutor(const CudaExecutor&) = delete;
  CudaExecutor& operator=(const CudaExecutor&) = delete;

  StepOutput execute(const StepInput& input) override;
  const model::ModelConfig& model_config() const override;
  int num_device_blocks() const override;
  int num_cpu_blocks() const override;
  int block_size() const override;

  // Bytes one KV block takes across all layers (keys and values) in the cache dtype.
  size_t kv_bytes_per_block() const;
  std::string weight_dtype() const;
  std::string kv_cache_dtype() const;
  std::string device_name() const;
  // Decode steps that replayed a CUDA graph so far.
  size_t graph_launches() const;
  CudaStepTimes step_times() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pagedserve::actors
