// StatsBoard: where the actors publish counters for Engine::stats(). Written by the scheduler
// thread (sequence and block counts), the executor thread (step timings) and every actor
// (stage times, lock-free adds), read by any client thread; one mutex, held for a few stores.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>

#include "actors/engine.h"

namespace pagedserve::actors::runtime {

class StatsBoard {
 public:
  // The scheduler's part of EngineStats (its executor and registry fields are ignored).
  void publish(const EngineStats& counts) {
    std::lock_guard lock(mu_);
    scheduler_ = counts;
  }
  void add_step(int64_t busy_ns, int64_t idle_ns) {
    std::lock_guard lock(mu_);
    ++num_steps_;
    busy_ns_ += busy_ns;
    idle_ns_ += idle_ns;
  }

  enum class Stage { kSchedule, kCopies, kForward, kSampling, kProcessOutputs, kDetokenize };
  void add_stage(Stage stage, double seconds) {
    stage_ns_[static_cast<size_t>(stage)].fetch_add(static_cast<int64_t>(seconds * 1e9),
                                                    std::memory_order_relaxed);
  }

  // Everything but num_unfinished_requests, which the registry knows.
  EngineStats snapshot() const {
    EngineStats stats;
    {
      std::lock_guard lock(mu_);
      stats = scheduler_;
      stats.num_steps = num_steps_;
      stats.executor_busy_s = static_cast<double>(busy_ns_) * 1e-9;
      stats.executor_idle_s = static_cast<double>(idle_ns_) * 1e-9;
    }
    auto seconds = [this](Stage stage) {
      return static_cast<double>(
                 stage_ns_[static_cast<size_t>(stage)].load(std::memory_order_relaxed)) *
             1e-9;
    };
    stats.stage_s.schedule = seconds(Stage::kSchedule);
    stats.stage_s.copies = seconds(Stage::kCopies);
    stats.stage_s.forward = seconds(Stage::kForward);
    stats.stage_s.sampling = seconds(Stage::kSampling);
    stats.stage_s.process_outputs = seconds(Stage::kProcessOutputs);
    stats.stage_s.detokenize = seconds(Stage::kDetokenize);
    return stats;
  }

 private:
  mutable std::mutex mu_;
  EngineStats scheduler_;
  int64_t num_steps_ = 0;
  int64_t busy_ns_ = 0;
  int64_t idle_ns_ = 0;
  std::array<std::atomic<int64_t>, 6> stage_ns_{};
};

}  // namespace pagedserve::actors::runtime
