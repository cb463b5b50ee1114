// `pagedserve serve` as a process: it binds 127.0.0.1 on the port it is given (0: any free
// one, which it prints), answers, and on SIGTERM or SIGINT finishes what is in flight and
// exits 0. Its security flags: keys from --api-key (repeated) and --api-key-file, TLS from
// --ssl-certfile/--ssl-keyfile, and a clear error (and no serving) for bad ones.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <thread>

#include "tests/net/server/test_client.h"
#include "tests/net/server/tls_client.h"
#include "tests/test_paths.h"

extern char** environ;

namespace pagedserve::net::testing {
namespace {

struct ServeProcess {
  pid_t pid = -1;
  int stderr_fd = -1;
  std::string output;

  // Reads stderr until the "serving ... on http(s)://HOST:PORT" line; returns the port (0:
  // none).
  uint16_t wait_for_port() {
    const std::regex serving("on https?://127\\.0\\.0\\.1:([0-9]+)");
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

  // For a process that ends by itself: all of stderr, then the exit code.
  int wait_for_exit() {
    char chunk[512];
    for (ssize_t n; (n = ::read(stderr_fd, chunk, sizeof chunk)) > 0;) {
      output.append(chunk, static_cast<size_t>(n));
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    ::close(stderr_fd);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
};

ServeProcess spawn_serve(const std::vector<std::string>& extra_args = {}) {
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
  args.insert(args.end(), extra_args.begin(), extra_args.end());
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

std::filesystem::path scratch_dir() {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("pagedserve_serve_flags_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(ServeBinaryTest, KeysFromFlagsAndFile) {
  const std::filesystem::path keys = scratch_dir() / "keys.txt";
  std::ofstream(keys) << "# operators\n\n  file-key-1  \nfile-key-2\n";
  ServeProcess serve =
      spawn_serve({"--api-key", "flag-key", "--api-key", "flag-key-2", "--api-key-file", keys});
  const uint16_t port = serve.wait_for_port();
  ASSERT_NE(port, 0) << serve.output;
  for (const char* key : {"flag-key", "flag-key-2", "file-key-1", "file-key-2"}) {
    EXPECT_EQ(http_request(port, "GET", "/v1/models", "",
                           {{"Authorization", std::string("Bearer ") + key}})
                  .status,
              200)
        << key;
  }
  for (const char* wrong : {"# operators", "", "file-key-", "file-key-12", "other"}) {
    EXPECT_EQ(http_request(port, "GET", "/v1/models", "", {{"X-Api-Key", wrong}}).status, 401)
        << wrong;
  }
  EXPECT_EQ(serve.stop_with(SIGTERM), 0) << serve.output;
}

TEST(ServeBinaryTest, ServesHttpsWithCertificateFlags) {
  const TlsFiles files = make_self_signed(scratch_dir(), "serve");
  ServeProcess serve =
      spawn_serve({"--ssl-certfile", files.cert_file, "--ssl-keyfile", files.key_file});
  const uint16_t port = serve.wait_for_port();
  ASSERT_NE(port, 0) << serve.output;
  EXPECT_NE(serve.output.find("on https://"), std::string::npos) << serve.output;
  EXPECT_EQ(https_request(port, files.cert_file, "POST", "/v1/completions",
                          R"({"prompt": "Once", "max_tokens": 3})")
                .status,
            200);
  EXPECT_EQ(serve.stop_with(SIGTERM), 0) << serve.output;
}

// Each bad flag: a non-zero exit before serving, with stderr naming the flag.
TEST(ServeBinaryTest, BadSecurityAndLimitFlagsStopWithAnError) {
  const std::filesystem::path dir = scratch_dir();
  const std::filesystem::path empty_keys = dir / "empty.txt";
  std::ofstream(empty_keys) << "# nothing here\n\n";
  const TlsFiles files = make_self_signed(dir, "bad_flags");
  const TlsFiles other = make_self_signed(dir, "bad_flags_other");
  struct Case {
    std::vector<std::string> args;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {{"--api-key-file", (dir / "missing.txt").string()}, "--api-key-file"},
      {{"--api-key-file", empty_keys.string()}, "holds no key"},
      {{"--api-key", ""}, "--api-key must not be empty"},
      {{"--ssl-certfile", files.cert_file}, "--ssl-keyfile"},
      {{"--ssl-certfile", (dir / "missing.crt").string(), "--ssl-keyfile", files.key_file},
       "cannot read --ssl-certfile"},
      {{"--ssl-certfile", files.cert_file, "--ssl-keyfile", other.key_file}, "--ssl-keyfile"},
      {{"--allowed-origins", "example.com"}, "--allowed-origins"},
      {{"--max-n", "129"}, "--max-n"},
      {{"--max-header-bytes", "100"}, "--max-header-bytes"},
  };
  for (const Case& c : cases) {
    ServeProcess serve = spawn_serve(c.args);
    const int code = serve.wait_for_exit();
    EXPECT_NE(code, 0) << serve.output;
    EXPECT_NE(serve.output.find(c.expected), std::string::npos) << serve.output;
    EXPECT_EQ(serve.output.find("serving"), std::string::npos) << serve.output;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pagedserve::net::testing
