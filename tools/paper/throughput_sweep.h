// The paper's Figs. 12-13 machinery: the systems it compares (vLLM, Orca (Oracle/Pow2/Max),
// FasterTransformer), and a sweep of Poisson request rates for each over a geometric grid, up
// to the highest rate whose normalized latency stays under a threshold (interpolated). Pure:
// simulated runs only.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "actors/sim_executor.h"
#include "tools/paper/sim_run.h"
#include "tools/paper/workloads.h"

namespace pagedserve::paper {

// One system of the comparison: a label and how it serves a list of requests.
struct Contender {
  std::string label;  // "vLLM (paged)", "Orca (Oracle)", ...
  std::function<SimRunResult(const std::vector<SimRequest>&)> run;
};

// A system that is run_sim with this configuration.
Contender sim_contender(const actors::SimProfile& profile, const std::string& label,
                        const SimRunConfig& config);

// The paper's five systems on `profile` (single sequences: recompute preemption, as vLLM v0
// did for n = 1). Without static batching when `with_fastertransformer` is false.
std::vector<Contender> paper_contenders(const actors::SimProfile& profile,
                                        bool with_fastertransformer);
// The same systems for requests of several sequences (n > 1, beams): vLLM preempts by
// swapping (v0 recomputed only single sequences); no FasterTransformer.
std::vector<Contender> sharing_contenders(const actors::SimProfile& profile);

struct SweepPoint {
  double rate = 0;        // req/s
  double latency = 0;     // normalized, s/token; infinity when requests failed
  double mean_batch = 0;  // sequences per step, time-averaged
  int64_t preemptions = 0;
  double memory_saved = 0;  // by sharing: 1 - distinct blocks held / blocks tables name
};

struct SweepOutcome {
  std::string label;
  std::vector<SweepPoint> points;  // by rate
  double max_rate = 0;             // highest rate under the threshold (0: none)
  SweepPoint at_max;               // the last grid point under the threshold
};

struct SweepOptions {
  double threshold_s = 0.5;  // normalized latency limit
  double start_rate = 1.0;   // first rate tried (halved while over the threshold)
  double growth = 1.12;      // the rate grid's factor
  double stop_factor = 3.0;  // the grid ends past stop_factor x threshold (or at failures)
  int max_points = 60;
  // Each rate's trace: `duration_s` of arrivals drawn from the pool (trace_at_rate), at least
  // `min_requests`; duration 0: the pool as given, all of it, at each rate.
  double duration_s = 0;
  int min_requests = 200;
  unsigned seed = 0;  // Poisson arrivals
  std::function<void(const std::string&)> progress;
};

// The rate at which the latency curve first crosses `threshold_s`, linearly interpolated
// between the grid points around the crossing (0 when even the first point is over).
double crossing_rate(const std::vector<SweepPoint>& points, double threshold_s);

SweepOutcome sweep_rates(const Contender& contender, const std::vector<SimRequest>& requests,
                         const SweepOptions& options);
// Every contender's sweep, two at a time on threads (runs are independent and pure).
std::vector<SweepOutcome> sweep_all(const std::vector<Contender>& contenders,
                                    const std::vector<SimRequest>& requests,
                                    const SweepOptions& options);

}  // namespace pagedserve::paper
