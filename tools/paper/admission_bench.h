// `pagedserve bench admission`: how the admission rule behaves when the KV pool is nearly
// full. Replays the paper's workloads or Azure traces on the simulated executor (the real Scheduler
// and block manager, virtual time) once per admission rule
// (SchedulerConfig::admit_whole_prompt_only on and off) and rate, and prints preemptions per 1,000
// requests, throughput and normalized latency. Every number is simulated.
#pragma once

#include <filesystem>
#include <ostream>
#include <vector>

#include "actors/scheduler.h"
#include "tools/paper/workloads.h"

namespace pagedserve::paper {

struct AdmissionBenchOptions {
  std::filesystem::path profile;         // the SimProfile JSON
  std::filesystem::path traces_root;     // ../shared/traces
  std::vector<PaperWorkload> workloads;  // one table each
  int num_requests = 1000;               // the workload's selection (workloads.h)
  std::vector<double> rates;             // Poisson arrivals per second; 0: all at once
  int num_device_blocks = 0;             // 0: the profile's KV memory
  int block_size = 16;
  actors::PreemptionMode preemption = actors::PreemptionMode::kRecompute;
  int num_cpu_blocks = 0;  // the swap pool (needed for kSwap)
  unsigned seed = 0;
};

// Writes one markdown table per trace to `out`. Throws on unreadable inputs.
void run_admission_bench(const AdmissionBenchOptions& options, std::ostream& out);

}  // namespace pagedserve::paper
