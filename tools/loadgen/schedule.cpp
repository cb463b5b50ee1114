// Arrival schedules: trace replay with a speed-up, Poisson / gamma gaps, all at once.
#include "tools/loadgen/schedule.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>

namespace pagedserve::loadgen {

double parse_rate(const std::string& text) {
  if (text == "inf" || text == "infinity") return std::numeric_limits<double>::infinity();
  size_t pos = 0;
  double rate = 0;
  try {
    rate = std::stod(text, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  if (pos != text.size() || !(rate > 0)) {
    throw std::invalid_argument("a request rate is a positive number or 'inf', got '" + text + "'");
  }
  return rate;
}

std::vector<double> replay_arrivals(const std::vector<double>& timestamps_s, double time_scale) {
  std::vector<double> arrivals;
  arrivals.reserve(timestamps_s.size());
  double previous = 0.0;
  for (const double t : timestamps_s) {
    previous = std::max(previous, (t - timestamps_s.front()) / time_scale);
    arrivals.push_back(previous);
  }
  return arrivals;
}

std::vector<double> rate_arrivals(size_t count, double rate, double burstiness, uint32_t seed) {
  std::vector<double> arrivals(count, 0.0);
  if (std::isinf(rate)) return arrivals;
  std::mt19937_64 rng(seed);
  std::gamma_distribution<double> gap(burstiness, 1.0 / (rate * burstiness));
  for (size_t i = 1; i < count; ++i) arrivals[i] = arrivals[i - 1] + gap(rng);
  return arrivals;
}

}  // namespace pagedserve::loadgen
