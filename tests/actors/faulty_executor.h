// FaultyExecutor: a test double around the engine's real executor, installed through
// FaultHooks::wrap_executor (actors/fault_hooks.h). It can hold the first step until the test
// releases it (so requests submitted meanwhile are certainly queued behind it when the fault
// comes, whatever the machine's speed), and it throws, once, in the first step a predicate
// selects: before running it (the step's KV blocks are never written) or after (written, but
// its samples lost). Shared by the engine-level fault tests and the server-level one.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "actors/executor.h"
#include "actors/fault_hooks.h"

namespace pagedserve::actors::testing_util {

inline constexpr const char* kInjectedExecutorFault = "injected fault: the device fell over";

// What the test thread and the executor thread share. Set the fields before Engine::start.
struct ExecutorFaultControl {
  bool hold_first_step = false;  // wait in the first step until release()
  // Called on the executor thread for every step until it first returns true; that step throws.
  std::function<bool(const StepInput&)> fail_when;
  bool run_step_before_throwing = false;

  std::atomic<int> num_steps{0};
  std::atomic<int> num_failures{0};

  // True once the first step is being held.
  bool wait_until_first_step_held(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    return changed_.wait_for(lock, timeout, [&] { return first_step_held_; });
  }
  void release() {
    std::lock_guard lock(mu_);
    released_ = true;
    changed_.notify_all();
  }
  void hold_here() {
    std::unique_lock lock(mu_);
    first_step_held_ = true;
    changed_.notify_all();
    changed_.wait(lock, [&] { return released_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  bool first_step_held_ = false;
  bool released_ = false;
};

class FaultyExecutor final : public Executor {
 public:
  FaultyExecutor(std::unique_ptr<Executor> inner, std::shared_ptr<ExecutorFaultControl> control)
      : inner_(std::move(inner)), control_(std::move(control)) {}

  StepOutput execute(const StepInput& input) override {
    if (control_->num_steps.fetch_add(1) == 0 && control_->hold_first_step) control_->hold_here();
    if (!fired_ && control_->fail_when && control_->fail_when(input)) {
      fired_ = true;
      control_->num_failures.fetch_add(1);
      if (control_->run_step_before_throwing) (void)inner_->execute(input);
      throw std::runtime_error(kInjectedExecutorFault);
    }
    return inner_->execute(input);
  }
  const model::ModelConfig& model_config() const override { return inner_->model_config(); }
  int num_device_blocks() const override { return inner_->num_device_blocks(); }
  int num_cpu_blocks() const override { return inner_->num_cpu_blocks(); }
  int block_size() const override { return inner_->block_size(); }

 private:
  std::unique_ptr<Executor> inner_;
  std::shared_ptr<ExecutorFaultControl> control_;
  bool fired_ = false;  // executor thread only
};

// Hooks whose only fault is the FaultyExecutor around the real executor.
inline FaultHooks executor_fault_hooks(std::shared_ptr<ExecutorFaultControl> control) {
  FaultHooks hooks;
  hooks.wrap_executor = [control](std::unique_ptr<Executor> inner) -> std::unique_ptr<Executor> {
    return std::make_unique<FaultyExecutor>(std::move(inner), control);
  };
  return hooks;
}

}  // namespace pagedserve::actors::testing_util
