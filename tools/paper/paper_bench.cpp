// run_paper: which figures run on which profiles and workloads, the report's frame, the JSON.
#include "tools/paper/paper_bench.h"

#include <algorithm>
#include <fstream>
#include <map>
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
        "time of a cost model (the profiles of Table 1). No GPU was used. Paper: Kwon "
        "et al., \"Efficient Memory Management for Large Language Model Serving with "
        "PagedAttention\", SOSP 2023. Workloads: the ShareGPT lengths the paper's authors "
        "published (OPT tokenizer; their filter: input + output <= 2,048, means 161.31 / "
        "337.99), a 5,000-request Alpaca sample (CC BY-NC 4.0, Taori et al. 2023), and the "
        "Azure LLM inference traces 2023 (CC-BY 4.0, Patel et al., \"Splitwise\", ISCA 2024). "
        "Regenerate with:\n\n"
        "    pagedserve make-model --out /tmp/real-model --hidden 512 --layers 6 --heads 8 "
        "--ffn 1376 --vocab 4096 --context 1024\n"
        "    pagedserve bench paper --traces ../shared/traces --out docs/RESULTS.md "
        "--result-json docs/results.json --real-model /tmp/real-model\n\n"
        "(about 30 minutes on 2 cores; without `--real-model` no real CPU section.) "
        "(`--workload sharegpt|alpaca|azure-conv|azure-code` runs only that workload's "
        "throughput panels; `--profile FILE`, repeatable, chooses the set-ups.)\n\n"
     << (o.quick ? "**--quick run: tiny workloads, for a smoke test only.**\n\n" : "");
  setup_table(report, profiles);
}

// The pools every Fig. 12 trace is drawn from: each workload's whole selection, in file order,
// built once per run (reading the file and drawing ~13M token ids is the slow part).
class Pools {
 public:
  explicit Pools(const Report& report) : report_(report) {}

  const Workload& get(PaperWorkload workload, int max_model_len) {
    auto [it, added] = pools_.try_emplace({workload, max_model_len});
    if (added) {
      const PaperOptions& o = report_.options;
      const int rows = o.quick ? 400 : -1;  // --quick: a smoke test, small pools
      it->second =
          make_workload(select_lengths(workload, o.traces_root, rows, max_model_len, o.seed, false),
                        0, o.seed, workload_name(workload));
    }
    return it->second;
  }

 private:
  const Report& report_;
  std::map<std::pair<PaperWorkload, int>, Workload> pools_;
};

// Fig. 12: one panel per profile for `workload`; returns each panel's vLLM rate.
std::vector<double> throughput_rows(Report& report, Pools& pools,
                                    const std::vector<NamedProfile>& profiles,
                                    PaperWorkload workload) {
  const bool azure = workload == PaperWorkload::kAzureConv || workload == PaperWorkload::kAzureCode;
  report.md << "### " << (azure ? "Azure trace: " : "Fig. 12: ") << workload_name(workload)
            << "\n\n";
  std::vector<double> vllm_rates;
  for (const NamedProfile& p : profiles) {
    const Workload& w = pools.get(workload, p.profile.max_model_len);
    const std::vector<SweepOutcome> outcomes = throughput_panel(
        report, p, w, std::string(workload_name(workload)) + "/" + p.id,
        paper_contenders(p.profile, true), sweep_options_for(report, workload, p),
        azure ? "" : (workload == PaperWorkload::kAlpaca ? kFig12AlpacaPaper : kFig12Paper));
    vllm_rates.push_back(outcomes.front().max_rate);
  }
  return vllm_rates;
}

bool has(const std::vector<PaperWorkload>& list, PaperWorkload w) {
  return std::find(list.begin(), list.end(), w) != list.end();
}

void write_outputs(const Report& report) {
  const PaperOptions& options = report.options;
  std::ofstream out(options.out_md);
  if (!out) throw std::runtime_error("cannot write " + options.out_md.string());
  out << report.md.str();
  if (!options.result_json.empty()) {
    std::ofstream json(options.result_json);
    if (!json) throw std::runtime_error("cannot write " + options.result_json.string());
    json << report.results.dump(2) << "\n";
  }
}

// Figs. 14-19 and the real runs, on the first profile (the paper's OPT-13B set-up).
void single_setup_figures(Report& report, Pools& pools, const NamedProfile& first,
                          double vllm_sharegpt_rate) {
  const int len = first.profile.max_model_len;
  const Workload& sharegpt = pools.get(PaperWorkload::kShareGpt, len);
  const Workload& alpaca = pools.get(PaperWorkload::kAlpaca, len);
  sharing_figure(report, first, alpaca, sharegpt);
  prefix_figure(report, first);
  std::vector<LengthPair> rounds;
  for (const SimRequest& r : sharegpt.requests) {
    rounds.push_back({static_cast<int64_t>(r.prompt_token_ids.size()), r.output_len});
  }
  chatbot_figure(report, first, rounds);
  preemption_figure(report, first, sharegpt,
                    vllm_sharegpt_rate > 0 ? 0.9 * vllm_sharegpt_rate : 1.0);
  if (!report.options.real_model.empty()) {
    real_section(report,
                 load_workload(PaperWorkload::kShareGpt, report.options.traces_root,
                               report.options.real_num_requests, len, 0, report.options.seed));
  }
}

void throughput_figures(Report& report, Pools& pools, const std::vector<NamedProfile>& profiles,
                        double& vllm_sharegpt_rate) {
  const PaperOptions& options = report.options;
  report.md << "## Figs. 12-13: throughput at equal latency\n\n"
            << "Normalized latency = mean over requests of end-to-end latency / output tokens. "
               "For each system the rate climbs a geometric grid (x1.12) until the latency is "
               "well past the threshold; the highest rate under it is interpolated. Systems: "
               "vLLM = pagedserve's paged allocator (recompute preemption, whole-prompt "
               "admission as vLLM v0); Orca (Oracle / Pow2 / Max) = the same iteration-level "
               "scheduler with one contiguous region per request, reserved for its true output "
               "length, the next power of two of it, or the whole context (first-fit, exact "
               "sizes); \"buddy\" rows = the same rounded to a power of two of blocks and "
               "aligned, the buddy allocation the paper's own Orca implementation assumed; "
               "FasterTransformer = request-level batching (up to as many max-length "
               "reservations as fit, a new batch only when the last finished).\n\n";
  for (PaperWorkload w : {PaperWorkload::kShareGpt, PaperWorkload::kAlpaca}) {
    if (!has(options.workloads, w)) continue;
    const std::vector<double> rates = throughput_rows(report, pools, profiles, w);
    if (w == PaperWorkload::kShareGpt) vllm_sharegpt_rate = rates.front();
  }
  if (has(options.workloads, PaperWorkload::kShareGpt)) {
    cost_model_ablation(
        report, profiles.front(),
        pools.get(PaperWorkload::kShareGpt, profiles.front().profile.max_model_len));
  }
  if (has(options.workloads, PaperWorkload::kShareGpt) &&
      has(options.workloads, PaperWorkload::kAlpaca)) {
    const int len = profiles.front().profile.max_model_len;
    batch_size_figure(report, profiles.front(), pools.get(PaperWorkload::kShareGpt, len),
                      pools.get(PaperWorkload::kAlpaca, len));
  }
}

void azure_section(Report& report, Pools& pools, const std::vector<NamedProfile>& profiles) {
  const PaperOptions& options = report.options;
  if (!has(options.workloads, PaperWorkload::kAzureConv) &&
      !has(options.workloads, PaperWorkload::kAzureCode)) {
    return;
  }
  report.md << "## Azure LLM inference traces (2023)\n\n"
            << "Not the paper's workloads: production traces whose prompts are long (median "
               "~1,000 tokens for conversation, ~1,500 for code, against ShareGPT's ~35), so "
               "the prompt every allocator must hold dominates, and an output reservation "
               "wastes a smaller share; the gains shrink accordingly. Lengths clipped to the "
               "context (output first to half of it, then the prompt).\n\n";
  if (options.all_figures && has(options.workloads, PaperWorkload::kAzureConv)) {
    memory_breakdown(report, profiles.front(),
                     pools.get(PaperWorkload::kAzureConv, profiles.front().profile.max_model_len),
                     "azure-conv");
  }
  for (PaperWorkload w : {PaperWorkload::kAzureConv, PaperWorkload::kAzureCode}) {
    if (has(options.workloads, w)) throughput_rows(report, pools, profiles, w);
  }
}

}  // namespace

void run_paper(const PaperOptions& options) {
  Report report{options, {}, {}, options.out_md.parent_path()};
  if (report.dir.empty()) report.dir = ".";
  std::filesystem::create_directories(report.dir / kFiguresDir);
  std::vector<NamedProfile> profiles;
  for (const auto& path : options.profiles) profiles.push_back(load_named_profile(path));
  if (profiles.empty()) throw std::invalid_argument("bench paper: no profile");
  header(report, profiles);
  Pools pools(report);
  const NamedProfile& first = profiles.front();
  if (options.all_figures) {
    report.md << "## Fig. 2: where the KV memory goes\n\n";
    memory_breakdown(report, first,
                     pools.get(PaperWorkload::kShareGpt, first.profile.max_model_len), "sharegpt");
  }
  double vllm_sharegpt_rate = 0;
  throughput_figures(report, pools, profiles, vllm_sharegpt_rate);
  if (options.all_figures) single_setup_figures(report, pools, first, vllm_sharegpt_rate);
  azure_section(report, pools, profiles);
  comparison_section(report, profiles);
  write_outputs(report);
}

}  // namespace pagedserve::paper
