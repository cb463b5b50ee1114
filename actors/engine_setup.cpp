// set_up_engine and check_request: the construction and admission rules shared by LlmEngine
// and Engine.
#include "actors/engine_setup.h"

#include <algorithm>
#include <optional>
#include <stdexcept>

#include "actors/cpu_executor.h"
#include "actors/sim_executor.h"
#include "cache/kv_cache_sizing.h"
#include "kernels/cpu/quant.h"
#include "model/loader/gguf.h"
#include "model/loader/llama_weights.h"
#ifdef PAGEDSERVE_HAVE_CUDA
#include "actors/cuda/cuda_executor.h"
#endif

namespace pagedserve::actors {

namespace {

// What every device shares once its KV pool is sized (config.num_kv_blocks, and the CPU
// pool for swapping): the preemption mode, the block manager's and the scheduler's settings.
// `sliding_window`: the window every layer has (0 when some layer reads the whole context).
void set_up_scheduler(EngineSetup& setup, int num_cpu_blocks, const std::vector<int>& model_eos,
                      int sliding_window) {
  EngineConfig& config = setup.config;
  config.preemption_mode = config.preemption_mode.value_or(
      num_cpu_blocks > 0 ? PreemptionMode::kSwap : PreemptionMode::kRecompute);
  if (config.preemption_mode == PreemptionMode::kSwap && num_cpu_blocks == 0) {
    throw std::invalid_argument(
        "--preemption-mode swap needs --swap-space (a CPU pool of at least one KV block)");
  }
  setup.blocks.block_size = config.block_size;
  setup.blocks.num_device_blocks = config.num_kv_blocks;
  setup.blocks.num_cpu_blocks = num_cpu_blocks;
  setup.blocks.enable_prefix_caching = config.enable_prefix_caching;
  setup.blocks.sliding_window = config.free_blocks_outside_window ? sliding_window : 0;
  SchedulerConfig& sched = setup.scheduler;
  sched.preemption_mode = *config.preemption_mode;
  sched.max_num_seqs = config.max_num_seqs;
  sched.max_model_len = config.max_model_len;
  sched.max_num_batched_tokens = config.max_num_batched_tokens;
  sched.kv_allocator = config.kv_allocator;
  sched.speculative = config.speculative;
  sched.eos_token_ids.assign(model_eos.begin(), model_eos.end());
  if (auto eos = setup.tokenizer->eos_token_id();
      eos && std::find(sched.eos_token_ids.begin(), sched.eos_token_ids.end(), *eos) ==
                 sched.eos_token_ids.end()) {
    sched.eos_token_ids.push_back(*eos);
  }
}

// --device sim: the tokenizer from model_dir, no weights; the pool from the profile.
EngineSetup set_up_sim_engine(EngineSetup setup) {
  EngineConfig& config = setup.config;
  SimProfile profile = load_sim_profile(config.sim_profile);
  setup.tokenizer =
      std::make_shared<const model::Tokenizer>(model::Tokenizer::from_model(config.model_dir));
  profile.vocab_size = setup.tokenizer->vocab_size();
  if (config.max_model_len <= 0) config.max_model_len = profile.max_model_len;
  profile.max_model_len = config.max_model_len;
  const int64_t block_bytes = profile.kv_bytes_per_token * config.block_size;
  if (config.num_kv_blocks <= 0) {
    config.num_kv_blocks =
        static_cast<int>(std::min<int64_t>(profile.kv_cache_bytes / block_bytes, int64_t{1} << 30));
  }
  const int needed = (config.max_model_len + config.block_size - 1) / config.block_size;
  if (config.num_kv_blocks < needed) {
    throw std::invalid_argument(
        "the sim profile's KV pool (" + std::to_string(config.num_kv_blocks) +
        " blocks) cannot hold one max_model_len sequence (" + std::to_string(needed) + " blocks)");
  }
  const int num_cpu_blocks = static_cast<int>(config.swap_space_bytes / block_bytes);
  set_up_scheduler(setup, num_cpu_blocks, {}, /*sliding_window=*/0);
  setup.executor = std::make_unique<SimExecutor>(std::move(profile), config.block_size,
                                                 config.num_kv_blocks, num_cpu_blocks);
  return setup;
}

#ifdef PAGEDSERVE_HAVE_CUDA
CudaExecutorOptions cuda_options(const EngineConfig& config, int num_cpu_blocks) {
  CudaExecutorOptions options;
  options.block_size = config.block_size;
  options.num_device_blocks = std::max(config.num_kv_blocks, 0);
  options.num_cpu_blocks = num_cpu_blocks;
  options.gpu_memory_utilization = config.gpu_memory_utilization;
  options.weight_dtype = config.dtype;
  options.kv_cache_dtype = config.kv_cache_dtype;
  options.max_num_batched_tokens = config.max_num_batched_tokens;
  options.max_num_seqs = config.max_num_seqs;
  options.cuda_graphs = config.cuda_graphs;
  return options;
}
#endif

std::unique_ptr<Executor> make_cuda_executor(const model::LlamaCheckpoint& checkpoint,
                                             const EngineConfig& config, int num_cpu_blocks) {
#ifdef PAGEDSERVE_HAVE_CUDA
  return std::make_unique<CudaExecutor>(checkpoint, cuda_options(config, num_cpu_blocks));
#else
  (void)checkpoint;
  (void)config;
  (void)num_cpu_blocks;
  throw std::invalid_argument("--device cuda: this binary was built without CUDA");
#endif
}

// The CUDA executor's KV element size, from its own dtype names (see cuda_kv_dtype_bytes).
int cuda_kv_bytes(const EngineConfig& config, const model::ModelConfig& mc) {
#ifdef PAGEDSERVE_HAVE_CUDA
  return static_cast<int>(cuda_kv_dtype_bytes(cuda_options(config, 0), mc.torch_dtype));
#else
  (void)config;
  (void)mc;
  throw std::invalid_argument("--device cuda: this binary was built without CUDA");
#endif
}

}  // namespace

std::string resolve_device(const std::string& device) {
  if (device == "cpu") return "cpu";
#ifdef PAGEDSERVE_HAVE_CUDA
  const int devices = cuda_device_count();
#else
  const int devices = 0;
#endif
  if (device == "auto") return devices > 0 ? "cuda" : "cpu";
  if (device == "cuda") {
#ifndef PAGEDSERVE_HAVE_CUDA
    throw std::invalid_argument(
        "--device cuda: this binary was built without CUDA "
        "(configure with -DPAGEDSERVE_CUDA=ON where nvcc exists)");
#endif
    if (devices == 0) {
      throw std::invalid_argument("--device cuda: no CUDA device is visible to this process");
    }
    return "cuda";
  }
  throw std::invalid_argument("--device must be cpu, cuda, auto or sim, got '" + device + "'");
}

kernels::KvDtype resolve_cpu_kv_dtype(const std::string& kv_cache_dtype,
                                      const std::string& torch_dtype) {
  if (kv_cache_dtype == "auto") {
    return kernels::parse_kv_dtype(torch_dtype).value_or(kernels::KvDtype::kFloat32);
  }
  if (const auto dtype = kernels::parse_kv_dtype(kv_cache_dtype)) return *dtype;
  if (kv_cache_dtype.starts_with("fp8")) {
    throw std::invalid_argument(
        "--kv-cache-dtype " + kv_cache_dtype +
        ": the CPU executor stores K/V as float32, float16, bfloat16 or int8; "
        "fp8 needs --device cuda");
  }
  throw std::invalid_argument(
      "--kv-cache-dtype must be auto, float32, float16, bfloat16, int8 (CPU) or fp8 (CUDA), "
      "got '" +
      kv_cache_dtype + "'");
}

namespace {

// The share of the KV memory and swap space the target's pools get when a draft model's twin
// pools (actors/draft_proposer.h: a draft block for every target block) take the rest.
double target_kv_share(const cache::KvCacheShape& target, const model::ModelConfig& draft) {
  cache::KvCacheShape twin = target;
  twin.num_layers = draft.num_hidden_layers;
  twin.num_kv_heads = draft.num_key_value_heads;
  twin.head_dim = draft.head_dim;
  const double target_bytes = static_cast<double>(cache::kv_bytes_per_block(target));
  return target_bytes / (target_bytes + static_cast<double>(cache::kv_bytes_per_block(twin)));
}

model::LlamaCheckpoint open_draft_model(const std::string& path) {
  try {
    return model::open_llama_checkpoint(path);
  } catch (const std::exception& e) {
    throw std::invalid_argument("--draft-model " + path + ": " + e.what());
  }
}

}  // namespace

EngineSetup set_up_engine(const EngineConfig& config_in) {
  EngineSetup setup;
  EngineConfig& config = setup.config;
  config = config_in;
  if (config.block_size < 1 || config.block_size > 256) {
    throw std::invalid_argument("--block-size must be in [1, 256], got " +
                                std::to_string(config.block_size));
  }
  if (config.max_num_seqs < 1) throw std::invalid_argument("--max-num-seqs must be at least 1");
  if (std::string problem = config.speculative.validate(); !problem.empty()) {
    throw std::invalid_argument("--speculative: " + problem);
  }
  if (config.speculative.enabled() && config.kv_allocator != cache::KvAllocatorKind::kPaged) {
    throw std::invalid_argument("--speculative needs --kv-allocator paged");
  }
  if (config.device == "sim" && config.speculative.enabled()) {
    throw std::invalid_argument("--speculative runs on the CPU executor only (not --device sim)");
  }
  if (config.device == "sim") return set_up_sim_engine(std::move(setup));
  config.device = resolve_device(config.device);
  if (config.device != "cpu" && config.speculative.enabled()) {
    throw std::invalid_argument("--speculative runs on the CPU executor only (use --device cpu)");
  }
  const bool cuda = config.device == "cuda";
  const model::WeightFormat weight_format = resolve_weight_format(config.quantization);
  if (cuda && weight_format.quantization) {
    throw std::invalid_argument("--quantization " + config.quantization +
                                " runs on the CPU executor only (use --device cpu)");
  }

  // The CPU executor packs straight from the mapped checkpoint (16-bit weights stay 16-bit);
  // the CUDA one takes float weights and converts them on the device.
  const model::LlamaCheckpoint checkpoint = model::open_llama_checkpoint(config.model_dir);
  setup.tokenizer = std::make_shared<const model::Tokenizer>(
      checkpoint.gguf ? model::Tokenizer::from_gguf(*checkpoint.gguf)
                      : model::Tokenizer::from_dir(config.model_dir));
  const model::ModelConfig& mc = checkpoint.config;
  const bool max_model_len_given = config.max_model_len > 0;
  if (!max_model_len_given) config.max_model_len = mc.max_position_embeddings;

  cache::KvCacheShape shape;
  shape.num_layers = mc.num_hidden_layers;
  shape.num_kv_heads = mc.num_key_value_heads;
  shape.head_dim = mc.head_dim;
  shape.block_size = config.block_size;
  kernels::KvDtype cpu_kv_dtype = kernels::KvDtype::kFloat32;
  if (cuda) {
    shape.dtype_bytes = cuda_kv_bytes(config, mc);
  } else {
    cpu_kv_dtype = resolve_cpu_kv_dtype(config.kv_cache_dtype, mc.torch_dtype);
    config.kv_cache_dtype = kernels::kv_dtype_name(cpu_kv_dtype);
    shape.dtype_bytes = kernels::kv_dtype_size(cpu_kv_dtype);
    shape.row_scale_bytes = kernels::kv_dtype_row_scale_bytes(cpu_kv_dtype);
  }
  const bool draft = config.speculative.method == SpeculativeMethod::kDraft;
  std::optional<model::LlamaCheckpoint> draft_checkpoint;
  double kv_share = 1.0;
  if (draft) {
    draft_checkpoint = open_draft_model(config.speculative.draft_model);
    kv_share = target_kv_share(shape, draft_checkpoint->config);
  }
  if (config.num_kv_blocks <= 0 && (!cuda || config.kv_cache_memory_given)) {
    const int from_memory = cache::num_blocks_for_memory(
        shape, static_cast<int64_t>(static_cast<double>(config.kv_cache_memory_bytes) * kv_share));
    // More blocks than every sequence at full length could use is wasted memory.
    const int64_t useful = int64_t{config.max_num_seqs} *
                           ((config.max_model_len + config.block_size - 1) / config.block_size);
    config.num_kv_blocks = static_cast<int>(std::min<int64_t>(from_memory, useful));
  }
  const int num_cpu_blocks = cache::num_blocks_for_memory(
      shape, static_cast<int64_t>(static_cast<double>(config.swap_space_bytes) * kv_share));
  if (cuda) {
    setup.executor = make_cuda_executor(checkpoint, config, num_cpu_blocks);
    config.num_kv_blocks = setup.executor->num_device_blocks();
  }
  // Today's models train for 32k-128k tokens; unless asked for, the context is what the pool
  // holds (as llama.cpp sizes n_ctx to memory) rather than an error on a default setting.
  if (!max_model_len_given && config.num_kv_blocks > 0) {
    config.max_model_len = static_cast<int>(
        std::min<int64_t>(config.max_model_len, int64_t{config.num_kv_blocks} * config.block_size));
  }
  cache::check_max_model_len_fits(shape, config.num_kv_blocks, config.max_model_len);

  // Blocks the window has passed are released (both executors' kernels start at each row's
  // window), but not with a draft model, which may catch up over positions before the
  // target's window.
  set_up_scheduler(setup, num_cpu_blocks, mc.eos_token_ids,
                   draft ? 0 : mc.max_window_of_all_layers());

  if (!cuda) {
    auto executor = std::make_unique<CpuExecutor>(checkpoint, config.block_size,
                                                  config.num_kv_blocks, num_cpu_blocks,
                                                  config.num_threads, cpu_kv_dtype, weight_format);
    if (draft) {
      try {
        executor->attach_draft_model(*draft_checkpoint);
      } catch (const std::exception& e) {
        throw std::invalid_argument("--draft-model " + config.speculative.draft_model + ": " +
                                    e.what());
      }
    } else if (config.speculative.method == SpeculativeMethod::kNgram) {
      executor->attach_ngram_proposer(config.speculative.ngram_min, config.speculative.ngram_max);
    }
    setup.executor = std::move(executor);
  }
  return setup;
}

model::WeightFormat resolve_weight_format(const std::string& quantization) {
  if (quantization.empty() || quantization == "none") return {};
  if (const auto type = kernels::parse_quant_type(quantization)) return {*type};
  throw std::invalid_argument(
      "--quantization must be none, q8_0, q4_0, q5_0, q5_1, q4_k, q5_k or q6_k, got '" +
      quantization + "'");
}

std::string check_request(std::span<const int32_t> prompt_token_ids,
                          const model::SamplingParams& params, const EngineConfig& resolved,
                          int vocab_size) {
  if (prompt_token_ids.empty()) return "the prompt must contain at least one token";
  for (int32_t id : prompt_token_ids) {
    if (id < 0 || id >= vocab_size) {
      return "prompt token id " + std::to_string(id) + " is outside the vocabulary [0, " +
             std::to_string(vocab_size) + ")";
    }
  }
  if (static_cast<int>(prompt_token_ids.size()) >= resolved.max_model_len) {
    return "the prompt has " + std::to_string(prompt_token_ids.size()) +
           " tokens, but max_model_len is " + std::to_string(resolved.max_model_len) +
           " (the prompt plus at least one generated token must fit)";
  }
  if (std::string problem = params.validate(); !problem.empty()) return problem;
  // Grammar masks are applied by the CPU and CUDA samplers (actors/grammar_rows.h); the
  // simulator draws no real tokens.
  if (params.grammar && resolved.device != "cpu" && resolved.device != "cuda") {
    return "structured outputs (response_format, guided_*, grammar, required tool calls) need "
           "--device cpu; the " +
           resolved.device + " executor does not apply grammars yet";
  }
  if (params.num_sequences() > resolved.max_num_seqs) {
    return "best_of (or n) is " + std::to_string(params.num_sequences()) +
           ", more sequences than --max-num-seqs (" + std::to_string(resolved.max_num_seqs) +
           ") lets run at once";
  }
  return {};
}

}  // namespace pagedserve::actors
