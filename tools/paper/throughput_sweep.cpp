// Rate sweeps over the simulated systems.
#include "tools/paper/throughput_sweep.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <future>

#include "tools/paper/static_batching.h"

namespace pagedserve::paper {
namespace {

using cache::KvAllocatorKind;

Contender on_allocator(const actors::SimProfile& profile, const std::string& label,
                       KvAllocatorKind kind, bool swap, bool buddy = false) {
  SimRunConfig config;
  config.allocator = kind;
  config.buddy_regions = buddy;
  if (swap) {
    config.preemption = actors::PreemptionMode::kSwap;
    config.num_cpu_blocks = swap_space_blocks(profile, config.block_size);
  }
  return sim_contender(profile, label, config);
}

}  // namespace

Contender sim_contender(const actors::SimProfile& profile, const std::string& label,
                        const SimRunConfig& config) {
  return {label, [profile, config](const std::vector<SimRequest>& requests) {
            return run_sim(profile, config, requests);
          }};
}

namespace {

double memory_saved(const SimRunResult& r) {
  return r.mean_logical_blocks > 0 ? 1.0 - r.mean_physical_blocks / r.mean_logical_blocks : 0.0;
}

std::string three_decimals(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.3f", value);
  return buffer;
}

}  // namespace

std::vector<Contender> paper_contenders(const actors::SimProfile& profile,
                                        bool with_fastertransformer) {
  std::vector<Contender> out = {
      on_allocator(profile, "vLLM (paged)", KvAllocatorKind::kPaged, false),
      on_allocator(profile, "Orca (Oracle)", KvAllocatorKind::kReserveOracle, false),
      on_allocator(profile, "Orca (Pow2)", KvAllocatorKind::kReservePow2, false),
      on_allocator(profile, "Orca (Max)", KvAllocatorKind::kReserveMax, false),
      // As the paper implemented Orca: buddy allocation (Max's regions are already 2^k).
      on_allocator(profile, "Orca (Oracle), buddy", KvAllocatorKind::kReserveOracle, false, true),
      on_allocator(profile, "Orca (Pow2), buddy", KvAllocatorKind::kReservePow2, false, true)};
  if (with_fastertransformer) {
    out.push_back({"FasterTransformer", [profile](const std::vector<SimRequest>& requests) {
                     return run_static_batching(profile, StaticBatchConfig{}, requests);
                   }});
  }
  return out;
}

std::vector<Contender> sharing_contenders(const actors::SimProfile& profile) {
  return {on_allocator(profile, "vLLM (paged)", KvAllocatorKind::kPaged, true),
          on_allocator(profile, "Orca (Oracle)", KvAllocatorKind::kReserveOracle, false),
          on_allocator(profile, "Orca (Pow2)", KvAllocatorKind::kReservePow2, false),
          on_allocator(profile, "Orca (Max)", KvAllocatorKind::kReserveMax, false)};
}

double crossing_rate(const std::vector<SweepPoint>& points, double threshold_s) {
  for (size_t i = 0; i < points.size(); ++i) {
    if (points[i].latency <= threshold_s) continue;
    if (i == 0) return 0.0;
    const SweepPoint& lo = points[i - 1];
    const SweepPoint& hi = points[i];
    if (!std::isfinite(hi.latency)) return lo.rate;
    const double t = (threshold_s - lo.latency) / (hi.latency - lo.latency);
    return lo.rate + t * (hi.rate - lo.rate);
  }
  return points.empty() ? 0.0 : points.back().rate;
}

SweepOutcome sweep_rates(const Contender& contender, const std::vector<SimRequest>& requests,
                         const SweepOptions& options) {
  SweepOutcome out;
  out.label = contender.label;
  auto run_at = [&](double rate) {
    const SimRunResult r =
        contender.run(options.duration_s > 0 ? trace_at_rate(requests, rate, options.duration_s,
                                                             options.min_requests, options.seed)
                                             : at_rate(requests, rate, options.seed));
    SweepPoint p{rate, r.failed > 0 ? INFINITY : r.normalized_latency_s, r.mean_running_seqs,
                 r.preemptions, memory_saved(r)};
    out.points.push_back(p);
    if (options.progress) {
      options.progress("  " + contender.label + " rate " + three_decimals(rate) + ": latency " +
                       three_decimals(p.latency) + ", batch " + three_decimals(p.mean_batch));
    }
    return p;
  };
  // Down from the start rate until one is under the threshold, then up the grid until the
  // curve is well past it: the plot shows the knee, the table interpolates the crossing.
  double rate = options.start_rate;
  for (int i = 0; i < 8 && run_at(rate).latency > options.threshold_s; ++i) rate /= 2;
  // Rates above the first good one that the halving already ran are run again on the grid
  // (cheap); the grid's points are what the crossing is interpolated between.
  out.points.erase(out.points.begin(), out.points.end() - 1);
  while (static_cast<int>(out.points.size()) < options.max_points) {
    rate *= options.growth;
    if (!(run_at(rate).latency <= options.stop_factor * options.threshold_s)) break;
  }
  std::sort(out.points.begin(), out.points.end(),
            [](const SweepPoint& a, const SweepPoint& b) { return a.rate < b.rate; });
  out.max_rate = crossing_rate(out.points, options.threshold_s);
  for (const SweepPoint& p : out.points) {
    if (p.rate <= out.max_rate) out.at_max = p;
  }
  return out;
}

std::vector<SweepOutcome> sweep_all(const std::vector<Contender>& contenders,
                                    const std::vector<SimRequest>& requests,
                                    const SweepOptions& options) {
  std::vector<SweepOutcome> out(contenders.size());
  for (size_t i = 0; i < contenders.size(); i += 2) {
    auto second =
        i + 1 < contenders.size()
            ? std::async(std::launch::async,
                         [&, i] { return sweep_rates(contenders[i + 1], requests, options); })
            : std::future<SweepOutcome>();
    out[i] = sweep_rates(contenders[i], requests, options);
    if (second.valid()) out[i + 1] = second.get();
  }
  return out;
}

}  // namespace pagedserve::paper
