// What every section of `pagedserve bench paper` writes into: the Markdown report, the
// machine-readable results (--result-json) and the SVG plots' folder.
#pragma once

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace pagedserve::paper {

struct PaperOptions;

struct Report {
  const PaperOptions& options;
  std::ostringstream md;
  nlohmann::ordered_json results = nlohmann::ordered_json::object();
  std::filesystem::path dir;  // where the SVGs go (beside the report)

  void note(const std::string& line) const;  // progress (stderr), when the options ask for it
};

// printf-formats one number for a Markdown table cell.
std::string fmt(const char* format, double value);
std::string pct(double share);  // 0.123 -> "12.3%"
// "2.31x", or "n/a" when the denominator is not positive.
std::string ratio(double numerator, double denominator);

}  // namespace pagedserve::paper
