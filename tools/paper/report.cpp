// Report helpers: progress lines and table-cell formatting.
#include "tools/paper/report.h"

#include <cstdio>
#include <mutex>

#include "tools/paper/paper_bench.h"

namespace pagedserve::paper {

void Report::note(const std::string& line) const {
  static std::mutex mutex;  // sweeps run on two threads
  if (!options.progress) return;
  std::lock_guard<std::mutex> lock(mutex);
  options.progress(line);
}

std::string fmt(const char* format, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), format, value);
  return buffer;
}

std::string pct(double share) { return fmt("%.1f%%", 100.0 * share); }

std::string ratio(double numerator, double denominator) {
  return denominator > 0 ? fmt("%.2fx", numerator / denominator) : std::string("n/a");
}

}  // namespace pagedserve::paper
