// LlmEngine: wires the model, tokenizer, block manager, scheduler, CPU executor and output
// processor together.
#include "actors/llm_engine.h"

#include <algorithm>
#include <random>

namespace pagedserve::actors {

LlmEngine::LlmEngine(const EngineConfig& config, bool overlap) : overlap_(overlap) {
  EngineSetup setup = set_up_engine(config);
  config_ = setup.config;
  tokenizer_ = std::move(setup.tokenizer);
  executor_ = std::move(setup.executor);
  // The actor protocol on one thread: plan from the scheduler's own view of memory, apply the
  // step's memory-op list to the allocator in one go (what the PrefixCacheActor does).
  SchedulerConfig scheduler_config = setup.scheduler;
  scheduler_config.kv_placement = KvMemoryPlacement::kMirrored;
  scheduler_ = std::make_unique<Scheduler>(scheduler_config, setup.blocks);
  processor_ = std::make_unique<OutputProcessor>(*tokenizer_);
  seed_state_ = std::random_device{}();
}

LlmEngine::~LlmEngine() = default;

uint64_t LlmEngine::add_request(std::vector<int32_t> prompt_token_ids,
                                const model::SamplingParams& params) {
  if (std::string problem =
          check_request(prompt_token_ids, params, config_, model_config().vocab_size);
      !problem.empty()) {
    throw InvalidRequest(problem);
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
  if (overlap_) return process_step(*scheduler_, *processor_, run_overlapped());
  StepInput input = scheduler_->schedule();
  StepOutput output = executor_->execute(input);
  return process_step(*scheduler_, *processor_, scheduler_->update(input, output));
}

void LlmEngine::execute(StepInput input) {
  carry_.substitute(input);
  StepOutput output = executor_->execute(input);
  carry_.record(input, output);
  executed_ = ExecutedStep{std::move(input), std::move(output)};
}

std::vector<RequestUpdate> LlmEngine::run_overlapped() {
  std::vector<RequestUpdate> updates;
  auto flush_if_empty = [&](const StepInput& input) {
    if (!input.seqs.empty()) return false;
    StepOutput nothing;
    nothing.step_id = input.step_id;
    for (RequestUpdate& u : scheduler_->update(input, nothing)) updates.push_back(std::move(u));
    return true;
  };
  if (!executed_) {  // nothing ran yet (or the pipeline drained): a step planned as usual
    if (!scheduler_->has_unfinished()) return updates;
    StepInput input = scheduler_->schedule();
    if (flush_if_empty(input)) return updates;
    execute(std::move(input));
  }
  // Step N ran; plan N+1 before N's results are applied (when N's outcome does not decide it).
  std::optional<StepInput> next;
  if (scheduler_->has_unfinished() && scheduler_->can_schedule()) next = scheduler_->schedule();
  ExecutedStep done = std::move(*executed_);
  executed_.reset();
  for (RequestUpdate& u : scheduler_->update(done.input, done.output)) {
    updates.push_back(std::move(u));
  }
  if (next && !flush_if_empty(*next)) execute(std::move(*next));
  return updates;
}

}  // namespace pagedserve::actors
