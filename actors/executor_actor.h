// ExecutorActor: owns the Executor (CPU now, CUDA later behind the same interface) and runs
// it on its own thread, so a step's forward pass overlaps the host work of the other actors.
// Handles ExecuteStep (from the scheduler actor; with overlap the next step is already queued
// while one runs, at most two in flight) and answers each with a StepDone in the scheduler's
// inbox, in order. Before running a step it writes the tokens the previous step sampled into
// the new step's placeholders (SampledTokenCarry). Measures its busy time and its idle time between
// consecutive steps (see ExecuteStep::continues_previous_step) into the StatsBoard.
// Lives on the executor ActorThread; not thread-safe otherwise.
#pragma once

#include <chrono>
#include <memory>
#include <optional>

#include "actors/executor.h"
#include "actors/fault_hooks.h"
#include "actors/runtime/channel.h"
#include "actors/runtime/executor_messages.h"
#include "actors/runtime/scheduler_messages.h"
#include "actors/runtime/stats_board.h"
#include "actors/sampled_token_carry.h"

namespace pagedserve::actors {

class ExecutorActor {
 public:
  ExecutorActor(std::unique_ptr<Executor> executor, runtime::Channel<runtime::ExecuteStep>& inbox,
                runtime::Channel<runtime::SchedulerMessage>& scheduler_inbox,
                runtime::StatsBoard& stats, const FaultHooks* faults = nullptr);

  // The run loop; spawn it on the executor thread. Ends when the inbox or the scheduler's
  // inbox closes.
  runtime::Task<void> run();

 private:
  runtime::StepDone on_execute(runtime::ExecuteStep step);

  std::unique_ptr<Executor> executor_;
  runtime::Channel<runtime::ExecuteStep>& inbox_;
  runtime::Channel<runtime::SchedulerMessage>& scheduler_inbox_;
  runtime::StatsBoard& stats_;
  const FaultHooks* faults_ = nullptr;  // tests only
  std::optional<std::chrono::steady_clock::time_point> last_step_end_;
  SampledTokenCarry carry_;
};

}  // namespace pagedserve::actors
