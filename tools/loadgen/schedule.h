// Arrival schedules for the load generator: when (seconds after the run starts) each request
// is sent. Open loop: the schedule is fixed before the run, so a slow server never delays it.
// Pure and seeded: the same options give the same schedule.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pagedserve::loadgen {

struct ScheduleOptions {
  // Request rate (requests/s). Unset = replay the trace's own timestamps; infinity = all at
  // once.
  std::optional<double> request_rate;
  double burstiness = 1.0;  // gamma shape of the gaps: 1 = Poisson, < 1 burstier, > 1 smoother
  double time_scale = 1.0;  // replay speed-up: trace gap / time_scale
  uint32_t seed = 0;
};

// "inf" -> infinity, else a positive number; throws std::invalid_argument.
double parse_rate(const std::string& text);

// Replay: arrival i = (timestamps[i] - timestamps[0]) / time_scale, clamped to be
// non-decreasing. Rate: the first request at 0, then gamma(shape = burstiness,
// scale = 1 / (rate * burstiness)) gaps, whose mean is 1 / rate. Infinite rate: all 0.
std::vector<double> replay_arrivals(const std::vector<double>& timestamps_s, double time_scale);
std::vector<double> rate_arrivals(size_t count, double rate, double burstiness, uint32_t seed);

}  // namespace pagedserve::loadgen
