// run_admission_bench: the same workload, pool and rate under each admission rule.
#include "tools/paper/admission_bench.h"

#include <cstdio>
#include <string>

#include "actors/sim_executor.h"
#include "tools/paper/report.h"
#include "tools/paper/sim_run.h"

namespace pagedserve::paper {

void run_admission_bench(const AdmissionBenchOptions& options, std::ostream& out) {
  const actors::SimProfile profile = actors::load_sim_profile(options.profile);
  const int num_blocks = options.num_device_blocks > 0
                             ? options.num_device_blocks
                             : device_blocks_for(profile, options.block_size);
  out << "Simulated (--device sim, profile " << options.profile.filename().string() << ": "
      << profile.name << "); KV pool " << num_blocks << " blocks of " << options.block_size
      << " tokens; preemption by " << actors::preemption_mode_name(options.preemption) << ".\n";
  for (PaperWorkload kind : options.workloads) {
    const Workload w = load_workload(kind, options.traces_root, options.num_requests,
                                     profile.max_model_len, 0, options.seed);
    out << "\n"
        << w.description << "\n\n"
        << "| rate (req/s) | admission | completed | failed | preemptions per 1,000 requests | "
           "throughput (req/s) | throughput (tokens/s) | normalized latency (s/token) | "
           "mean batch | steps |\n"
        << "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
    for (double rate : options.rates) {
      const std::vector<SimRequest> requests =
          rate > 0 ? at_rate(w.requests, rate, options.seed) : w.requests;
      for (bool whole : {true, false}) {
        SimRunConfig config;
        config.block_size = options.block_size;
        config.num_device_blocks = num_blocks;
        config.num_cpu_blocks = options.num_cpu_blocks;
        config.preemption = options.preemption;
        config.admit_whole_prompt_only = whole;
        const SimRunResult r = run_sim(profile, config, requests);
        const double per_1000 = w.requests.empty() ? 0.0
                                                   : 1000.0 * static_cast<double>(r.preemptions) /
                                                         static_cast<double>(w.requests.size());
        out << "| " << (rate > 0 ? fmt("%.3f", rate) : std::string("all at once")) << " | "
            << (whole ? "whole prompt" : "partial prompt") << " | " << r.completed << " | "
            << r.failed << " | " << fmt("%.0f", per_1000) << " | "
            << fmt("%.3f", r.request_throughput) << " | " << fmt("%.0f", r.token_throughput)
            << " | " << fmt("%.3f", r.normalized_latency_s) << " | "
            << fmt("%.1f", r.mean_running_seqs) << " | " << r.steps << " |\n"
            << std::flush;
      }
    }
  }
}

}  // namespace pagedserve::paper
