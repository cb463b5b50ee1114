// Figs. 14-17: sharing KV blocks: parallel sampling and beam search, a shared prefix, and the
// chatbot (where the reserving baselines cannot guess the output length).
#include "tools/paper/figures.h"

namespace pagedserve::paper {
namespace {

using cache::KvAllocatorKind;

SimRunConfig reserving(KvAllocatorKind kind, bool buddy) {
  SimRunConfig config;
  config.allocator = kind;
  config.buddy_regions = buddy;
  return config;
}

// Memory saved by sharing, paged, every request all at once (the pool stays full).
double offline_saving(Report& report, const NamedProfile& profile, const Workload& pool, int n,
                      bool beam, bool random_candidates) {
  std::vector<SimRequest> requests =
      offline_batch(pool.requests, offline_requests(report.options) / 2, report.options.seed);
  for (SimRequest& r : requests) {
    r.n = n;
    r.beam_search = beam;
  }
  SimRunConfig config;
  config.preemption = actors::PreemptionMode::kSwap;  // vLLM v0 swapped groups of several
  config.num_cpu_blocks = static_cast<int>(
      (int64_t{4} << 30) / (profile.profile.kv_bytes_per_token * config.block_size));
  config.random_beam_candidates = random_candidates;
  const SimRunResult r = run_sim(profile.profile, config, requests);
  return r.mean_logical_blocks > 0 ? 1.0 - r.mean_physical_blocks / r.mean_logical_blocks : 0.0;
}

// Fig. 15's table: memory saved per workload, fixed and per-beam candidate rankings.
void memory_saving_table(Report& report, const NamedProfile& profile, const Workload& alpaca,
                         const Workload& sharegpt) {
  std::ostream& md = report.md;
  md << "### Fig. 15: memory saved by sharing (" << profile.id << ")\n\n"
     << "1 - (distinct blocks held) / (blocks the sequences' tables name), time-averaged, "
        "vLLM (paged, swap preemption as vLLM v0 for groups), "
     << offline_requests(report.options) / 2
     << " requests all at once. Beam candidates: \"fixed\" = every beam proposes the same "
        "falling logprobs (the best beam wins every fork); \"drawn\" = each beam draws its own "
        "at each position (exponential gaps), so survivors come from several beams as with a "
        "real model.\n\n"
     << "| workload | Alpaca (fixed) | Alpaca (drawn) | paper, Alpaca | ShareGPT (fixed) | "
        "ShareGPT (drawn) | paper, ShareGPT |\n| --- | --- | --- | --- | --- | --- | --- |\n";
  for (bool beam : {false, true}) {
    for (int n : {2, 4, 6}) {
      const std::string what = (beam ? "beam width " : "parallel n = ") + std::to_string(n);
      double saved[4];
      int k = 0;
      for (const Workload* w : {&alpaca, &sharegpt}) {
        for (bool drawn : {false, true})
          saved[k++] = offline_saving(report, profile, *w, n, beam, drawn);
      }
      md << "| " << what << " | " << pct(saved[0]) << " | " << pct(saved[1]) << " | "
         << (beam ? "37.6% - 55.2%" : "6.1% - 9.8%") << " | " << pct(saved[2]) << " | "
         << pct(saved[3]) << " | " << (beam ? "44.3% - 66.3%" : "16.2% - 30.5%") << " |\n";
      report.results["memory_saved"][what] = {{"alpaca_fixed", saved[0]},
                                              {"alpaca_drawn", saved[1]},
                                              {"sharegpt_fixed", saved[2]},
                                              {"sharegpt_drawn", saved[3]}};
      report.note("memory saved " + what);
    }
  }
  md << "\nThe paper gives ranges over n (its Fig. 15); parallel sampling shares only the "
        "prompt, so its saving grows with the prompt's share of a sequence (ShareGPT's prompts "
        "are longer than Alpaca's).\n\n";
}

}  // namespace

void sharing_figure(Report& report, const NamedProfile& profile, const Workload& alpaca,
                    const Workload& sharegpt) {
  std::ostream& md = report.md;
  md << "## Figs. 14-15: parallel sampling and beam search (" << profile.id << ", Alpaca)\n\n"
     << "Every request asks for n samples (parallel sampling: vLLM shares the prompt's blocks) "
        "or a beam of width n (beams share their common prefix, copy-on-write at forks). The "
        "Orca baselines reserve a region per sequence (beams: 2 x width - 1, as forks happen "
        "before losers free). vLLM preempts by swapping (v0 recomputed only single sequences). "
        "Highest rate under the threshold (req/s); paper: vLLM over Orca (Oracle) goes from "
        "1.3x (n = 1) to 2.3x (beam width 6), more for larger n.\n\n"
     << "| workload | vLLM | Orca (Oracle) | Orca (Pow2) | Orca (Max) | Orca (Oracle), buddy | "
        "vLLM / Oracle | / Pow2 | / Max | / Oracle buddy | paper |\n"
     << "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
  SweepOptions sweep = sweep_options_for(report, PaperWorkload::kAlpaca, profile);
  std::vector<Contender> contenders = sharing_contenders(profile.profile);
  contenders.push_back(sim_contender(profile.profile, "Orca (Oracle), buddy",
                                     reserving(KvAllocatorKind::kReserveOracle, true)));
  for (auto [beam, n] :
       {std::pair{false, 1}, {false, 2}, {false, 4}, {false, 6}, {true, 2}, {true, 4}, {true, 6}}) {
    Workload w = alpaca;
    for (SimRequest& r : w.requests) {
      r.n = n;
      r.beam_search = beam;
    }
    const std::string what = (beam ? "beam width " : "parallel n = ") + std::to_string(n);
    const std::string key =
        std::string(beam ? "beam" : "parallel") + std::to_string(n) + "/" + profile.id;
    const std::vector<SweepOutcome> outcomes =
        run_panel(report, profile, w, key, contenders, sweep);
    const char* paper = n == 1 ? "1.3x over Oracle" : (beam && n == 6 ? "2.3x over Oracle" : "");
    summary_row(report, what, paper, outcomes);
  }
  md << "\nPlots: " << kFiguresDir << "/fig_parallelN_" << profile.id << ".svg and fig_beamN_"
     << profile.id << ".svg (N = the width).\n\n";
  memory_saving_table(report, profile, alpaca, sharegpt);
}

void prefix_figure(Report& report, const NamedProfile& profile) {
  std::ostream& md = report.md;
  md << "## Fig. 16: shared prefix (" << profile.id << ", translation)\n\n"
     << "The paper translates WMT16 English to German with LLaMA-13B (the same size as "
        "OPT-13B, so the same profile), every prompt a shared few-shot prefix (1-shot: 80 "
        "tokens; 5-shot: 341) then a sentence. We have no WMT16 lengths here, so the "
        "sentences are synthesized: inputs log-normal with median 28 tokens (sigma 0.5, "
        "clipped to 4-128), outputs 0.9-1.4x the input. vLLM caches the prefix's blocks "
        "(automatic prefix caching) and shares them; the Orca baselines cannot share.\n\n"
     << "| prefix | vLLM (prefix caching) | vLLM (no caching) | Orca (Oracle) | Orca (Oracle), "
        "buddy | caching / no caching | caching / Oracle | caching / Oracle buddy | paper: vLLM "
        "/ Orca (Oracle) |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
  SimRunConfig cached;
  cached.prefix_caching = true;
  const std::vector<Contender> contenders = {
      sim_contender(profile.profile, "vLLM (prefix caching)", cached),
      sim_contender(profile.profile, "vLLM (no caching)", SimRunConfig{}),
      sim_contender(profile.profile, "Orca (Oracle)",
                    reserving(KvAllocatorKind::kReserveOracle, false)),
      sim_contender(profile.profile, "Orca (Oracle), buddy",
                    reserving(KvAllocatorKind::kReserveOracle, true))};
  const SweepOptions sweep = sweep_options_for(report, PaperWorkload::kAlpaca, profile);
  const std::vector<LengthPair> sentences =
      translation_lengths(report.options.quick ? 100 : 20000, report.options.seed);
  for (auto [tokens, label, paper] : {std::tuple{80, "1-shot (80 tokens)", "1.67x"},
                                      std::tuple{341, "5-shot (341 tokens)", "3.58x"}}) {
    const Workload w =
        make_workload(sentences, tokens, report.options.seed, "synthesized translation sentences");
    const std::vector<SweepOutcome> outcomes =
        run_panel(report, profile, w, "prefix" + std::to_string(tokens) + "/" + profile.id,
                  contenders, sweep);
    summary_row(report, label, paper, outcomes);
  }
  md << "\n";
}

void chatbot_figure(Report& report, const NamedProfile& profile,
                    const std::vector<LengthPair>& sharegpt_rounds) {
  std::ostream& md = report.md;
  md << "## Fig. 17: chatbot (" << profile.id << ")\n\n"
     << "Each request is one turn of a conversation: the history (earlier inputs and outputs) "
        "and the new input, truncated to the last 1,024 tokens; outputs up to 1,024 tokens. "
        "We have only the first round of each ShareGPT conversation, so conversations are "
        "synthesized from consecutive rounds of the file (1-8 turns each, uniformly). The "
        "paper: with prompts of ~1,024 tokens, buddy allocation makes all three Orca baselines "
        "reserve 1,024 output slots whatever they predict, and vLLM sustains 2x their rate.\n\n"
     << "| workload | vLLM | Orca (Oracle) | Orca (Pow2) | Orca (Max) | Orca (Oracle), buddy | "
        "Orca (Pow2), buddy | vLLM / Oracle | / Pow2 | / Max | / Oracle buddy | / Pow2 buddy | "
        "paper |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- "
        "|\n";
  const Workload w =
      make_workload(chatbot_lengths(sharegpt_rounds, report.options.quick ? 100 : 30000, 1024, 1024,
                                    report.options.seed),
                    0, report.options.seed, "synthesized ShareGPT conversations");
  const std::vector<SweepOutcome> outcomes = run_panel(
      report, profile, w, "chatbot/" + profile.id, paper_contenders(profile.profile, false),
      sweep_options_for(report, PaperWorkload::kShareGpt, profile));
  summary_row(report, w.description, "2x over each", outcomes);
  md << "\n![chatbot](" << panel_svg("chatbot/" + profile.id) << ")\n\n";
}

}  // namespace pagedserve::paper
