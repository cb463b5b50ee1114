// set_up_engine and check_request: the construction and admission rules shared by LlmEngine
// and Engine.
#include "actors/engine_setup.h"

#include <algorithm>
#include <stdexcept>

#include "actors/cpu_executor.h"
#include "actors/sim_executor.h"
#include "cache/kv_cache_sizing.h"
#include "model/loader/llama_weights.h"
#ifdef PAGEDSERVE_HAVE_CUDA
#include "actors/cuda/cuda_executor.h"
#endif

namespace pagedserve::actors {

namespace {

// The scheduler settings both devices share, from the resolved config.
void set_up_scheduler(EngineSetup& setup, const std::vector<int>& model_eos) {
  const EngineConfig& config = setup.config;
  set_up_scheduler(setup, mc.eos_token_ids);

  if (!cuda) {
    setup.executor =
        std::make_unique<CpuExecutor>(std::move(weights), config.block_size, config.num_kv_blocks,
                                      num_cpu_blocks, config.num_threads);
  }
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
