// `pagedserve serve` as a process: it binds 127.0.0.1 on the port it is given (0: any free
// one, which it prints), answers, and on SIGTERM or SIGINT finishes what is in flight and
// exits 0.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <regex>
#include <string>
#include <thread>

#include "tests/net/server/test_client.h"
#include "tests/test_paths.h"

extern char** environ;

namespace pagedserve::net::testing {
namespace {

struct ServeProcess {
  pid_t pid = -1;
  int stderr_fd = -1;
  std::string output;

  // Reads stderr until the "serving ... on http://HOST:PORT" line; returns the port (0: none).
  uint16_t wait_for_port() {
    const std::regex serving("on http://127\\.0\\.0\\.1:([0-9]+)");
    char chunk[512];
    while (true) {
      std::smatch match;
      if (std::regex_search(output, match, serving))
        return static_cast<uint16_t>(std::stoi(match[1]));
      const ssize_t n = ::read(stderr_fd, chunk, sizeof chunk);
      if (n <= 0) return 0;
      output.append(chunk, static_cast<size_t>(n));
    }
  }

  int stop_with(int signal_number) {
    ::kill(pid, signal_number);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ::close(stderr_fd);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
};

ServeProcess spawn_serve() {
  ServeProcess process;
  int pipe_fds[2];
  EXPECT_EQ(::pipe(pipe_fds), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDERR_FILENO);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
  const std::string model = pagedserve::testing::stories260k_dir().string();
  std::vector<std::string> args = {PAGEDSERVE_BINARY, "serve", "--model",         model,
                                   "--port",          "0",     "--num-kv-blocks", "256",
                                   "--threads",       "1",     "--log-interval",  "0"};
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  EXPECT_EQ(posix_spawn(&process.pid, PAGEDSERVE_BINARY, &actions, nullptr, argv.data(), environ),
            0);
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  process.stderr_fd = pipe_fds[0];
  return process;
}

TEST(ServeBinaryTest, AnswersThenExitsZeroOnSigterm) {
  ServeProcess serve = spawn_serve();
  const uint16_t port = serve.wait_for_port();
  ASSERT_NE(port, 0) << serve.output;
  EXPECT_EQ(http_request(port, "GET", "/health").status, 200);
  EXPECT_EQ(http_request(port, "POST", "/v1/completions", R"({"prompt": "Once", "max_tokens": 4})")
                .status,
            200);
  EXPECT_EQ(serve.stop_with(SIGTERM), 0) << serve.output;
}

TEST(ServeBinaryTest, SigintFinishesTheStreamInFlight) {
  ServeProcess serve = spawn_serve();
  const uint16_t port = serve.wait_for_port();
  ASSERT_NE(port, 0) << serve.output;
  SseClient client(port, "/v1/completions",
                   R"({"prompt": "Once", "max_tokens": 200, "ignore_eos": true, "stream": true})");
  ASSERT_EQ(client.status(), 200);
  ASSERT_TRUE(client.next_event().has_value());
  std::thread stopper([&] { EXPECT_EQ(serve.stop_with(SIGINT), 0); });
  std::string last;
  while (std::optional<std::string> event = client.next_event()) last = *event;
  stopper.join();
  EXPECT_EQ(last, "[DONE]");
}

}  // namespace
}  // namespace pagedserve::net::testing
