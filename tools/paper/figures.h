// The report's sections, one function per figure of the paper's evaluation (§6-7). Each writes
// its Markdown (with the paper's number beside ours), its SVG plot and its JSON results.
#pragma once

#include <string>
#include <vector>

#include "tools/paper/paper_bench.h"
#include "tools/paper/report.h"
#include "tools/paper/throughput_sweep.h"
#include "tools/paper/workloads.h"

namespace pagedserve::paper {

// Table 1: the simulated set-ups and their cost-model coefficients.
void setup_table(Report& report, const std::vector<NamedProfile>& profiles);

// Fig. 12 (one panel): normalized latency against request rate for `contenders` (their
// sweeps, the SVG plot, the JSON under results["throughput"][key]). `key` names the panel
// ("sharegpt/opt-13b"). run_panel writes no Markdown; throughput_panel adds the panel's
// table: the highest rate under the threshold, the first contender's ratio to each, the batch.
std::vector<SweepOutcome> run_panel(Report& report, const NamedProfile& profile,
                                    const Workload& workload, const std::string& key,
                                    const std::vector<Contender>& contenders,
                                    const SweepOptions& sweep);
std::vector<SweepOutcome> throughput_panel(Report& report, const NamedProfile& profile,
                                           const Workload& workload, const std::string& key,
                                           const std::vector<Contender>& contenders,
                                           const SweepOptions& sweep,
                                           const std::string& paper_note);
// The folder beside the report that holds its SVG plots.
inline constexpr const char* kFiguresDir = "paper-figures";
// The SVG a panel's plot is written to, relative to the report's folder.
std::string panel_svg(const std::string& key);

// The normalized-latency threshold and first rate of a workload's sweep.
SweepOptions sweep_options_for(const Report& report, PaperWorkload workload,
                               const NamedProfile& profile);

// Fig. 13: the mean number of batched requests of each system at one rate (pools: the
// workloads' whole selections, traces drawn as Fig. 12's).
void batch_size_figure(Report& report, const NamedProfile& profile, const Workload& sharegpt,
                       const Workload& alpaca);

// Fig. 2: the KV pool's breakdown under each allocator, the pool always full.
void memory_breakdown(Report& report, const NamedProfile& profile, const Workload& workload,
                      const std::string& key);

// Figs. 14-15: parallel sampling and beam search throughput (Alpaca), memory saved (both).
// The workloads are pools (whole selections in file order).
void sharing_figure(Report& report, const NamedProfile& profile, const Workload& alpaca,
                    const Workload& sharegpt);

// Fig. 16: a shared few-shot prefix (translation), prefix caching vs Orca (Oracle).
void prefix_figure(Report& report, const NamedProfile& profile);

// Fig. 17: chatbot (history truncated to 1,024 tokens) against the three Orca baselines.
void chatbot_figure(Report& report, const NamedProfile& profile,
                    const std::vector<LengthPair>& sharegpt_rounds);

// One Markdown row for a panel of Figs. 14, 16 or 17: each contender's highest rate, then the
// first contender's ratio to each of the others, then the paper's number.
void summary_row(Report& report, const std::string& label, const std::string& paper,
                 const std::vector<SweepOutcome>& outcomes);

// Figs. 18-19: block size, and swap vs recompute, on ShareGPT at `rate`.
void preemption_figure(Report& report, const NamedProfile& profile, const Workload& sharegpt,
                       double rate);

// Fig. 12's ShareGPT panel under three cost models (linear, roofline, roofline + host).
void cost_model_ablation(Report& report, const NamedProfile& profile, const Workload& sharegpt);

// The paper's headline ratios beside ours, read back from report.results.
void comparison_section(Report& report, const std::vector<NamedProfile>& profiles);

// The real CPU executor on ShareGPT lengths scaled to a small model (not simulated).
void real_section(Report& report, const Workload& sharegpt_unscaled);

}  // namespace pagedserve::paper
