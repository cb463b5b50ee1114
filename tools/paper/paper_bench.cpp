// The paper's experiments over run_sim, and the markdown report.
#include "tools/paper/paper_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <stdexcept>

#include "actors/engine_setup.h"
#include "tools/loadgen/schedule.h"
#include "tools/loadgen/svg_plot.h"
#include "tools/loadgen/trace.h"
#include "tools/paper/sim_run.h"

namespace pagedserve::paper {
std::string fmt(const char* format, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), format, value);
  return buffer;
}

namespace {}  // namespace

Workload load_workload(const std::filesystem::path& path, int num, int max_model_len,
                       int prefix_tokens, unsigned seed) {
  loadgen::TraceReadResult read =
      loadgen::read_trace_file(path.string(), loadgen::BadLinePolicy::kSkip);
  std::vector<loadgen::TraceRequest> slice = loadgen::slice(read.requests, 0, num);
  const int64_t clipped = loadgen::fit_to_context(slice, prefix_tokens, max_model_len);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> id(100, 50000);
  std::vector<int32_t> prefix(prefix_tokens);
  for (int32_t& t : prefix) t = id(rng);
  Workload w;
  double prompt_sum = 0, output_sum = 0;
  for (const loadgen::TraceRequest& t : slice) {
    SimRequest r;
    r.prompt_token_ids = prefix;
    for (int64_t i = 0; i < t.prompt_tokens; ++i) r.prompt_token_ids.push_back(id(rng));
    r.output_len = static_cast<int>(std::max<int64_t>(t.max_tokens.value_or(1), 1));
    prompt_sum += static_cast<double>(r.prompt_token_ids.size());
    output_sum += r.output_len;
    w.requests.push_back(std::move(r));
  }
  const double n = std::max<double>(static_cast<double>(w.requests.size()), 1.0);
  w.description = std::to_string(w.requests.size()) + " requests from " + path.filename().string() +
                  " (mean prompt " + fmt("%.0f", prompt_sum / n) + ", mean output " +
                  fmt("%.0f", output_sum / n) + " tokens; " + std::to_string(clipped) +
                  " clipped to the " + std::to_string(max_model_len) + "-token context)";
  return w;
}

std::vector<SimRequest> at_rate(std::vector<SimRequest> requests, double rate, unsigned seed) {
  const std::vector<double> arrivals = loadgen::rate_arrivals(requests.size(), rate, 1.0, seed);
  for (size_t i = 0; i < requests.size(); ++i) requests[i].arrival_s = arrivals[i];
  return requests;
}

namespace {

using cache::kv_allocator_name;
using cache::KvAllocatorKind;

const KvAllocatorKind kAllocators[] = {KvAllocatorKind::kPaged, KvAllocatorKind::kReserveOracle,
                                       KvAllocatorKind::kReservePow2, KvAllocatorKind::kReserveMax};

std::string pct(double share) { return fmt("%.1f%%", 100.0 * share); }

struct Ctx {
  const PaperOptions& options;
  actors::SimProfile profile;
  std::ostringstream md;
  std::filesystem::path dir;
  void note(const std::string& line) const {
    if (options.progress) options.progress(line);
  }
};

// ---- 1. memory breakdown ----

void memory_breakdown(Ctx& ctx, const Workload& conv) {
  std::ostream& md = ctx.md;
  md << "## 1. KV memory breakdown (paper Fig. 2)\n\n"
     << "Share of the KV pool, averaged over the replay (weighted by step time), of "
     << conv.description << ", all submitted at once (the pool stays full). Same scheduler, "
     << "same pool, block size 16; only `--kv-allocator` differs.\n\n"
     << "| allocator | token states | reserved (future tokens) | internal fragmentation | "
        "external fragmentation | free | paper: token states |\n"
     << "| --- | --- | --- | --- | --- | --- | --- |\n";
  const std::map<KvAllocatorKind, std::string> paper = {{KvAllocatorKind::kPaged, "96.3%"},
                                                        {KvAllocatorKind::kReserveOracle, "38.2%"},
                                                        {KvAllocatorKind::kReservePow2, "26.8%"},
                                                        {KvAllocatorKind::kReserveMax, "20.4%"}};
  for (KvAllocatorKind kind : kAllocators) {
    SimRunConfig config;
    config.allocator = kind;
    const SimRunResult r = run_sim(ctx.profile, config, conv.requests);
    const MemoryShares& m = r.memory;
    md << "| " << cache::kv_allocator_name(kind) << " | " << pct(m.token) << " | "
       << pct(m.reserved) << " | " << pct(m.internal) << " | " << pct(m.external) << " | "
       << pct(m.free) << " | " << paper.at(kind) << " |\n";
    ctx.note(std::string("breakdown ") + cache::kv_allocator_name(kind) + ": token " +
             pct(m.token));
  }
  md << "\nThe paper's column is the share of KV memory holding token states in its Fig. 2 "
        "(OPT-13B, ShareGPT-like traffic; Orca (Oracle), Orca (Pow2), Orca (Max), vLLM). "
        "\"Reserved\" counts slots a sequence will still fill (we know each request's true "
        "output length from the trace); \"internal\" the slots it never will (a region's tail "
        "beyond the true length, or the unused tail of a paged sequence's last block); "
        "\"external\" the free slots outside the largest free hole (usable only by a request "
        "small enough). Differences: the Azure conversation prompts (median ~1,000 tokens) "
        "are far longer than ShareGPT's, and prompt slots are token states under every "
        "allocator, so the baselines waste a smaller share than in the paper. reserve-oracle, "
        "told the exact output length, has almost no internal fragmentation: what it loses "
        "is the reservation for tokens not generated yet and the holes between regions of "
        "different sizes (reserve-max's regions are all one size, so it has no holes). The "
        "paper's Fig. 2 was measured in its ShareGPT/OPT-13B experiment; we measure an "
        "offline replay with the pool always full.\n\n";
}

// ---- 2. throughput at equal latency ----

struct SweepPoint {
  double rate = 0;
  double latency = 0;
};

// CPU swap blocks in 4 GiB (vLLM's default swap space).
int swap_blocks(const actors::SimProfile& profile, int block_size) {
  return static_cast<int>((int64_t{4} << 30) / (profile.kv_bytes_per_token * block_size));
}

struct Variant {
  KvAllocatorKind kind;
  bool swap;  // paged only: preempt by swapping (4 GiB) instead of recomputing
  std::string label;
  bool whole_prompt = true;  // SchedulerConfig::admit_whole_prompt_only
};

struct SweepOutcome {
  std::vector<SweepPoint> points;
  double max_rate = 0;
  SimRunResult at_max;  // the run at max_rate
};

// Rates from `start`, x1.25 until latency passes the threshold, then bisection (3 steps).
SweepOutcome sweep(Ctx& ctx, const Variant& v, const Workload& w, double start, double threshold) {
  SweepOutcome out;
  auto run_at = [&](double rate) {
    SimRunConfig config;
    config.allocator = v.kind;
    if (v.swap) {
      config.preemption = actors::PreemptionMode::kSwap;
      config.num_cpu_blocks = swap_blocks(ctx.profile, config.block_size);
    }
    config.admit_whole_prompt_only = v.whole_prompt;
    const SimRunResult r =
        run_sim(ctx.profile, config, at_rate(w.requests, rate, ctx.options.seed));
    const double latency = r.failed > 0 ? INFINITY : r.normalized_latency_s;
    out.points.push_back({rate, latency});
    if (latency <= threshold && rate >= out.max_rate) {
      out.max_rate = rate;
      out.at_max = r;
    }
    ctx.note("  " + v.label + " rate " + fmt("%.3f", rate) + ": latency " + fmt("%.3f", latency) +
             ", batch " + fmt("%.1f", r.mean_running_seqs) + ", preemptions " +
             std::to_string(r.preemptions));
    return latency;
  };
  const int max_steps = ctx.options.quick ? 6 : 30;
  double good = 0, bad = 0;
  for (double rate = start; out.points.size() < static_cast<size_t>(max_steps); rate *= 1.25) {
    if (run_at(rate) > threshold) {
      bad = rate;
      break;
    }
    good = rate;
  }
  for (int i = 0; i < (ctx.options.quick ? 1 : 3) && bad > 0 && good > 0; ++i) {
    const double mid = 0.5 * (good + bad);
    (run_at(mid) > threshold ? bad : good) = mid;
  }
  out.max_rate = good;
  std::sort(out.points.begin(), out.points.end(),
            [](const SweepPoint& a, const SweepPoint& b) { return a.rate < b.rate; });
  return out;
}

void throughput_section(Ctx& ctx, const Workload& w, const std::string& name, double start,
                        double threshold, const std::string& svg_name) {
  std::ostream& md = ctx.md;
  std::vector<loadgen::PlotSeries> series;
  std::vector<Variant> variants = {
      {KvAllocatorKind::kPaged, false, "paged (recompute)", true},
      {KvAllocatorKind::kPaged, true, "paged (swap)", true},
      {KvAllocatorKind::kPaged, false, "paged (recompute, chunk admission)", false}};
  for (KvAllocatorKind kind : kAllocators) {
    if (kind != KvAllocatorKind::kPaged) {
      variants.push_back({kind, false, kv_allocator_name(kind), true});
    }
  }
  std::vector<SweepOutcome> outcomes;
  for (const Variant& v : variants) {
    outcomes.push_back(sweep(ctx, v, w, start, threshold));
    loadgen::PlotSeries s;
    s.label = v.label;
    for (const SweepPoint& p : outcomes.back().points) {
      s.x.push_back(p.rate);
      s.y.push_back(std::min(p.latency, threshold * 4));  // keep the plot's scale readable
    }
    series.push_back(std::move(s));
    ctx.note(name + " " + v.label + ": max rate " + fmt("%.3f", outcomes.back().max_rate));
  }
  loadgen::PlotOptions plot;
  plot.title = "Simulated OPT-13B/A100: " + name + " trace (latency capped at 4x threshold)";
  std::ofstream(ctx.dir / svg_name) << loadgen::svg_line_plot(series, plot);
  md << "### " << name << " trace\n\n"
     << w.description
     << ", Poisson arrivals. Threshold: normalized latency <= " << fmt("%.2f", threshold)
     << " s/token.\n\n![" << name << "](" << svg_name << ")\n\n"
     << "| allocator | highest rate under the threshold (req/s) | best paged / this | "
        "mean batch at that rate | preemptions at that rate |\n"
     << "| --- | --- | --- | --- | --- |\n";
  const double paged = std::max({outcomes[0].max_rate, outcomes[1].max_rate, outcomes[2].max_rate});
  for (size_t i = 0; i < variants.size(); ++i) {
    const double r = outcomes[i].max_rate;
    md << "| " << variants[i].label << " | " << fmt("%.3f", r) << " | "
       << (r > 0 ? fmt("%.2fx", paged / r) : std::string("n/a (never under)")) << " | "
       << fmt("%.1f", outcomes[i].at_max.mean_running_seqs) << " | "
       << outcomes[i].at_max.preemptions << " |\n";
  }
  md << "\n";
}

// ---- 3. sharing ----

void sharing_section(Ctx& ctx, const Workload& base) {
  std::ostream& md = ctx.md;
  md << "## 3. Sharing: parallel sampling and beam search (paper Figs. 14-15)\n\n"
     << "Each request of " << base.description
     << " asks for n samples or beam width n; all submitted at once (offline throughput, "
        "virtual time). Memory saved = 1 - (distinct blocks held) / (blocks the sequences' "
        "tables name), time-averaged, for paged (which preempts by swapping here, as vLLM v0 "
        "did for groups of several sequences). Throughput is requests/s of paged over "
        "reserve-oracle (Orca (Oracle): no sharing, a region per sequence), as the paper "
        "compares.\n\n"
     << "| workload | paged memory saved by sharing | paper (Alpaca, OPT-13B) | paged / "
        "reserve-oracle throughput | paper |\n"
     << "| --- | --- | --- | --- | --- |\n";
  for (bool beam : {false, true}) {
    for (int n : {2, 4, 6}) {
      std::vector<SimRequest> requests = base.requests;
      for (SimRequest& r : requests) {
        r.n = n;
        r.beam_search = beam;
      }
      // vLLM v0 preempted multi-sequence groups by swapping (recompute was for n = 1 only).
      SimRunConfig config;
      config.preemption = actors::PreemptionMode::kSwap;
      config.num_cpu_blocks = swap_blocks(ctx.profile, config.block_size);
      const SimRunResult paged = run_sim(ctx.profile, config, requests);
      config = SimRunConfig{};
      config.allocator = KvAllocatorKind::kReserveOracle;
      const SimRunResult oracle = run_sim(ctx.profile, config, requests);
      const double saved = paged.mean_logical_blocks > 0
                               ? 1.0 - paged.mean_physical_blocks / paged.mean_logical_blocks
                               : 0.0;
      const std::string what = (beam ? "beam width " : "parallel n = ") + std::to_string(n);
      md << "| " << what << " | " << pct(saved) << " | " << (beam ? "37.6% - 55.2%" : "6.1% - 9.8%")
         << " (range over n) | "
         << (oracle.request_throughput > 0
                 ? fmt("%.2fx", paged.request_throughput / oracle.request_throughput)
                 : std::string("n/a"))
         << " | " << (beam ? "up to 2.3x (width 6)" : "from 1.3x (n = 1) up; per-n bars in Fig. 14")
         << " |\n";
      ctx.note("sharing " + what + ": saved " + pct(saved));
    }
  }
  md << "\nDifferences: the Azure conversation prompts are long, so the prompt blocks every "
        "sample shares are a much larger part of each sequence than with Alpaca's short "
        "prompts, which raises the parallel-sampling saving. The simulator's beam candidates "
        "are a fixed ranking (every beam proposes the same tokens), so beams keep forking from "
        "the best one and share more than real beams would.\n\n";
}

// ---- 4. shared prefix ----

void prefix_section(Ctx& ctx, int num, int max_model_len) {
  std::ostream& md = ctx.md;
  md << "## 4. Shared prefix (paper Fig. 17)\n\n"
     << "A common few-shot prefix before each prompt of the conversation trace, all submitted "
        "at once; paged with automatic prefix caching on vs off, and reserve-oracle (which "
        "cannot share).\n\n"
     << "| prefix | caching on / off (throughput) | paged+caching / reserve-oracle | paper: "
        "vLLM / Orca (Oracle) |\n| --- | --- | --- | --- |\n";
  for (auto [tokens, label, paper] : {std::tuple{80, "1-shot (80 tokens)", "1.67x"},
                                      std::tuple{340, "5-shot (340 tokens)", "3.58x"}}) {
    const Workload w =
        load_workload(ctx.options.conv_trace, num, max_model_len, tokens, ctx.options.seed);
    SimRunConfig config;
    config.prefix_caching = true;
    const SimRunResult on = run_sim(ctx.profile, config, w.requests);
    config.prefix_caching = false;
    const SimRunResult off = run_sim(ctx.profile, config, w.requests);
    config.allocator = KvAllocatorKind::kReserveOracle;
    const SimRunResult oracle = run_sim(ctx.profile, config, w.requests);
    md << "| " << label << " | " << fmt("%.2fx", on.request_throughput / off.request_throughput)
       << " | " << fmt("%.2fx", on.request_throughput / oracle.request_throughput) << " | " << paper
       << " |\n";
    ctx.note(std::string("prefix ") + label + " on/off " +
             fmt("%.2f", on.request_throughput / off.request_throughput));
  }
  md << "\nDifferences: the paper's workload is WMT translation with short inputs, where an "
        "80- or 340-token prefix is most of every prompt; here the prefix precedes ~1,000-token "
        "conversation prompts, so sharing it saves a smaller fraction of memory and compute.\n\n";
}

// ---- 5. preemption ----

void preemption_section(Ctx& ctx, const Workload& w) {
  std::ostream& md = ctx.md;
  md << "## 5. Preemption: swap vs recompute by block size (paper Fig. 19)\n\n"
     << w.description << ", all submitted at once so the pool overflows and sequences are "
     << "preempted; swap space 4 GiB. Mean normalized latency (s/token) and the virtual time "
        "spent moving swapped blocks.\n\n"
     << "The first two columns are the cost model's price of preempting and resuming one "
        "1,024-token sequence (paper Fig. 19a's microbenchmark): swap = out + in, "
        "2 x blocks x (per-block cost + block bytes / PCIe bandwidth); recompute = its prefill's "
        "marginal cost in a batch, (b + c) x 1,024. The rest is the end-to-end replay (Fig. "
        "19b).\n\n"
     << "| block size | swap 1,024 tokens | recompute 1,024 tokens | recompute: latency | "
        "swap: latency | swap: time copying | preemptions (swap run) |\n"
     << "| --- | --- | --- | --- | --- | --- | --- |\n";
  loadgen::PlotSeries swap_series{"swap", {}, {}}, recompute_series{"recompute", {}, {}};
  for (int bs : {8, 16, 32, 64, 128, 256}) {
    SimRunConfig config;
    config.block_size = bs;
    config.num_cpu_blocks =
        static_cast<int>((int64_t{4} << 30) / (ctx.profile.kv_bytes_per_token * bs));
    config.preemption = actors::PreemptionMode::kRecompute;
    const SimRunResult recompute = run_sim(ctx.profile, config, w.requests);
    config.preemption = actors::PreemptionMode::kSwap;
    const SimRunResult swap = run_sim(ctx.profile, config, w.requests);
    actors::StepShape swap_shape;
    swap_shape.swapped_blocks = 2 * ((1024 + bs - 1) / bs);
    const double swap_one = actors::step_seconds(ctx.profile, swap_shape, bs);
    const double recompute_one =
        1024 * (ctx.profile.per_batched_token_s + ctx.profile.per_kv_token_read_s);
    md << "| " << bs << " | " << fmt("%.1f ms", 1e3 * swap_one) << " | "
       << fmt("%.1f ms", 1e3 * recompute_one) << " | "
       << fmt("%.4f", recompute.normalized_latency_s) << " | "
       << fmt("%.4f", swap.normalized_latency_s) << " | " << fmt("%.2f s", swap.swap_time_s)
       << " | " << swap.preemptions << " |\n";
    swap_series.x.push_back(bs);
    swap_series.y.push_back(swap.normalized_latency_s);
    recompute_series.x.push_back(bs);
    recompute_series.y.push_back(recompute.normalized_latency_s);
    ctx.note("preemption bs " + std::to_string(bs));
  }
  loadgen::PlotOptions plot;
  plot.title = "Simulated OPT-13B/A100: preemption by block size";
  plot.x_label = "block size (tokens)";
  std::ofstream(ctx.dir / "preemption.svg")
      << loadgen::svg_line_plot({recompute_series, swap_series}, plot);
  md << "\n![preemption](preemption.svg)\n\n"
     << "Paper: swapping is slow at small block sizes (many small PCIe transfers), recompute "
        "does not depend on the block size, and the two are close for blocks of 16-64. The "
        "simulator charges each swapped block a fixed cost plus its bytes over PCIe (see "
        "profiles/README.md), so the microbenchmark columns follow from the profile by "
        "construction (they show the per-block cost's weight, not a measurement). End to end, "
        "the swap and recompute runs differ little here because queueing in this offline "
        "replay dominates the latency, and recompute's cost is prefill the batch shares; "
        "the largest blocks lose on both because a sequence's last block wastes more slots.\n\n";
}

// ---- real CPU executor variant ----

void real_section(Ctx& ctx) {
  std::ostream& md = ctx.md;
  actors::EngineConfig engine;
  engine.model_dir = ctx.options.real_model;
  engine.num_threads = ctx.options.real_threads;
  engine.enable_prefix_caching = false;
  engine.max_model_len = 1024;
  engine.num_kv_blocks = 160;  // 2,560 tokens: reserve-max fits 2 sequences, paged many more
  actors::EngineSetup setup = actors::set_up_engine(engine);
  const model::ModelConfig& mc = setup.executor->model_config();
  const int len = setup.config.max_model_len;
  // Azure conversation lengths scaled (all by one factor) so the longest prompt is len / 2
  // and the longest output len / 4, keeping the trace's shape.
  loadgen::TraceReadResult read =
      loadgen::read_trace_file(ctx.options.conv_trace.string(), loadgen::BadLinePolicy::kSkip);
  std::vector<loadgen::TraceRequest> slice =
      loadgen::slice(read.requests, 0, ctx.options.real_num_requests);
  loadgen::LengthLimits limits;
  limits.max_prompt_tokens = len / 2;
  limits.max_output_tokens = len / 4;
  limits.mode = loadgen::LengthMode::kScale;
  loadgen::apply_length_limits(slice, limits);
  std::mt19937 rng(ctx.options.seed);
  std::uniform_int_distribution<int32_t> id(3, mc.vocab_size - 1);
  std::vector<SimRequest> requests;
  double prompt_sum = 0, output_sum = 0;
  for (const loadgen::TraceRequest& t : slice) {
    SimRequest r;
    for (int64_t i = 0; i < t.prompt_tokens; ++i) r.prompt_token_ids.push_back(id(rng));
    r.output_len = static_cast<int>(std::max<int64_t>(t.max_tokens.value_or(1), 1));
    prompt_sum += static_cast<double>(r.prompt_token_ids.size());
    output_sum += r.output_len;
    requests.push_back(std::move(r));
  }
  const StepRunner run_step = [&](const actors::StepInput& input, double& seconds) {
    const auto start = std::chrono::steady_clock::now();
    actors::StepOutput output = setup.executor->execute(input);
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return output;
  };
  auto replay = [&](KvAllocatorKind kind, const std::vector<SimRequest>& reqs) {
    SimRunConfig config;
    config.allocator = kind;
    config.num_device_blocks = setup.config.num_kv_blocks;
    return run_replay(config, len, run_step, reqs, nullptr);
  };
  const double n = static_cast<double>(requests.size());
  md << "## 2b. Real CPU executor (small, NOT simulated)\n\n"
     << "Model `" << ctx.options.real_model.filename().string() << "`: random-weight Llama, "
     << mc.num_hidden_layers << " layers, hidden " << mc.hidden_size << ", vocab " << mc.vocab_size
     << ", context " << len << "; KV pool " << setup.config.num_kv_blocks
     << " blocks of 16; CPU executor with " << ctx.options.real_threads
     << " threads. Step times are measured wall-clock times of the real forward pass (idle "
        "gaps between arrivals are skipped, not waited). "
     << requests.size()
     << " requests of the conversation trace with lengths scaled by one "
        "factor to fit (mean prompt "
     << fmt("%.0f", prompt_sum / n) << ", mean output " << fmt("%.0f", output_sum / n)
     << " tokens). **Noisy**: measured on a 2-core machine "
        "shared with other builds (load average ~10), one run per cell; the latency column "
        "in particular varies from run to run. The model: `pagedserve make-model --out DIR "
        "--hidden 512 --layers 6 --heads 8 --ffn 1376 --vocab 4096 --context 1024` (23M "
        "parameters); then `bench paper ... --real-model DIR --real-requests 16`.\n\n"
     << "| allocator | offline throughput (req/s) | paged / this | normalized latency at "
        "0.7x paged's offline rate (s/token) | token states (offline) |\n"
     << "| --- | --- | --- | --- | --- |\n";
  double paged_rate = 0;
  for (KvAllocatorKind kind : kAllocators) {
    const SimRunResult offline = replay(kind, requests);
    if (kind == KvAllocatorKind::kPaged) paged_rate = offline.request_throughput;
    const SimRunResult loaded = replay(kind, at_rate(requests, 0.7 * paged_rate, ctx.options.seed));
    md << "| " << kv_allocator_name(kind) << " | " << fmt("%.3f", offline.request_throughput)
       << " | " << fmt("%.2fx", paged_rate / std::max(offline.request_throughput, 1e-12)) << " | "
       << fmt("%.3f", loaded.normalized_latency_s) << " | " << pct(offline.memory.token) << " |\n";
    ctx.note(std::string("real ") + kv_allocator_name(kind) + ": " +
             fmt("%.3f req/s", offline.request_throughput));
  }
  md << "\n";
}

}  // namespace

void run_paper(const PaperOptions& options) {
  Ctx ctx{options, actors::load_sim_profile(options.profile), {}, {}};
  ctx.dir = options.out_md.parent_path();
  if (ctx.dir.empty()) ctx.dir = ".";
  std::filesystem::create_directories(ctx.dir);
  const int num = options.quick ? std::min(options.num_requests, 60) : options.num_requests;
  const int len = ctx.profile.max_model_len;
  const Workload conv = load_workload(options.conv_trace, num, len, 0, options.seed);
  const Workload code = load_workload(options.code_trace, num, len, 0, options.seed + 1);

  std::ostream& md = ctx.md;
  md << "# Reproducing the PagedAttention paper (SIMULATED)\n\n"
     << (options.real_model.empty() ? "**Every number on this page is simulated**"
                                    : "**Every number on this page is simulated except "
                                      "section 2b** (a small real CPU run)")
     << ": the real pagedserve scheduler and KV "
        "allocators run the Azure LLM inference traces (2023) on `--device sim`, an executor "
        "that runs no model and charges each step the time of a linear cost model, profile `"
     << options.profile.filename().string() << "` (" << ctx.profile.name
     << "; derivation in profiles/README.md): "
     << fmt("%.1f", ctx.profile.kv_cache_bytes / 1073741824.0) << " GiB of KV cache at "
     << ctx.profile.kv_bytes_per_token / 1024 << " KiB per token, context " << len
     << ". No GPU was used. Regenerate with:\n\n"
     << "    pagedserve bench paper --profile profiles/opt-13b-a100.json "
        "--traces ../shared/traces/azure-2023 --out docs/RESULTS.md\n\n"
     << "Paper: Kwon et al., \"Efficient Memory Management for Large Language Model Serving "
        "with PagedAttention\", SOSP 2023. Its numbers come from OPT-13B..175B on A100s with "
        "ShareGPT and Alpaca; ours from a cost model with the Azure traces, so only the "
        "direction and rough size of each effect are comparable. Trace licence: CC-BY 4.0, "
        "Patel et al., \"Splitwise\", ISCA 2024.\n\n"
     << (options.quick ? "**--quick run: tiny workloads, for a smoke test only.**\n\n" : "");
  if (options.progress) options.progress("workloads loaded");

  memory_breakdown(ctx, conv);
  md << "## 2. Throughput at equal latency (paper Fig. 12)\n\n"
     << "Normalized latency = mean over requests of end-to-end latency / output tokens. For "
        "each allocator the rate grows by 1.25x until the latency passes the threshold, then "
        "bisects. Paper (ShareGPT, OPT-13B..175B): vLLM sustains 1.7-2.7x the rate of Orca "
        "(Oracle) and 2.7-8x Orca (Max); on Alpaca (short sequences) the gains are smaller.\n\n";
  throughput_section(ctx, conv, "conversation", options.quick ? 0.5 : 0.2,
                     options.quick ? 1.0 : 0.5, "throughput_conv.svg");
  throughput_section(ctx, code, "code", options.quick ? 0.5 : 0.2, options.quick ? 1.0 : 0.5,
                     "throughput_code.svg");
  md << "Admission: every run above except the \"chunk admission\" row admits a waiting "
        "request only when blocks for its whole prompt are free (pagedserve's default, "
        "SchedulerConfig::admit_whole_prompt_only, the rule of the paper's vLLM, which had no "
        "chunked prefill). The \"chunk admission\" row starts a request with whatever prompt "
        "chunk the free blocks hold (pagedserve's default until this thrash was found): a "
        "nearly full pool then thrashes under recompute preemption: a request is admitted with "
        "a chunk, preempted by the next decode that needs a block, recomputed, and so on "
        "(thousands of preemptions per 1,000 requests just above the rate shown; `pagedserve "
        "bench admission` compares the two rules at fixed rates), so paged falls below every "
        "baseline. The reserving allocators never preempt: a request runs only once its whole "
        "region is reserved.\n\n"
     << "Differences: the Azure prompts are long (median 1,020 tokens for conversation, 1,469 "
        "for code, against ShareGPT's ~160) and every allocator must hold the prompt, so the "
        "memory an output-length reservation wastes is a smaller share than in the paper, "
        "and the batch is limited by prompts under every allocator; prefill compute also "
        "dominates the step time. The code trace's outputs are very short (median 13), so "
        "reserve-oracle and reserve-pow2 reserve little; reserve-max still reserves the whole "
        "2,048-token context per request and falls furthest behind.\n\n";
  if (!options.real_model.empty()) real_section(ctx);
  const Workload sharing_base =
      load_workload(options.conv_trace, std::max(num / 2, 10), len / 2, 0, options.seed + 2);
  sharing_section(ctx, sharing_base);
  prefix_section(ctx, num, len);
  preemption_section(ctx, conv);

  md << "## What is not here\n\n"
     << (options.real_model.empty()
             ? "- The real (non-simulated) variant on the CPU executor was not run "
               "(`--real-model DIR`, a model from `pagedserve make-model`).\n"
             : "- The real variant (2b) is small: one model, few requests, one rate, noisy "
               "timings; it checks the direction of the simulated results, not their size.\n")
     << "- The cost model is linear and its coefficients are estimates from public figures "
        "(`pagedserve bench calibrate` fits them to a real executor instead).\n";
  std::ofstream out(options.out_md);
  if (!out) throw std::runtime_error("cannot write " + options.out_md.string());
  out << ctx.md.str();
}

}  // namespace pagedserve::paper
