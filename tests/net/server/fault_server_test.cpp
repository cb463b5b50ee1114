// An executor fault during a streamed HTTP completion (issue 19), end to end: the engine on
// stories260K behind the HTTP server, with a FaultyExecutor (tests/actors/faulty_executor.h)
// that throws once, in the first step after the streamed request has produced a few tokens. The
// SSE stream gets the tokens made before the fault, then an error event whose message names the
// fault, then [DONE]; the server keeps answering /health, every KV block is free again, and a new
// completion of the same prompt gets exactly the tokens of a fault-free run.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "actors/engine.h"
#include "actors/fault_hooks.h"
#include "net/server/http_server.h"
#include "tests/actors/faulty_executor.h"
#include "tests/net/server/test_client.h"
#include "tests/test_paths.h"

namespace pagedserve::net::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

constexpr int kMaxTokens = 32;
constexpr int kTokensBeforeFault = 4;

std::string completion_body(bool stream) {
  return json{{"prompt", "Once upon a time"},
              {"max_tokens", kMaxTokens},
              {"temperature", 0},
              {"ignore_eos", true},
              {"stream", stream}}
      .dump();
}

actors::EngineConfig engine_config() {
  actors::EngineConfig config;
  config.model_dir = pagedserve::testing::stories260k_dir();
  config.num_kv_blocks = 256;
  config.num_threads = 1;
  return config;
}

// The engine (with or without the fault) behind a server on an ephemeral loopback port.
struct FaultyServer {
  explicit FaultyServer(std::shared_ptr<actors::testing_util::ExecutorFaultControl> control) {
    HttpServerConfig config;
    config.host = "127.0.0.1";
    config.port = 0;
    config.stats_log_interval = 0ms;
    config.log = [](std::string_view) {};
    actors::EngineOptions options = engine_options_for(config, engine_config());
    if (control) {
      options.fault_hooks = std::make_shared<const actors::FaultHooks>(
          actors::testing_util::executor_fault_hooks(std::move(control)));
    }
    engine = actors::Engine::start(engine_config(), options);
    server = std::make_unique<HttpServer>(*engine, std::move(config));
    port = server->start();
  }
  ~FaultyServer() {
    server.reset();
    engine->shutdown();
  }
  bool idle_with_every_block_free() {
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    while (std::chrono::steady_clock::now() < deadline) {
      const actors::EngineStats s = engine->stats();
      if (s.num_unfinished_requests == 0 && s.num_kv_blocks_used == 0 &&
          s.num_kv_blocks_free == s.num_kv_blocks_total) {
        return true;
      }
      std::this_thread::sleep_for(5ms);
    }
    return false;
  }

  std::unique_ptr<actors::Engine> engine;
  std::unique_ptr<HttpServer> server;
  uint16_t port = 0;
};

// The completion's text, non-streamed.
std::string completion_text(uint16_t port) {
  const HttpResult result = http_request(port, "POST", "/v1/completions", completion_body(false));
  EXPECT_EQ(result.status, 200) << result.body;
  const json body = json::parse(result.body);
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length") << result.body;
  return body["choices"][0]["text"].get<std::string>();
}

TEST(FaultServer, ExecutorFaultMidStreamEndsTheStreamWithAnErrorAndTheServerStaysUp) {
  if (!actors::kFaultInjectionCompiledIn) GTEST_SKIP() << "fault injection is compiled out";
  std::string reference;
  {
    FaultyServer clean(nullptr);
    reference = completion_text(clean.port);
  }

  auto control = std::make_shared<actors::testing_util::ExecutorFaultControl>();
  control->fail_when = [](const actors::StepInput& input) {
    for (const actors::ScheduledSequence& seq : input.seqs) {
      // "Once upon a time" is 5 prompt tokens: this step samples the fifth generated one.
      if (seq.num_computed_tokens >= 5 + kTokensBeforeFault - 1) return true;
    }
    return false;
  };
  FaultyServer server(control);
  SseClient client(server.port, "/v1/completions", completion_body(true));
  ASSERT_EQ(client.status(), 200);
  std::vector<std::string> events;
  while (std::optional<std::string> event = client.next_event()) events.push_back(*event);

  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), "[DONE]");
  const json error = json::parse(events[events.size() - 2]);
  ASSERT_TRUE(error.contains("error")) << error.dump();
  EXPECT_NE(error["error"]["message"].get<std::string>().find(
                actors::testing_util::kInjectedExecutorFault),
            std::string::npos)
      << error.dump();
  std::string streamed_text;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    const json chunk = json::parse(events[i]);
    for (const json& choice : chunk["choices"]) {
      streamed_text += choice.value("text", "");
      EXPECT_TRUE(!choice.contains("finish_reason") || choice["finish_reason"].is_null())
          << "no normal finish before the error";
    }
  }
  EXPECT_EQ(reference.rfind(streamed_text, 0), 0u)
      << "what was streamed before the fault is the fault-free text's start: '" << streamed_text
      << "'";
  EXPECT_LT(streamed_text.size(), reference.size());
  EXPECT_EQ(control->num_failures.load(), 1);

  EXPECT_EQ(http_request(server.port, "GET", "/health").status, 200);
  EXPECT_TRUE(server.idle_with_every_block_free());
  EXPECT_EQ(completion_text(server.port), reference) << "a new completion after the fault";
  EXPECT_TRUE(server.idle_with_every_block_free());
}

}  // namespace
}  // namespace pagedserve::net::testing
