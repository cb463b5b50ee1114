// `pagedserve bench paper`: the PagedAttention paper's experiments, simulated at the paper's
// scale (a SimProfile such as profiles/opt-13b-a100.json) over the Azure LLM inference traces,
// written as docs/RESULTS.md with SVG plots beside it. Every number is simulated.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "tools/paper/sim_run.h"

namespace pagedserve::paper {

struct PaperOptions {
  std::filesystem::path profile;     // the SimProfile JSON
  std::filesystem::path conv_trace;  // AzureLLMInferenceTrace_conv.csv
  std::filesystem::path code_trace;  // AzureLLMInferenceTrace_code.csv
  std::filesystem::path out_md;      // RESULTS.md; the SVGs go to its folder
  int num_requests = 1000;           // requests replayed per run (from the trace's start)
  bool quick = false;                // few requests and rates: a smoke test, not results
  unsigned seed = 0;
  std::function<void(const std::string&)> progress;  // one line per finished run (optional)
  // When set: also run a small real variant on the CPU executor with this model (e.g. from
  // `pagedserve make-model`), step times measured by the wall clock.
  std::filesystem::path real_model;
  int real_num_requests = 24;
  int real_threads = 2;
};

// Requests from an Azure trace (lengths clipped to the context as bench serve does), each
// prompt `prefix_tokens` shared tokens then random ids distinct per request (no accidental
// prefix sharing); arrivals all at 0 (see at_rate).
struct Workload {
  std::vector<SimRequest> requests;
  std::string description;  // count, file, mean lengths, how many were clipped
};
Workload load_workload(const std::filesystem::path& path, int num, int max_model_len,
                       int prefix_tokens, unsigned seed);
// The requests with Poisson arrivals at `rate` per second.
std::vector<SimRequest> at_rate(std::vector<SimRequest> requests, double rate, unsigned seed);

// Runs every experiment and writes the report. Throws on unreadable inputs.
// printf-formats one number for a Markdown table cell.
std::string fmt(const char* format, double value);

void run_paper(const PaperOptions& options);

}  // namespace pagedserve::paper
