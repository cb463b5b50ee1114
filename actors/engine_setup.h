// EngineConfig and what both engine fronts (the synchronous LlmEngine and the actor-based
// Engine) build from it: the model, tokenizer and executor, the scheduler and block-manager
// settings with every default resolved, and the one check every request passes on entry.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "actors/executor.h"
#include "actors/scheduler.h"
#include "cache/block_manager.h"
#include "kernels/cpu/kv_dtype.h"
#include "model/linear_weight.h"
#include "model/sampling_params.h"
#include "model/tokenizer/tokenizer.h"

namespace pagedserve::actors {

struct EngineConfig {
  std::filesystem::path model_dir;
  int block_size = 16;    // tokens per KV block
  int num_kv_blocks = 0;  // 0: derive from kv_cache_memory_bytes
  int64_t kv_cache_memory_bytes = int64_t{2} << 30;
  // Whether kv_cache_memory_bytes was asked for (--kv-cache-memory): the CUDA executor then
  // sizes its pool from it instead of from gpu_memory_utilization.
  bool kv_cache_memory_given = false;
  int64_t swap_space_bytes = 0;
  int max_num_seqs = 256;
  int max_model_len = 0;  // 0: the model's max_position_embeddings
  int max_num_batched_tokens = 8192;
  bool enable_prefix_caching = true;
  int num_threads = 0;  // CPU executor threads, counting the executor's own; 0: one per core
  // How the scheduler frees blocks when they run out. Unset: swap when swap_space_bytes > 0
  // (it was set aside for that), else recompute (vLLM v1's only mode). kSwap without swap space
  // is refused.
  std::optional<PreemptionMode> preemption_mode;
  // The KV memory manager: paged, or an Orca-style reserving baseline (cache/kv_allocator.h).
  cache::KvAllocatorKind kv_allocator = cache::KvAllocatorKind::kPaged;
  // Which executor runs the model: "cpu", "cuda", "auto" (cuda when the binary was built with
  // CUDA and a device is visible, else cpu; resolved to "cpu" or "cuda" by set_up_engine), or
  // "sim": the SimExecutor (actors/sim_executor.h) with the cost-model profile at sim_profile;
  // model_dir then only supplies the tokenizer, and the KV pool defaults to the profile's
  // kv_cache_bytes. Its steps take no wall time: only the bench paper replay (virtual clock)
  // gives its timings meaning. Library callers get the CPU unless they ask; the command line
  // defaults to auto.
  std::string device = "cpu";
  std::filesystem::path sim_profile;
  // CUDA only. The KV pool takes what this share of the device's memory leaves after the
  // weights and workspace (unless num_kv_blocks or kv_cache_memory_given is set).
  double gpu_memory_utilization = 0.9;
  bool cuda_graphs = true;     // CUDA only: decode steps replay CUDA graphs (--enforce-eager: off)
  std::string dtype = "auto";  // CUDA weights: auto (the model's), float32/16, bfloat16
  // KV cache: auto (= the weights'), float32, float16, bfloat16, or fp8 (CUDA only). On the CPU,
  // auto is the checkpoint's torch_dtype, and set_up_engine writes the resolved name back.
  std::string kv_cache_dtype = "auto";
  // CPU only: quantize the float (F32/F16/BF16) matrices at load, as vLLM's online
  // quantization: "" or "none" (keep them), q8_0, q4_0, q4_k (or any kernels::QuantType name).
  // Matrices a GGUF file already holds quantized stay as they are.
  std::string quantization;
  // Models whose every layer has a sliding window (Mistral, Phi-3 mini): give a running
  // sequence's KV blocks back once no layer's window reaches them (BlockManager's sliding
  // window), so a long generation holds about window / block_size + 2 blocks. CPU executor only
  // (the CUDA executor checks every table entry). Off keeps them: the tests compare.
  bool free_blocks_outside_window = true;
  // Speculative decoding (--speculative ngram ...; docs/speculative-decoding.md). CPU executor
  // and paged allocator only: set_up_engine refuses it elsewhere.
  SpeculativeConfig speculative;
};

struct EngineSetup {
  EngineConfig config;  // max_model_len, num_kv_blocks and preemption_mode resolved
  std::shared_ptr<const model::Tokenizer> tokenizer;
  std::unique_ptr<Executor> executor;
  SchedulerConfig scheduler;
  cache::BlockManagerConfig blocks;
};

// Loads the model and tokenizer, sizes the KV pools and builds the CPU executor. Throws
// model::ModelError for bad model files and std::invalid_argument for bad settings (e.g. a
// pool too small for max_model_len, with the memory it would need).
EngineSetup set_up_engine(const EngineConfig& config);

// "cpu" or "cuda" for a --device value (cpu, cuda, auto). Throws std::invalid_argument for an
// unknown name, and for cuda when the binary has no CUDA or no device is visible.
std::string resolve_device(const std::string& device);

// The CPU executor's KV-cache element type for a --kv-cache-dtype value: float32, float16,
// bfloat16 (and their short names) or int8; auto is the checkpoint's torch_dtype, float32 when
// that is empty or not one of the three 16/32-bit types. Throws std::invalid_argument for fp8
// (CUDA only) and for unknown names.
kernels::KvDtype resolve_cpu_kv_dtype(const std::string& kv_cache_dtype,
                                      const std::string& torch_dtype);

// The CPU weight format for a --quantization value ("" and "none": as stored). Throws
// std::invalid_argument naming the value and the choices.
model::WeightFormat resolve_weight_format(const std::string& quantization);

// Empty when the engine can take the request, else the reason (empty prompt, ids outside the
// vocabulary, too long for max_model_len, invalid sampling, more sequences than max_num_seqs).
std::string check_request(std::span<const int32_t> prompt_token_ids,
                          const model::SamplingParams& params, const EngineConfig& resolved,
                          int vocab_size);

}  // namespace pagedserve::actors
