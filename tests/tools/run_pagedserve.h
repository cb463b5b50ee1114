// Runs the built pagedserve binary (PAGEDSERVE_BINARY, set by tests/CMakeLists.txt) with a
// command line, for the CLI tests: exit code and output.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace pagedserve::testing {

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together, unless stderr was kept apart
};

// stdout and (unless keep_stderr_apart, which drops it) stderr of `pagedserve args`.
inline CommandResult run_pagedserve(const std::string& args, bool keep_stderr_apart = false) {
  const std::string command =
      std::string(PAGEDSERVE_BINARY) + " " + args + (keep_stderr_apart ? " 2>/dev/null" : " 2>&1");
  CommandResult result;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return result;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) {
    result.output.append(buffer.data(), n);
  }
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

}  // namespace pagedserve::testing
