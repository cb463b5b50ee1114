// StatsBoard: where the scheduler and executor actors publish counters for Engine::stats().
// Written by the scheduler thread (sequence and block counts) and the executor thread (step
// timings), read by any client thread; one mutex, held for a few stores.
#pragma once

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

  // Everything but num_unfinished_requests, which the registry knows.
  EngineStats snapshot() const {
    std::lock_guard lock(mu_);
    EngineStats stats = scheduler_;
    stats.num_steps = num_steps_;
    stats.executor_busy_s = static_cast<double>(busy_ns_) * 1e-9;
    stats.executor_idle_s = static_cast<double>(idle_ns_) * 1e-9;
    return stats;
  }

 private:
  mutable std::mutex mu_;
  EngineStats scheduler_;
  int64_t num_steps_ = 0;
  int64_t busy_ns_ = 0;
  int64_t idle_ns_ = 0;
};

}  // namespace pagedserve::actors::runtime
