// CliFlags: parsing and typed access with errors that name the flag.
#include "tools/cli_flags.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

namespace pagedserve::tools {

CliFlags::CliFlags(const std::vector<std::string>& args, const std::set<std::string>& value_flags,
                   const std::set<std::string>& bool_flags) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.rfind("--", 0) != 0) throw UsageError("unexpected argument '" + arg + "'");
    std::string name = arg.substr(2);
    std::optional<std::string> value;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (bool_flags.count(name)) {
      if (value) throw UsageError("--" + name + " takes no value");
      values_[name].push_back("true");
    } else if (value_flags.count(name)) {
      if (!value) {
        if (i + 1 >= args.size()) throw UsageError("--" + name + " needs a value");
        value = args[++i];
      }
      values_[name].push_back(*value);
    } else {
      throw UsageError("unknown flag --" + name);
    }
  }
}

std::vector<std::string> CliFlags::all(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

std::string CliFlags::get(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second.back();
}

std::string CliFlags::require(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) throw UsageError("--" + name + " is required");
  return it->second.back();
}

int64_t CliFlags::get_int(const std::string& name, int64_t fallback, int64_t min,
                          int64_t max) const {
  if (!has(name)) return fallback;
  const std::string text = get(name, "");
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE) {
    throw UsageError("--" + name + " expects an integer, got '" + text + "'");
  }
  if (value < min || value > max) {
    throw UsageError("--" + name + " must be in [" + std::to_string(min) + ", " +
                     std::to_string(max) + "], got " + text);
  }
  return value;
}

double CliFlags::get_double(const std::string& name, double fallback) const {
  if (!has(name)) return fallback;
  const std::string text = get(name, "");
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(value)) {
    throw UsageError("--" + name + " expects a number, got '" + text + "'");
  }
  return value;
}

int64_t CliFlags::get_bytes(const std::string& name, int64_t fallback) const {
  if (!has(name)) return fallback;
  const std::string text = get(name, "");
  char* end = nullptr;
  const double number = std::strtod(text.c_str(), &end);
  std::string suffix(end);
  for (char& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double scale = 1;
  if (suffix == "" || suffix == "B")
    scale = 1;
  else if (suffix == "K" || suffix == "KB" || suffix == "KIB")
    scale = 1024.0;
  else if (suffix == "M" || suffix == "MB" || suffix == "MIB")
    scale = 1024.0 * 1024;
  else if (suffix == "G" || suffix == "GB" || suffix == "GIB")
    scale = 1024.0 * 1024 * 1024;
  else if (suffix == "T" || suffix == "TB" || suffix == "TIB")
    scale = 1024.0 * 1024 * 1024 * 1024;
  else
    throw UsageError("--" + name + " expects a size such as 512M or 4G, got '" + text + "'");
  if (end == text.c_str() || !(number >= 0) || number * scale > 9.0e18) {
    throw UsageError("--" + name + " expects a non-negative size, got '" + text + "'");
  }
  return static_cast<int64_t>(number * scale);
}

}  // namespace pagedserve::tools
