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
  struct SchedulerCounts {
    int num_running_seqs = 0;
    int num_waiting_seqs = 0;
    int num_kv_blocks_total = 0;
    int num_kv_blocks_used = 0;
    int num_kv_blocks_free = 0;
    int64_t num_generated_tokens = 0;
  };

  void publish(const SchedulerCounts& counts) {
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
    EngineStats stats;
    stats.num_running_seqs = scheduler_.num_running_seqs;
    stats.num_waiting_seqs = scheduler_.num_waiting_seqs;
    stats.num_kv_blocks_total = scheduler_.num_kv_blocks_total;
    stats.num_kv_blocks_used = scheduler_.num_kv_blocks_used;
    stats.num_kv_blocks_free = scheduler_.num_kv_blocks_free;
    stats.num_generated_tokens = scheduler_.num_generated_tokens;
    stats.num_steps = num_steps_;
    stats.executor_busy_s = static_cast<double>(busy_ns_) * 1e-9;
    stats.executor_idle_s = static_cast<double>(idle_ns_) * 1e-9;
    return stats;
  }

 private:
  mutable std::mutex mu_;
  SchedulerCounts scheduler_;
  int64_t num_steps_ = 0;
  int64_t busy_ns_ = 0;
  int64_t idle_ns_ = 0;
};

}  // namespace pagedserve::actors::runtime
