// End to end: `pagedserve bench serve` replays 200 requests of the Azure conversation trace
// against a real `pagedserve serve` with stories260K, over HTTP/SSE and over WebSocket, with
// zero failures. Skips (saying why) while `pagedserve serve` does not exist yet.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/test_paths.h"

namespace {

int shell(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

class ServeReplay : public ::testing::Test {
 protected:
  void SetUp() override {
    binary_ = PAGEDSERVE_BINARY;
    trace_ =
        pagedserve::testing::shared_dir() / "traces/azure-2023/AzureLLMInferenceTrace_conv.csv";
    if (!std::filesystem::exists(binary_)) GTEST_SKIP() << binary_ << " is not built";
    if (shell(binary_ + " serve --help > /dev/null 2>&1") != 0) {
      GTEST_SKIP() << "`pagedserve serve` does not exist yet (serve --help failed)";
    }
    if (!std::filesystem::exists(trace_)) GTEST_SKIP() << trace_ << " not found";
    const auto model = pagedserve::testing::stories260k_dir();
    if (!std::filesystem::exists(model)) GTEST_SKIP() << model << " not found";
    log_ = std::filesystem::temp_directory_path() / ("loadgen_serve_" + std::to_string(getpid()));
    pid_ = fork();
    if (pid_ == 0) {
      const std::string log = log_.string() + ".log";
      freopen(log.c_str(), "w", stderr);
      execl(binary_.c_str(), binary_.c_str(), "serve", "--model", model.c_str(), "--port", "0",
            "--log-interval", "0", static_cast<char*>(nullptr));
      _exit(127);
    }
    // The server prints "... on http://HOST:PORT (Ctrl-C to stop)" once it listens.
    for (int i = 0; i < 300 && base_url_.empty(); ++i) {
      usleep(50'000);
      std::ifstream in(log_.string() + ".log");
      const std::string text((std::istreambuf_iterator<char>(in)), {});
      const size_t at = text.find("http://");
      if (at != std::string::npos && text.find(' ', at) != std::string::npos) {
        base_url_ = text.substr(at, text.find(' ', at) - at);
      }
    }
    ASSERT_FALSE(base_url_.empty()) << "the server did not start";
  }

  void TearDown() override {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
    std::filesystem::remove(log_.string() + ".log");
    std::filesystem::remove(log_.string() + ".json");
  }

  nlohmann::json replay(const std::string& protocol) {
    const std::string json = log_.string() + ".json";
    const std::string command = binary_ + " bench serve --quiet --trace " + trace_.string() +
                                " --num-requests 200 --time-scale 50 --max-prompt-tokens 192" +
                                " --max-output-tokens 64 --protocol " + protocol + " --base-url " +
                                base_url_ + " --result-json " + json + " > /dev/null";
    EXPECT_EQ(shell(command), 0) << command;
    std::ifstream in(json);
    return nlohmann::json::parse(in, nullptr, false);
  }

  std::string binary_, base_url_;
  std::filesystem::path trace_, log_;
  pid_t pid_ = -1;
};

TEST_F(ServeReplay, TwoHundredAzureConversationRequestsOverHttpWithoutFailures) {
  const nlohmann::json result = replay("http");
  ASSERT_TRUE(result.is_object());
  EXPECT_EQ(result["summary"]["completed"], 200) << result["summary"].dump();
  EXPECT_EQ(result["summary"]["failed"], 0) << result["summary"]["failure_reasons"].dump();
  EXPECT_EQ(result["requests"].size(), 200u);
  for (const auto& r : result["requests"]) {
    EXPECT_EQ(r["output_tokens"], r["expected_output_tokens"]);  // ignore_eos forced them
  }
}

TEST_F(ServeReplay, TwoHundredAzureConversationRequestsOverWebSocketWithoutFailures) {
  const nlohmann::json result = replay("ws");
  ASSERT_TRUE(result.is_object());
  EXPECT_EQ(result["summary"]["completed"], 200) << result["summary"].dump();
  EXPECT_EQ(result["summary"]["failed"], 0) << result["summary"]["failure_reasons"].dump();
}

}  // namespace
