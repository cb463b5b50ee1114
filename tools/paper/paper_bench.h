// `pagedserve bench paper`: the PagedAttention paper's evaluation (Kwon et al., SOSP 2023),
// figure by figure, simulated at the paper's scale (the profiles of its Table 1) over its own
// workloads (ShareGPT and Alpaca lengths) and the Azure 2023 traces; written as Markdown
// (docs/RESULTS.md) with SVG plots beside it and, optionally, every table as JSON.
#pragma once

#include <algorithm>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "actors/sim_executor.h"
#include "tools/paper/workloads.h"

namespace pagedserve::paper {

// A profile of the paper's Table 1 and the short name the report and JSON use.
struct NamedProfile {
  std::string id;  // "opt-13b": the file's stem up to its first '-' after the size
  std::filesystem::path path;
  actors::SimProfile profile;
};
NamedProfile load_named_profile(const std::filesystem::path& path);

struct PaperOptions {
  std::vector<std::filesystem::path> profiles;  // the first is the one single-profile figures use
  std::filesystem::path traces_root;            // ../shared/traces
  std::vector<PaperWorkload> workloads;         // the Fig. 12 rows (and the Azure section)
  bool all_figures = true;            // false: only Fig. 12-13 for `workloads` (--workload given)
  std::filesystem::path out_md;       // the report; the SVGs go to paper-figures/ beside it
  std::filesystem::path result_json;  // empty: none
  int num_requests = 1000;            // requests per offline run (all submitted at once)
  double trace_duration_s = 600;      // Fig. 12's traces: this long at each rate
  bool quick = false;                 // tiny workloads: a smoke test, not results
  unsigned seed = 0;
  std::function<void(const std::string&)> progress;  // one line per finished run (optional)
  // When set: also real runs on the CPU executor with this model (`pagedserve make-model`).
  std::filesystem::path real_model;
  int real_num_requests = 16;  // 24 took ~16 min on a 2-core machine
  int real_threads = 2;
  int real_repeats = 2;  // runs per (allocator, rate)
};

// Requests of an offline run (all submitted at once): num_requests, few under --quick.
inline int offline_requests(const PaperOptions& options) {
  return options.quick ? std::min(options.num_requests, 60) : options.num_requests;
}

// Runs the experiments and writes the report (and JSON). Throws on unreadable inputs.
void run_paper(const PaperOptions& options);

}  // namespace pagedserve::paper
