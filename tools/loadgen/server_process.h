// A `pagedserve serve` child process for the chaos soak: start it on a free port and learn its
// URL from its log, sample its resident memory, signal it and wait for its exit code. POSIX
// only (fork, exec, waitpid, /proc).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tools/loadgen/chaos.h"

namespace pagedserve::loadgen {

struct ServerProcess {
  pid_t pid = -1;
  std::string base_url;  // "http://127.0.0.1:PORT", as the server's start-up line says
};

// Runs `binary serve ARGS --port 0`, its stdout and stderr appended to log_path, and waits up
// to timeout_s for the line naming its URL. Throws std::runtime_error (with the log's tail)
// when it exits or stays silent.
ServerProcess start_server(const std::string& binary, const std::vector<std::string>& serve_args,
                           const std::string& log_path, double timeout_s);

// The exit code once the child exited (a signal death is 128 + signal), or nullopt when it is
// still running after timeout_s. Reaps the child.
std::optional<int> wait_for_exit(pid_t pid, double timeout_s);

// VmRSS of a process, in bytes; nullopt when it cannot be read.
std::optional<int64_t> read_rss_bytes(pid_t pid);

// Samples a process's VmRSS every period on its own thread, from start() until stop().
class RssSampler {
 public:
  RssSampler(pid_t pid, double period_s);
  ~RssSampler();
  void stop();
  std::vector<RssSample> samples() const;

 private:
  void run();

  pid_t pid_;
  double period_s_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mutex_;  // guards samples_
  std::vector<RssSample> samples_;
  std::thread thread_;
};

}  // namespace pagedserve::loadgen
