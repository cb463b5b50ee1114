// LlmEngine: wires the model, tokenizer, block manager, scheduler, CPU executor and output
// processor together.
#include "actors/llm_engine.h"

#include <algorithm>
#include <random>

#include "actors/cpu_executor.h"
#include "cache/kv_cache_sizing.h"
#include "model/loader/llama_weights.h"

namespace pagedserve::actors {

LlmEngine::LlmEngine(const EngineConfig& config) : config_(config) {
  if (config_.block_size < 1 || config_.block_size > 256) {
    throw std::invalid_argument("--block-size must be in [1, 256], got " +
                                std::to_string(config_.block_size));
  }
  if (config_.max_num_seqs < 1) throw std::invalid_argument("--max-num-seqs must be at least 1");
  model::LlamaWeights weights = model::load_llama_weights(config_.model_dir);
  tokenizer_ = std::make_unique<model::Tokenizer>(model::Tokenizer::from_dir(config_.model_dir));
  const model::ModelConfig& mc = weights.config;
  if (config_.max_model_len <= 0) config_.max_model_len = mc.max_position_embeddings;

  cache::KvCacheShape shape;
  shape.num_layers = mc.num_hidden_layers;
  shape.num_kv_heads = mc.num_key_value_heads;
  shape.head_dim = mc.head_dim;
  shape.dtype_bytes = sizeof(float);
  shape.block_size = config_.block_size;
  int num_blocks = config_.num_kv_blocks;
  if (num_blocks <= 0) {
    num_blocks = cache::num_blocks_for_memory(shape, config_.kv_cache_memory_bytes);
    // More blocks than every sequence at full length could use is wasted memory.
    const int64_t useful = int64_t{config_.max_num_seqs} *
                           ((config_.max_model_len + config_.block_size - 1) / config_.block_size);
    num_blocks = static_cast<int>(std::min<int64_t>(num_blocks, useful));
  }
  cache::check_max_model_len_fits(shape, num_blocks, config_.max_model_len);
  const int num_cpu_blocks = cache::num_blocks_for_memory(shape, config_.swap_space_bytes);

  cache::BlockManagerConfig blocks;
  blocks.block_size = config_.block_size;
  blocks.num_device_blocks = num_blocks;
  blocks.num_cpu_blocks = num_cpu_blocks;
  blocks.enable_prefix_caching = config_.enable_prefix_caching;

  preemption_mode_ = config_.preemption_mode.value_or(
      num_cpu_blocks > 0 ? PreemptionMode::kSwap : PreemptionMode::kRecompute);
  if (preemption_mode_ == PreemptionMode::kSwap && num_cpu_blocks == 0) {
    throw std::invalid_argument(
        "--preemption-mode swap needs --swap-space (a CPU pool of at "
        "least one KV block)");
  }

  SchedulerConfig sched;
  sched.preemption_mode = preemption_mode_;
  sched.max_num_seqs = config_.max_num_seqs;
  sched.max_model_len = config_.max_model_len;
  sched.max_num_batched_tokens = config_.max_num_batched_tokens;
  sched.eos_token_ids.assign(mc.eos_token_ids.begin(), mc.eos_token_ids.end());
  if (auto eos = tokenizer_->eos_token_id();
      eos && std::find(sched.eos_token_ids.begin(), sched.eos_token_ids.end(), *eos) ==
                 sched.eos_token_ids.end()) {
    sched.eos_token_ids.push_back(*eos);
  }

  executor_ = std::make_unique<CpuExecutor>(std::move(weights), config_.block_size, num_blocks,
                                            num_cpu_blocks, config_.num_threads);
  scheduler_ = std::make_unique<Scheduler>(sched, blocks);
  processor_ = std::make_unique<OutputProcessor>(*tokenizer_);
  seed_state_ = std::random_device{}();
}

LlmEngine::~LlmEngine() = default;

uint64_t LlmEngine::add_request(std::vector<int32_t> prompt_token_ids,
                                const model::SamplingParams& params) {
  if (prompt_token_ids.empty()) throw InvalidRequest("the prompt must contain at least one token");
  const int vocab = model_config().vocab_size;
  for (int32_t id : prompt_token_ids) {
    if (id < 0 || id >= vocab) {
      throw InvalidRequest("prompt token id " + std::to_string(id) +
                           " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    }
  }
  if (static_cast<int>(prompt_token_ids.size()) >= config_.max_model_len) {
    throw InvalidRequest("the prompt has " + std::to_string(prompt_token_ids.size()) +
                         " tokens, but max_model_len is " + std::to_string(config_.max_model_len) +
                         " (the prompt plus at least one generated token must fit)");
  }
  if (std::string problem = params.validate(); !problem.empty()) throw InvalidRequest(problem);
  if (params.num_sequences() > config_.max_num_seqs) {
    throw InvalidRequest("best_of (or n) is " + std::to_string(params.num_sequences()) +
                         ", more sequences than --max-num-seqs (" +
                         std::to_string(config_.max_num_seqs) + ") lets run at once");
  }

  NewRequest request;
  request.id = next_request_id_++;
  request.sampling = params;
  request.seed = params.seed ? *params.seed : std::mt19937_64(seed_state_ + request.id)();
  processor_->add_request(request.id, prompt_token_ids, params);
  request.prompt_token_ids = std::move(prompt_token_ids);
  const uint64_t id = request.id;
  scheduler_->add(std::move(request));
  return id;
}

void LlmEngine::abort_request(uint64_t id) { scheduler_->abort(id); }

std::vector<RequestOutput> LlmEngine::step() {
  StepInput input = scheduler_->schedule();
  StepOutput output = executor_->execute(input);
  return process_step(*scheduler_, *processor_, scheduler_->update(input, output));
}

}  // namespace pagedserve::actors
