// The real CPU executor section of `pagedserve bench paper` (NOT simulated): the paper's
// ShareGPT lengths, scaled to a small random-weight model, served by the real scheduler and
// KV allocators over the CPU executor, each step timed on the wall clock. Paged against every
// reserving (Orca-style) allocator: offline throughput, then normalized latency at several
// Poisson rates, several runs each, and the highest rate each keeps under a latency threshold.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <random>
#include <thread>

#include "actors/engine_setup.h"
#include "tools/paper/figures.h"

namespace pagedserve::paper {
namespace {

using cache::kv_allocator_name;
using cache::KvAllocatorKind;

const KvAllocatorKind kAllocators[] = {KvAllocatorKind::kPaged, KvAllocatorKind::kReserveOracle,
                                       KvAllocatorKind::kReservePow2, KvAllocatorKind::kReserveMax};
// Poisson rates as multiples of paged's offline throughput, doubling from light load to
// nearly all at once. A trace of a few dozen requests queues little: in trial runs paged's
// latency rose little up to 1x, and at 2x it had gone only ~40% of the way from its light-load
// latency to its offline one (where the threshold below sits at 50%), hence 4x.
const double kRateMultiples[] = {0.25, 0.5, 1.0, 2.0, 4.0};
constexpr int kContext = 1024;

actors::EngineSetup real_engine(const PaperOptions& options) {
  actors::EngineConfig engine;
  engine.model_dir = options.real_model;
  engine.num_threads = options.real_threads;
  engine.enable_prefix_caching = false;
  engine.max_model_len = kContext;
  engine.num_kv_blocks = 160;  // 2,560 tokens: reserve-max fits 2 sequences, paged many more
  return actors::set_up_engine(engine);
}

// The first `num` requests, every length times one factor so that the longest prompt + output
// fits the context (the distribution keeps its shape), with random token ids in [3, vocab).
Workload scaled_sharegpt(const Workload& sharegpt, int num, int context, int vocab, unsigned seed,
                         double& factor) {
  const size_t n = std::min(sharegpt.requests.size(), static_cast<size_t>(std::max(num, 0)));
  size_t longest = 1;
  for (size_t i = 0; i < n; ++i) {
    const SimRequest& r = sharegpt.requests[i];
    longest = std::max(longest, r.prompt_token_ids.size() + r.output_len);
  }
  factor = std::min(1.0, static_cast<double>(context) / static_cast<double>(longest));
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> id(3, vocab - 1);
  Workload w;
  double prompt_sum = 0, output_sum = 0;
  for (size_t i = 0; i < n; ++i) {
    const SimRequest& source = sharegpt.requests[i];
    // Floors keep prompt + output <= context; every length stays >= 1.
    const auto scale = [&](double len) { return std::max<int>(1, static_cast<int>(len * factor)); };
    SimRequest r;
    r.prompt_token_ids.resize(scale(static_cast<double>(source.prompt_token_ids.size())));
    for (int32_t& t : r.prompt_token_ids) t = id(rng);
    r.output_len = scale(source.output_len);
    prompt_sum += static_cast<double>(r.prompt_token_ids.size());
    output_sum += r.output_len;
    w.requests.push_back(std::move(r));
  }
  const double count = std::max<double>(static_cast<double>(n), 1.0);
  w.description = std::to_string(n) + " ShareGPT requests (the paper's filter, shuffled), " +
                  "lengths x " + fmt("%.3f", factor) + ": mean prompt " +
                  fmt("%.1f", prompt_sum / count) + ", mean output " +
                  fmt("%.1f", output_sum / count) + " tokens";
  return w;
}

// One replay on the real executor: the same Scheduler loop as the simulator, each step's time
// measured on the wall clock (run_replay skips the idle gaps between arrivals, not waited).
SimRunResult replay(actors::EngineSetup& setup, KvAllocatorKind kind,
                    const std::vector<SimRequest>& requests) {
  const StepRunner run_step = [&](const actors::StepInput& input, double& seconds) {
    const auto start = std::chrono::steady_clock::now();
    actors::StepOutput output = setup.executor->execute(input);
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return output;
  };
  SimRunConfig config;
  config.allocator = kind;
  config.block_size = setup.config.block_size;
  config.num_device_blocks = setup.config.num_kv_blocks;
  return run_replay(config, setup.config.max_model_len, run_step, requests, nullptr);
}

struct Cell {
  double rate = 0;                  // req/s
  std::vector<double> latencies;    // normalized latency of each run (s/token)
  std::vector<double> throughputs;  // completed requests / duration, each run (req/s)
  double mean = 0, min = 0, max = 0;
  double mean_preemptions = 0;
  double mean_batch = 0;  // time-averaged running sequences
  int failed = 0;         // requests not completed, over all runs
};

struct AllocatorRuns {
  KvAllocatorKind kind = KvAllocatorKind::kPaged;
  Cell offline;             // all requests at once (rate 0), once per run
  std::vector<Cell> cells;  // one per kRateMultiples entry
  int max_cell = -1;        // the highest rate before the first one over the threshold; -1: none
  // Where the mean latency first passes the threshold: interpolated between the grid points
  // around it (bound 0), or only bounded: below the lowest rate (-1), above the highest (+1).
  double crossing_rate = 0;
  int bound = 0;
};

// One run at the cell's rate (0: all at once), its numbers added to `cell` (summarized later
// by summarize()).
void run_once(Report& report, actors::EngineSetup& setup, KvAllocatorKind kind,
              const std::vector<SimRequest>& requests, int run, Cell& cell) {
  // Each run its own arrival seed (the spread covers arrival patterns and timing noise); the
  // same seed for every allocator, so within a run they face the same arrivals.
  const unsigned seed = report.options.seed + 1000u * static_cast<unsigned>(run + 1);
  const SimRunResult r =
      replay(setup, kind, cell.rate > 0 ? at_rate(requests, cell.rate, seed) : requests);
  cell.latencies.push_back(r.normalized_latency_s);
  cell.throughputs.push_back(r.request_throughput);
  cell.mean_preemptions += static_cast<double>(r.preemptions);
  cell.mean_batch += r.mean_running_seqs;
  cell.failed += r.failed;
  report.note(std::string("real ") + kv_allocator_name(kind) + " " +
              (cell.rate > 0 ? "at " + fmt("%.3f req/s", cell.rate) : std::string("offline")) +
              ", run " + std::to_string(run + 1) + ": " +
              fmt("%.3f ms/token, ", 1e3 * r.normalized_latency_s) +
              fmt("%.3f req/s", r.request_throughput));
}

void summarize(Cell& cell) {
  const double runs = static_cast<double>(cell.latencies.size());
  for (double l : cell.latencies) cell.mean += l / runs;
  cell.mean_preemptions /= runs;
  cell.mean_batch /= runs;
  const auto [lo, hi] = std::minmax_element(cell.latencies.begin(), cell.latencies.end());
  cell.min = *lo;
  cell.max = *hi;
}

// Each run: every allocator offline (all requests at once; paged's first offline throughput
// sets the rates), then every rate, the allocators round-robin throughout: the load other
// work puts on this machine drifts over minutes, and interleaving spreads a drift over every
// allocator (and over the offline runs the threshold uses) instead of biasing whichever one
// ran during it.
std::vector<AllocatorRuns> measure(Report& report, actors::EngineSetup& setup,
                                   const std::vector<SimRequest>& requests) {
  std::vector<AllocatorRuns> all(std::size(kAllocators));
  for (size_t i = 0; i < all.size(); ++i) all[i].kind = kAllocators[i];
  for (int run = 0; run < report.options.real_repeats; ++run) {
    for (AllocatorRuns& a : all) run_once(report, setup, a.kind, requests, run, a.offline);
    if (run == 0) {
      const double paged_rps = all.front().offline.throughputs.front();
      for (AllocatorRuns& a : all) {
        for (double multiple : kRateMultiples) {
          a.cells.emplace_back();
          a.cells.back().rate = multiple * paged_rps;
        }
      }
    }
    for (size_t r = 0; r < std::size(kRateMultiples); ++r) {
      for (AllocatorRuns& a : all) run_once(report, setup, a.kind, requests, run, a.cells[r]);
    }
  }
  for (AllocatorRuns& a : all) {
    summarize(a.offline);
    for (Cell& cell : a.cells) summarize(cell);
  }
  return all;
}

// On a finite trace the latency saturates at the offline run's (every request queued at
// once), so a threshold must lie below paged's offline latency for paged to ever cross it:
// halfway from paged's latency at the lowest rate to its offline latency. It is relative
// because this machine's step times depend on the model and on whatever else runs here.
double latency_threshold(const AllocatorRuns& paged) {
  return 0.5 * (paged.cells.front().mean + paged.offline.mean);
}

// Sets max_cell and the crossing. A cell passes when its mean is under the threshold and no
// request failed; the first failing cell ends the scan (a noisy pass above it does not count).
void find_crossing(AllocatorRuns& a, double threshold) {
  size_t first_over = 0;
  while (first_over < a.cells.size() && a.cells[first_over].mean <= threshold &&
         a.cells[first_over].failed == 0) {
    ++first_over;
  }
  a.max_cell = static_cast<int>(first_over) - 1;
  if (first_over == 0 || first_over == a.cells.size()) {
    a.bound = first_over == 0 ? -1 : 1;
    a.crossing_rate = first_over == 0 ? a.cells.front().rate : a.cells.back().rate;
    return;
  }
  // Linear in log rate between the last cell under and the first over.
  const Cell& lo = a.cells[first_over - 1];
  const Cell& hi = a.cells[first_over];
  // A cell over only by its failed requests (mean not higher) crosses at its own rate.
  const double t =
      hi.mean > lo.mean ? std::clamp((threshold - lo.mean) / (hi.mean - lo.mean), 0.0, 1.0) : 1.0;
  a.bound = 0;
  a.crossing_rate = std::exp(std::log(lo.rate) + t * (std::log(hi.rate) - std::log(lo.rate)));
}

// "0.123", "< 0.123" or "> 0.123" (req/s).
std::string crossing_text(const AllocatorRuns& a) {
  return std::string(a.bound < 0 ? "< " : a.bound > 0 ? "> " : "") + fmt("%.3f", a.crossing_rate);
}

// The grid's highest rate before the first over the threshold, "none" below the grid.
std::string max_rate_text(const AllocatorRuns& a) {
  return a.max_cell < 0 ? std::string("none") : fmt("%.3f", a.cells[a.max_cell].rate);
}

// Paged's crossing over this one's: a lower bound when paged's is only bounded below or this
// one's above, an upper bound in the opposite cases, n/a when the bounds point both ways.
std::string equal_latency_ratio(const AllocatorRuns& paged, const AllocatorRuns& a) {
  if (&paged == &a) return "1.00x";
  const bool lower = paged.bound > 0 || a.bound < 0;
  const bool upper = paged.bound < 0 || a.bound > 0;
  if (lower && upper) return "n/a";
  const std::string value = fmt("%.2fx", paged.crossing_rate / a.crossing_rate);
  return lower ? "> " + value : upper ? "< " + value : value;
}

std::string ms(double seconds) { return fmt("%.3f", 1e3 * seconds); }

// "mean [min-max]" of values times `scale`.
std::string mean_range(const std::vector<double>& values, double scale, const char* format) {
  if (values.empty()) return "n/a";
  double sum = 0;
  for (double v : values) sum += v;
  const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  return fmt(format, scale * sum / static_cast<double>(values.size())) + " [" +
         fmt(format, scale * *lo) + "-" + fmt(format, scale * *hi) + "]";
}

void write_intro(Report& report, const actors::EngineSetup& setup, const Workload& workload,
                 double threshold) {
  const model::ModelConfig& mc = setup.executor->model_config();
  const PaperOptions& o = report.options;
  report.md
      << "## Real CPU executor (NOT simulated)\n\n"
      << "Model `" << o.real_model.filename().string() << "`: random-weight Llama, "
      << mc.num_hidden_layers << " layers, hidden " << mc.hidden_size << ", "
      << mc.num_attention_heads << " heads, vocab " << mc.vocab_size << ", context "
      << setup.config.max_model_len << "; KV pool " << setup.config.num_kv_blocks << " blocks of "
      << setup.config.block_size << " tokens; CPU executor with " << o.real_threads
      << " threads. Requests: " << workload.description
      << ". The same scheduler (recompute preemption, whole-prompt admission) with "
         "each KV allocator. Step times are the measured wall-clock times of the real "
         "forward pass; idle gaps between arrivals are skipped, not waited. Rates are "
         "multiples of paged's offline throughput, Poisson arrivals, "
      << o.real_repeats
      << " run(s) per cell with different arrival seeds; cells show the mean normalized "
         "latency (ms per output token) [min-max over runs]. Threshold: "
      << ms(threshold)
      << " ms/token, halfway from paged's mean at the lowest rate to its mean offline latency "
         "(the most a finite trace can queue); the crossing is interpolated in log rate "
         "between the grid points around it. Paper (Fig. 12, ShareGPT, "
         "OPT-13B..175B on A100s): vLLM sustains 1.7-2.7x the rate of Orca (Oracle) and "
         "2.7-8x Orca (Max) at equal latency. The model: `pagedserve "
         "make-model --out DIR --hidden 512 --layers 6 --heads 8 --ffn 1376 --vocab 4096 "
         "--context 1024`; then `bench paper ... --real-model DIR`.\n\n";
}

void write_table(Report& report, const std::vector<AllocatorRuns>& all) {
  std::ostream& md = report.md;
  md << "| |";
  for (const AllocatorRuns& a : all) md << " " << kv_allocator_name(a.kind) << " |";
  md << "\n| --- |";
  for (size_t i = 0; i < all.size(); ++i) md << " --- |";
  md << "\n| offline throughput (req/s) |";
  for (const AllocatorRuns& a : all)
    md << " " << mean_range(a.offline.throughputs, 1, "%.3f") << " |";
  md << "\n| offline latency (ms/token) |";
  for (const AllocatorRuns& a : all)
    md << " " << mean_range(a.offline.latencies, 1e3, "%.3f") << " |";
  md << "\n| offline: mean batch, preemptions |";
  for (const AllocatorRuns& a : all) {
    md << " " << fmt("%.1f", a.offline.mean_batch) << ", "
       << fmt("%.0f", a.offline.mean_preemptions) << " |";
  }
  md << "\n";
  for (size_t r = 0; r < std::size(kRateMultiples); ++r) {
    md << "| " << fmt("%.2fx", kRateMultiples[r]) << " = "
       << fmt("%.3f req/s", all.front().cells[r].rate) << " |";
    for (const AllocatorRuns& a : all) {
      const Cell& c = a.cells[r];
      md << " " << mean_range(c.latencies, 1e3, "%.3f")
         << (c.failed > 0 ? " (" + std::to_string(c.failed) + " failed)" : "") << " |";
    }
    md << "\n";
  }
  md << "| highest grid rate under the threshold (req/s) |";
  for (const AllocatorRuns& a : all) md << " " << max_rate_text(a) << " |";
  md << "\n| threshold crossed at (req/s, interpolated) |";
  for (const AllocatorRuns& a : all) md << " " << crossing_text(a) << " |";
  md << "\n| paged / this at equal latency (crossings) |";
  for (const AllocatorRuns& a : all) md << " " << equal_latency_ratio(all.front(), a) << " |";
  md << "\n\n";
}

nlohmann::ordered_json cell_json(const Cell& c) {
  return {{"rate_rps", c.rate},
          {"normalized_latency_s", c.latencies},
          {"throughput_rps", c.throughputs},
          {"mean_latency_s", c.mean},
          {"min_latency_s", c.min},
          {"max_latency_s", c.max},
          {"mean_preemptions", c.mean_preemptions},
          {"mean_batch", c.mean_batch},
          {"failed", c.failed}};
}

nlohmann::ordered_json allocator_json(const AllocatorRuns& a, const AllocatorRuns& paged) {
  nlohmann::ordered_json j;
  j["allocator"] = kv_allocator_name(a.kind);
  j["offline"] = cell_json(a.offline);
  for (size_t r = 0; r < a.cells.size(); ++r) {
    nlohmann::ordered_json cell = cell_json(a.cells[r]);
    cell["multiple_of_paged_offline"] = kRateMultiples[r];
    j["rates"].push_back(std::move(cell));
  }
  j["max_grid_rate_rps"] = a.max_cell < 0 ? nlohmann::ordered_json(nullptr)
                                          : nlohmann::ordered_json(a.cells[a.max_cell].rate);
  j["crossing_rate_rps"] = a.crossing_rate;
  j["crossing_bound"] = a.bound < 0 ? "below the grid" : a.bound > 0 ? "above the grid" : "inside";
  j["paged_over_this"] = equal_latency_ratio(paged, a);
  return j;
}

void write_json(Report& report, const actors::EngineSetup& setup, const Workload& workload,
                double factor, double threshold, const std::vector<AllocatorRuns>& all,
                double wall_s) {
  const model::ModelConfig& mc = setup.executor->model_config();
  nlohmann::ordered_json& j = report.results["real"];
  j["simulated"] = false;
  j["model"] = {{"dir", report.options.real_model.filename().string()},
                {"layers", mc.num_hidden_layers},
                {"hidden", mc.hidden_size},
                {"heads", mc.num_attention_heads},
                {"vocab", mc.vocab_size},
                {"context", setup.config.max_model_len}};
  j["kv_blocks"] = setup.config.num_kv_blocks;
  j["block_size"] = setup.config.block_size;
  j["threads"] = report.options.real_threads;
  j["workload"] = workload.description;
  j["length_factor"] = factor;
  j["repeats"] = report.options.real_repeats;
  j["step_times"] = "wall clock, idle gaps skipped";
  j["threshold_s"] = threshold;
  j["wall_s"] = wall_s;
  for (const AllocatorRuns& a : all) j["systems"].push_back(allocator_json(a, all.front()));
}

// The 1-minute load average (/proc/loadavg), or -1 where there is none: other work on the
// machine stretches every wall-clock step, so the report says how busy it was.
double load_average() {
  std::ifstream in("/proc/loadavg");
  double load = -1;
  if (!(in >> load)) return -1;
  return load;
}

void write_noise_note(Report& report, double load_start, double load_end, double wall_s) {
  report.md << "**Noisy**: wall-clock step times on a " << std::thread::hardware_concurrency()
            << "-core machine (load average " << fmt("%.1f", load_start) << " at the start, "
            << fmt("%.1f", load_end)
            << " at the end), which stretch with whatever else runs there: on a shared machine "
               "runs minutes apart can differ several-fold. The allocators run round-robin "
               "within each (run, rate), so a drift in load hits them alike, but a cell's mean "
               "mixes busier and quieter runs, and the rates come from the first offline run. Few "
               "requests per run and "
            << report.options.real_repeats
            << " run(s) per cell; the min-max spread shows how much a cell moves. The rate grid "
               "is coarse and the crossings interpolate noisy means: read the ratios as rough "
               "sizes (bounds where a system crosses outside the grid). This section took "
            << fmt("%.0f", wall_s) << " s.\n\n";
}

}  // namespace

void real_section(Report& report, const Workload& sharegpt_unscaled) {
  const auto start = std::chrono::steady_clock::now();
  const double load_start = load_average();
  actors::EngineSetup setup = real_engine(report.options);
  double factor = 1;
  const Workload workload = scaled_sharegpt(
      sharegpt_unscaled, report.options.real_num_requests, setup.config.max_model_len,
      setup.executor->model_config().vocab_size, report.options.seed, factor);
  std::vector<AllocatorRuns> all = measure(report, setup, workload.requests);
  const double threshold = latency_threshold(all.front());
  for (AllocatorRuns& a : all) find_crossing(a, threshold);
  const double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double load_end = load_average();
  write_intro(report, setup, workload, threshold);
  write_table(report, all);
  write_noise_note(report, load_start, load_end, wall_s);
  write_json(report, setup, workload, factor, threshold, all, wall_s);
  report.results["real"]["load_average_start_end"] = {load_start, load_end};
}

}  // namespace pagedserve::paper
