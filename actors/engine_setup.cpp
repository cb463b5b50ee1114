// set_up_engine and check_request: the construction and admission rules shared by LlmEngine
// and Engine.
#include "actors/engine_setup.h"

#include <algorithm>
#include <stdexcept>

#include "actors/cpu_executor.h"
#include "cache/kv_cache_sizing.h"
#include "model/loader/llama_weights.h"

namespace pagedserve::actors {

EngineSetup set_up_engine(const EngineConfig& config_in) {
  EngineSetup setup;
  EngineConfig& config = setup.config;
  config = config_in;
  if (config.block_size < 1 || config.block_size > 256) {
    throw std::invalid_argument("--block-size must be in [1, 256], got " +
                                std::to_string(config.block_size));
  }
  if (config.max_num_seqs < 1) throw std::invalid_argument("--max-num-seqs must be at least 1");

  const model::LlamaCheckpoint checkpoint = model::open_llama_checkpoint(config.model_dir);
  setup.tokenizer =
      std::make_shared<const model::Tokenizer>(model::Tokenizer::from_dir(config.model_dir));
  const model::ModelConfig& mc = checkpoint.config;
  if (config.max_model_len <= 0) config.max_model_len = mc.max_position_embeddings;

  cache::KvCacheShape shape;
  shape.num_layers = mc.num_hidden_layers;
  shape.num_kv_heads = mc.num_key_value_heads;
  shape.head_dim = mc.head_dim;
  shape.dtype_bytes = sizeof(float);
  shape.block_size = config.block_size;
  if (config.num_kv_blocks <= 0) {
    const int from_memory = cache::num_blocks_for_memory(shape, config.kv_cache_memory_bytes);
    // More blocks than every sequence at full length could use is wasted memory.
    const int64_t useful = int64_t{config.max_num_seqs} *
                           ((config.max_model_len + config.block_size - 1) / config.block_size);
    config.num_kv_blocks = static_cast<int>(std::min<int64_t>(from_memory, useful));
  }
  cache::check_max_model_len_fits(shape, config.num_kv_blocks, config.max_model_len);
  const int num_cpu_blocks = cache::num_blocks_for_memory(shape, config.swap_space_bytes);

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

  SchedulerConfig& sched = setup.scheduler;
  sched.preemption_mode = *config.preemption_mode;
  sched.max_num_seqs = config.max_num_seqs;
  sched.max_model_len = config.max_model_len;
  sched.max_num_batched_tokens = config.max_num_batched_tokens;
  sched.eos_token_ids.assign(mc.eos_token_ids.begin(), mc.eos_token_ids.end());
  if (auto eos = setup.tokenizer->eos_token_id();
      eos && std::find(sched.eos_token_ids.begin(), sched.eos_token_ids.end(), *eos) ==
                 sched.eos_token_ids.end()) {
    sched.eos_token_ids.push_back(*eos);
  }

  setup.executor = std::make_unique<CpuExecutor>(
      checkpoint, config.block_size, config.num_kv_blocks, num_cpu_blocks, config.num_threads);
  return setup;
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
  if (params.num_sequences() > resolved.max_num_seqs) {
    return "best_of (or n) is " + std::to_string(params.num_sequences()) +
           ", more sequences than --max-num-seqs (" + std::to_string(resolved.max_num_seqs) +
           ") lets run at once";
  }
  return {};
}

}  // namespace pagedserve::actors
