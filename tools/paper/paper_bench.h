// `pagedserve bench paper`: the PagedAttention paper's experiments, simulated at the paper's
// scale (a SimProfile such as profiles/opt-13b-a100.json) over the Azure LLM inference traces,
// written as docs/RESULTS.md with SVG plots beside it. Every number is simulated.
#pragma once

#include <filesystem>
#include <functional>
#include <string>

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

// Runs every experiment and writes the report. Throws on unreadable inputs.
void run_paper(const PaperOptions& options);

}  // namespace pagedserve::paper
