// ExecutorActor: receive a step, run it on this thread, send the result back, time both.
#include "actors/executor_actor.h"

#include <exception>
#include <utility>

namespace pagedserve::actors {

ExecutorActor::ExecutorActor(std::unique_ptr<Executor> executor,
                             runtime::Channel<runtime::ExecuteStep>& inbox,
                             runtime::Channel<runtime::SchedulerMessage>& scheduler_inbox,
                             runtime::StatsBoard& stats, const FaultHooks* faults)
    : executor_(std::move(executor)),
      inbox_(inbox),
      scheduler_inbox_(scheduler_inbox),
      stats_(stats),
      faults_(faults) {}

runtime::Task<void> ExecutorActor::run() {
  for (;;) {
    auto [error, step] = co_await inbox_.async_receive(runtime::kAwaitTuple);
    if (error) break;  // closed: shutdown
    runtime::StepDone done = on_execute(std::move(step));
    if (fault_fails_send(faults_, ChannelSend::kStepDone)) break;  // as if the inbox closed
    auto [send_error] = co_await scheduler_inbox_.async_send(
        boost::system::error_code{}, runtime::SchedulerMessage(std::move(done)),
        runtime::kAwaitTuple);
    if (send_error) break;
  }
}

runtime::StepDone ExecutorActor::on_execute(runtime::ExecuteStep step) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  runtime::StepDone done;
  // Exceptions stay in this actor: a failed step comes back as an error value.
  try {
    carry_.substitute(step.input);
    done.output = executor_->execute(step.input);
    carry_.record(step.input, done.output);
  } catch (const std::exception& e) {
    carry_.forget();
    done.error = std::string("the executor failed: ") + e.what();
    done.output.seqs.assign(step.input.seqs.size(), {});  // no samples: every row is failed
  }
  const Clock::time_point end = Clock::now();
  int64_t idle_ns = 0;
  if (step.continues_previous_step && last_step_end_) {
    idle_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(start - *last_step_end_).count();
  }
  last_step_end_ = end;
  stats_.add_step(std::chrono::duration_cast<std::chrono::nanoseconds>(end - start).count(),
                  idle_ns);
  using Stage = runtime::StatsBoard::Stage;
  stats_.add_stage(Stage::kCopies, done.output.times.copies_s);
  stats_.add_stage(Stage::kForward, done.output.times.forward_s);
  stats_.add_stage(Stage::kSampling, done.output.times.sampling_s);
  done.output.step_id = step.input.step_id;
  done.input = std::move(step.input);
  return done;
}

}  // namespace pagedserve::actors
