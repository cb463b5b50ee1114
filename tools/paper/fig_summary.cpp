// The report's last table: each of the paper's headline ratios beside ours (read back from the
// JSON results of the sections that ran), and what explains each difference.
#include <optional>

#include "tools/paper/figures.h"

namespace pagedserve::paper {
namespace {

using Json = nlohmann::ordered_json;

// The highest rate `system` sustained in panel `key`, when that panel ran.
std::optional<double> rate_of(const Json& results, const std::string& key,
                              const std::string& system) {
  if (!results.contains("throughput") || !results["throughput"].contains(key)) return std::nullopt;
  for (const Json& s : results["throughput"][key]["systems"]) {
    if (s["system"] == system) return s["max_rate"].get<double>();
  }
  return std::nullopt;
}

// "1.54x" for `top`'s rate over `system`'s in panel `key`, or "" when it did not run.
std::string over(const Json& results, const std::string& key, const std::string& system,
                 const std::string& top = "vLLM (paged)") {
  const auto numerator = rate_of(results, key, top);
  const auto denominator = rate_of(results, key, system);
  if (!numerator || !denominator) return "";
  return ratio(*numerator, *denominator);
}

void row(std::ostream& md, const std::string& what, const std::string& paper,
         const std::string& ours, const std::string& why) {
  if (ours.empty()) return;
  md << "| " << what << " | " << paper << " | " << ours << " | " << why << " |\n";
}

// "exact 1.54x, buddy 1.92x" for an Orca policy in one panel.
std::string both(const Json& results, const std::string& key, const std::string& orca) {
  const std::string exact = over(results, key, "Orca (" + orca + ")");
  const std::string buddy = over(results, key, "Orca (" + orca + "), buddy");
  if (exact.empty()) return "";
  return "exact " + exact + (buddy.empty() ? "" : ", buddy " + buddy);
}

const char* kWhyOracle =
    "The paper's Orca used buddy allocation (power-of-two regions); our buddy rows are that "
    "baseline and reproduce its Fig. 2 shares. Exact-size first-fit regions are a stronger "
    "Orca than the paper built. The cost model moves the ratio too (ablation table).";

void throughput_rows(std::ostream& md, const Json& results,
                     const std::vector<NamedProfile>& profiles) {
  for (const char* workload : {"sharegpt", "alpaca"}) {
    const bool share = std::string(workload) == "sharegpt";
    for (const NamedProfile& p : profiles) {
      const std::string key = std::string(workload) + "/" + p.id;
      row(md, "Fig. 12 " + key + ": vLLM / Orca (Oracle)",
          share ? "1.7-2.7x (over the three models)" : "smaller than ShareGPT",
          both(results, key, "Oracle"), kWhyOracle);
      row(md, "Fig. 12 " + key + ": vLLM / Orca (Max)", share ? "2.7-8x" : "large",
          over(results, key, "Orca (Max)"),
          "Max reserves 2,048 slots a request: batch ~7 for OPT-13B, as the paper's Fig. 13.");
      row(md, "Fig. 12 " + key + ": vLLM / FasterTransformer", share ? "up to 22x" : "large",
          over(results, key, "FasterTransformer"),
          "Request-level batching at max-length reservation; ours charges only unfinished "
          "sequences' compute (its best version).");
    }
  }
}

void sharing_rows(std::ostream& md, const Json& results, const std::string& id) {
  row(md, "Fig. 14 parallel n = 1: vLLM / Orca (Oracle)", "1.3x",
      both(results, "parallel1/" + id, "Oracle"), kWhyOracle);
  row(md, "Fig. 14 beam width 6: vLLM / Orca (Oracle)", "2.3x",
      both(results, "beam6/" + id, "Oracle"),
      "Orca reserves 2 x width - 1 regions a request (beams fork before losers free).");
  for (auto [tokens, paper] : {std::pair{80, "1.67x"}, {341, "3.58x"}}) {
    const std::string key = "prefix" + std::to_string(tokens) + "/" + id;
    const std::string exact = over(results, key, "Orca (Oracle)", "vLLM (prefix caching)");
    const std::string buddy = over(results, key, "Orca (Oracle), buddy", "vLLM (prefix caching)");
    row(md, "Fig. 16 " + std::to_string(tokens) + "-token prefix: vLLM / Orca (Oracle)", paper,
        exact.empty() ? "" : "exact " + exact + ", buddy " + buddy,
        "Synthesized sentence lengths (no WMT16 here): the prefix's share of a prompt, and so "
        "the saving, depends on them.");
  }
  row(md, "Fig. 17 chatbot: vLLM / Orca (Oracle)", "2x", both(results, "chatbot/" + id, "Oracle"),
      "Synthesized conversations; the paper's buddy Orca reserves 1,024 output slots behind a "
      "1,024-token prompt, our exact Oracle only the true output.");
}

const char* kWhy =
    "### Why our ratios differ\n\n"
    "1. **The baseline.** The paper implemented its own Orca \"assuming the use of buddy "
    "allocation\" (§6.1; §6.5 blames buddy allocation for the Orca baselines reserving 1,024 "
    "output slots in the chatbot). Our buddy rows are that baseline: they reproduce the paper's "
    "Fig. 2 token-state shares and its Fig. 13 batch sizes at 2 req/s within a few percent "
    "(Orca Oracle / Pow2 / Max). Our exact-size first-fit Orca is a stronger baseline than the "
    "paper's, so vLLM's margin over it is smaller; we show both rather than weaken either.\n"
    "2. **The cost model** (the ablation table under Fig. 12). Throughput at equal latency is "
    "batch / step time, and vLLM's gain is a bigger batch. A linear model charges every extra "
    "sequence its compute on top of the weights' streaming, so a bigger batch buys less; a GPU "
    "overlaps the two (roofline), and host overhead flattens the step time further. The "
    "paper's engine also ran slower steps than our profile: by Little's law its Fig. 13 batch "
    "(30.42 sequences at 2 req/s, 338 output tokens each) means ~45 ms a step, against ~35 ms "
    "at that batch here, so more host time per step; twice our host overhead raises vLLM's "
    "margin (last ablation row).\n"
    "3. **Compute-bound set-ups.** OPT-175B's 60K-slot cache lets every system batch 50-250 "
    "sequences, where the compute term (b x tokens) overtakes the memory term and the step "
    "time grows with the batch, so memory saved buys less throughput; the paper reports the "
    "same for OPT-175B on Alpaca, and on ShareGPT our OPT-175B ratio falls below its range.\n"
    "4. **Alpaca's host cost per sequence.** At 30 req/s the paper's vLLM held 132 requests "
    "(~75 ms a step by Little's law) where ours holds ~51 at ~29 ms: the paper's per-step host "
    "work grew with the batch (Python per sequence), which a constant host overhead does not "
    "model, so our Alpaca panels are less loaded at the paper's rates.\n"
    "5. **Sharing.** Beam memory savings come out above the paper's range at width 4-6: the "
    "simulator's beams never end early (no EOS: every beam runs to the request's length), so "
    "they keep sharing their common prefix to the end. Drawing beam candidates per beam "
    "instead of one fixed ranking moves the savings by under a point (Fig. 15's \"drawn\" "
    "columns): it does not change the answer. Fig. 16's prefix gains are above the paper's: "
    "our prefix caching also skips the shared prefix's prefill (\"caching / no caching\"), "
    "and the sentence lengths are synthesized.\n"
    "6. **Block size and preemption.** The cost model has no per-block kernel inefficiency, "
    "so the smallest blocks (least last-block waste) win end to end, where the paper's "
    "kernel lost speed below 16; and recompute, a compute-bound prefill under the roofline, "
    "costs more than swapping a sequence over PCIe at every block size here.\n\n";

}  // namespace

void comparison_section(Report& report, const std::vector<NamedProfile>& profiles) {
  std::ostream& md = report.md;
  const Json& results = report.results;
  md << "## Ours vs the paper: the headline ratios\n\n"
     << "Read back from the tables above (threshold-based rates; \"exact\" = our Orca with "
        "exact-size first-fit regions, \"buddy\" = as the paper implemented it).\n\n"
     << "| figure | paper | ours (simulated) | what explains the difference |\n"
     << "| --- | --- | --- | --- |\n";
  if (results.contains("memory_breakdown") && results["memory_breakdown"].contains("sharegpt")) {
    const Json& m = results["memory_breakdown"]["sharegpt"];
    std::string ours;
    for (const char* s : {"vLLM (paged)", "Orca (Oracle)", "Orca (Oracle), buddy", "Orca (Pow2)",
                          "Orca (Pow2), buddy", "Orca (Max)"}) {
      if (m.contains(s))
        ours += std::string(ours.empty() ? "" : "; ") + s + " " + pct(m[s]["token"]);
    }
    row(md, "Fig. 2 token states (ShareGPT)",
        "vLLM 96.3%; Orca (Oracle) 38.2%, (Pow2) 26.8%, (Max) 20.4%", ours,
        "Buddy rounding is most of the gap between exact Orca and the paper's; vLLM's share is "
        "time-averaged over a replay whose pool drains at the end.");
  }
  throughput_rows(md, results, profiles);
  sharing_rows(md, results, profiles.front().id);
  md << "\n" << kWhy;
}

}  // namespace pagedserve::paper
