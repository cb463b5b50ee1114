// CliFlags: a small command-line parser for the pagedserve subcommands. Flags are
// "--name value", "--name=value" or boolean "--name"; a flag may repeat (e.g. --prompt).
// Every error names the flag and what was wrong with it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace pagedserve::tools {

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class CliFlags {
 public:
  // value_flags take a value; bool_flags do not. Anything else is a UsageError.
  CliFlags(const std::vector<std::string>& args, const std::set<std::string>& value_flags,
           const std::set<std::string>& bool_flags);

  bool has(const std::string& name) const { return values_.count(name) > 0; }
  std::vector<std::string> all(const std::string& name) const;
  std::string get(const std::string& name, const std::string& fallback) const;
  std::string require(const std::string& name) const;
  int64_t get_int(const std::string& name, int64_t fallback, int64_t min, int64_t max) const;
  double get_double(const std::string& name, double fallback) const;
  // Sizes such as 4096, 512M, 2G, 1GiB (binary multiples).
  int64_t get_bytes(const std::string& name, int64_t fallback) const;

 private:
  std::map<std::string, std::vector<std::string>> values_;
};

}  // namespace pagedserve::tools
