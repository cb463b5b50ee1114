// LlmEngine: the synchronous engine loop (tokenizer + scheduler + executor) that generate and
// the tests drive step by step. The asynchronous actor system wraps the same pieces. Its
// Scheduler plans from its own view of KV memory and applies each step's memory-op list to the
// allocator it owns in one go (KvMemoryPlacement::kMirrored): the prefix-cache actor's protocol
// on one thread.
// With overlap, the loop runs the scheduler's overlap protocol deterministically on one
// thread, as the actors do across threads: each step() plans step N+1 before it applies step
// N's results, then runs N+1 (placeholders filled by SampledTokenCarry) and keeps its results
// for the next step(). Outputs must not depend on it; the tests check that they do not.
// Not thread-safe: one thread calls add_request/step.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/engine_setup.h"
#include "actors/executor.h"
#include "actors/output_processor.h"
#include "actors/sampled_token_carry.h"
#include "actors/scheduler.h"
#include "model/sampling_params.h"
#include "model/tokenizer/tokenizer.h"

namespace pagedserve::actors {

// Thrown for a request the engine refuses (empty prompt, bad sampling field, too long).
class InvalidRequest : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

class LlmEngine {
 public:
  // Loads the model and tokenizer from config.model_dir. Throws model::ModelError for bad
  // model files and std::invalid_argument for bad engine settings.
  explicit LlmEngine(const EngineConfig& config, bool overlap = false);
  ~LlmEngine();

  const model::Tokenizer& tokenizer() const { return *tokenizer_; }
  const model::ModelConfig& model_config() const { return executor_->model_config(); }
  const EngineConfig& config() const { return config_; }
  const Scheduler& scheduler() const { return *scheduler_; }

  // Queues a request and returns its id. Throws InvalidRequest naming the problem.
  uint64_t add_request(std::vector<int32_t> prompt_token_ids, const model::SamplingParams& params);
  void abort_request(uint64_t id);
  bool has_unfinished_requests() const { return scheduler_->has_unfinished() || executed_; }

  // Runs one scheduler + executor iteration and reports what happened to each request.
  std::vector<RequestOutput> step();
  SchedulerStats stats() const { return scheduler_->stats(); }
  PreemptionMode preemption_mode() const { return *config_.preemption_mode; }

 private:
  EngineConfig config_;
  std::shared_ptr<const model::Tokenizer> tokenizer_;
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<OutputProcessor> processor_;
  // Overlap only: the step that ran last, its results not applied yet, and the carry that
  // fills the next step's placeholders with what it sampled.
  struct ExecutedStep {
    StepInput input;
    StepOutput output;
  };
  std::vector<RequestUpdate> run_overlapped();
  void execute(StepInput input);
  bool overlap_ = false;
  std::optional<ExecutedStep> executed_;
  SampledTokenCarry carry_;
  uint64_t next_request_id_ = 1;
  uint64_t seed_state_;
};

}  // namespace pagedserve::actors
