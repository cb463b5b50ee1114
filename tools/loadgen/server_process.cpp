// The soak's server child process (server_process.h).
#include "tools/loadgen/server_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace pagedserve::loadgen {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// "... on http://HOST:PORT (Ctrl-C to stop)" -> "http://HOST:PORT"; "" until it is there.
std::string url_in_log(const std::string& log) {
  const size_t at = log.find(" on http://");
  if (at == std::string::npos) return "";
  const size_t end = log.find(' ', at + 4);
  return end == std::string::npos ? "" : log.substr(at + 4, end - at - 4);
}

}  // namespace

ServerProcess start_server(const std::string& binary, const std::vector<std::string>& serve_args,
                           const std::string& log_path, double timeout_s) {
  std::vector<std::string> args = {binary, "serve"};
  args.insert(args.end(), serve_args.begin(), serve_args.end());
  args.insert(args.end(), {"--port", "0"});
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int log_fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) throw std::runtime_error("cannot write the server log '" + log_path + "'");
  ServerProcess server;
  server.pid = fork();
  if (server.pid == 0) {
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  close(log_fd);
  if (server.pid < 0) throw std::runtime_error("fork failed");
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(timeout_s));
  while (std::chrono::steady_clock::now() < deadline) {
    server.base_url = url_in_log(read_file(log_path));
    if (!server.base_url.empty()) return server;
    if (const auto code = wait_for_exit(server.pid, 0.05)) {
      throw std::runtime_error("the server exited with " + std::to_string(*code) + ":\n" +
                               read_file(log_path));
    }
  }
  kill(server.pid, SIGKILL);
  wait_for_exit(server.pid, 10);
  throw std::runtime_error("the server did not print its URL within " + std::to_string(timeout_s) +
                           " s:\n" + read_file(log_path));
}

std::optional<int> wait_for_exit(pid_t pid, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(timeout_s));
  while (true) {
    int status = 0;
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    if (done < 0) return std::nullopt;  // not our child (already reaped)
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::optional<int64_t> read_rss_bytes(pid_t pid) {
  return parse_vm_rss(read_file("/proc/" + std::to_string(pid) + "/status"));
}

RssSampler::RssSampler(pid_t pid, double period_s)
    : pid_(pid), period_s_(period_s), thread_([this] { run(); }) {}

RssSampler::~RssSampler() { stop(); }

void RssSampler::stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

std::vector<RssSample> RssSampler::samples() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return samples_;
}

void RssSampler::run() {
  const auto start = std::chrono::steady_clock::now();
  const auto period = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(period_s_));
  auto next = start;
  while (!stop_) {
    if (const auto rss = read_rss_bytes(pid_)) {
      const double t =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::lock_guard<std::mutex> lock(mutex_);
      samples_.push_back({t, *rss});
    }
    next += period;
    while (!stop_ && std::chrono::steady_clock::now() < next) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
}

}  // namespace pagedserve::loadgen
