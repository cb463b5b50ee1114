// run_paper: which figures run on which profiles and workloads, the report's frame, the JSON.
#include "tools/paper/paper_bench.h"

#include <algorithm>
#include <fstream>
#include <stdexcept>

#include "tools/paper/figures.h"

namespace pagedserve::paper {

NamedProfile load_named_profile(const std::filesystem::path& path) {
  NamedProfile p;
  p.path = path;
  p.profile = actors::load_sim_profile(path);
  // "opt-13b-a100.json" -> "opt-13b": the model, which is what the paper's panels name.
  const std::string stem = path.stem().string();
  const size_t first = stem.find('-');
  const size_t second = first == std::string::npos ? first : stem.find('-', first + 1);
  p.id = stem.substr(0, second);
  return p;
}

namespace {

const char* kFig12Paper =
    "Paper (Fig. 12, ShareGPT): vLLM sustains 1.7-2.7x the rate of Orca (Oracle), 2.7-8x "
    "Orca (Max) and up to 22x FasterTransformer at the same latency.";
const char* kFig12AlpacaPaper =
    "Paper (Fig. 12, Alpaca): the same trend, smaller for OPT-175B, where the large KV cache "
    "leaves the baselines enough room and compute limits everyone.";

void header(Report& report, const std::vector<NamedProfile>& profiles) {
  const PaperOptions& o = report.options;
  std::ostream& md = report.md;
  md << "# Reproducing the PagedAttention paper (SIMULATED)\n\n"
     << "**Every number on this page is simulated** except the section marked *real CPU "
        "executor*: the real pagedserve scheduler and KV allocators serve the paper's "
        "workloads on `--device sim`, an executor that runs no model and charges each step the "
        "time of a linear cost model (the profiles of Table 1). No GPU was used. Paper: Kwon "
        "et al., \"Efficient Memory Management for Large Language Model Serving with "
        "PagedAttention\", SOSP 2023. Workloads: the ShareGPT lengths the paper's authors "
        "published (OPT tokenizer; their filter: input + output <= 2,048, means 161.31 / "
        "337.99), a 5,000-request Alpaca sample (CC BY-NC 4.0, Taori et al. 2023), and the "
        "Azure LLM inference traces 2023 (CC-BY 4.0, Patel et al., \"Splitwise\", ISCA 2024). "
        "Regenerate with:\n\n"
        "    pagedserve bench paper --traces ../shared/traces --out docs/RESULTS.md "
        "--result-json docs/results.json\n\n"
        "(`--workload sharegpt|alpaca|azure-conv|azure-code` runs only that workload's "
        "throughput panels; `--profile FILE`, repeatable, chooses the set-ups.)\n\n"
     << (o.quick ? "**--quick run: tiny workloads, for a smoke test only.**\n\n" : "");
  setup_table(report, profiles);
}

// Fig. 12: one panel per profile for `workload`.
void throughput_rows(Report& report, const std::vector<NamedProfile>& profiles,
                     PaperWorkload workload, int num) {
  const bool azure = workload == PaperWorkload::kAzureConv || workload == PaperWorkload::kAzureCode;
  report.md << "### " << (azure ? "Azure trace: " : "Fig. 12: ") << workload_name(workload)
            << "\n\n";
  for (const NamedProfile& p : profiles) {
    // The pool every rate's trace is drawn from: the whole selection, in file order.
    const Workload w =
        make_workload(select_lengths(workload, report.options.traces_root, -1,
                                     p.profile.max_model_len, report.options.seed, false),
                      0, report.options.seed, workload_name(workload));
    const SweepOptions sweep = sweep_options_for(report, workload, p);
    throughput_panel(
        report, p, w, std::string(workload_name(workload)) + "/" + p.id,
        paper_contenders(p.profile, true), sweep,
        azure ? "" : (workload == PaperWorkload::kAlpaca ? kFig12AlpacaPaper : kFig12Paper));
  }
}

bool has(const std::vector<PaperWorkload>& list, PaperWorkload w) {
  return std::find(list.begin(), list.end(), w) != list.end();
}

}  // namespace

void run_paper(const PaperOptions& options) {
  Report report{options, {}, {}, options.out_md.parent_path()};
  if (report.dir.empty()) report.dir = ".";
  std::filesystem::create_directories(report.dir);
  std::vector<NamedProfile> profiles;
  for (const auto& path : options.profiles) profiles.push_back(load_named_profile(path));
  if (profiles.empty()) throw std::invalid_argument("bench paper: no profile");
  const int num = options.quick ? std::min(options.num_requests, 60) : options.num_requests;
  header(report, profiles);

  report.md << "## Figs. 12-13: throughput at equal latency\n\n"
            << "Normalized latency = mean over requests of end-to-end latency / output "
               "tokens. For each system the rate grows 1.5x at a time until the latency passes "
               "the threshold, then bisects. Systems: vLLM = pagedserve's paged allocator "
               "(recompute preemption, whole-prompt admission as vLLM v0); Orca (Oracle / "
               "Pow2 / Max) = the same iteration-level scheduler with a contiguous region per "
               "request reserved for its true output length, the next power of two of it, or "
               "the whole context; FasterTransformer = request-level batching, max-length "
               "reservation, a new batch only when the last one finished.\n\n";
  for (PaperWorkload w : {PaperWorkload::kShareGpt, PaperWorkload::kAlpaca}) {
    if (has(options.workloads, w)) throughput_rows(report, profiles, w, num);
  }
  for (PaperWorkload w : {PaperWorkload::kAzureConv, PaperWorkload::kAzureCode}) {
    if (has(options.workloads, w)) throughput_rows(report, profiles, w, num);
  }

  std::ofstream out(options.out_md);
  if (!out) throw std::runtime_error("cannot write " + options.out_md.string());
  out << report.md.str();
  if (!options.result_json.empty()) {
    std::ofstream json(options.result_json);
    if (!json) throw std::runtime_error("cannot write " + options.result_json.string());
    json << report.results.dump(2) << "\n";
  }
}

}  // namespace pagedserve::paper
