// Helpers of the fault-injection tests (fault_*_test.cpp): the engine on stories260K with
// small KV blocks (so short prompts fill whole blocks and reach the prefix cache), the
// reference tokens of each prompt from a fault-free engine, stream draining without blocking
// past a missing final event, and the checks every fault test ends with.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "actors/engine.h"
#include "actors/fault_hooks.h"
#include "tests/test_paths.h"

namespace pagedserve::actors::testing_util {

using namespace std::chrono_literals;

// Generous: a loaded 2-core machine under ThreadSanitizer is slow; these only catch hangs.
inline constexpr auto kNoHangTimeout = 60s;

#define SKIP_WITHOUT_FAULT_INJECTION()                                                   \
  if (!kFaultInjectionCompiledIn) {                                                      \
    GTEST_SKIP() << "fault injection is compiled out of Release builds (fault_hooks.h)"; \
  }

inline EngineConfig fault_test_config(int max_num_seqs) {
  EngineConfig config;
  config.model_dir = pagedserve::testing::stories260k_dir();
  config.block_size = 4;
  config.num_kv_blocks = 256;
  config.max_num_seqs = max_num_seqs;
  config.num_threads = 1;
  return config;
}

inline EngineOptions options_with(FaultHooks hooks, bool overlap = true) {
  EngineOptions options;
  options.overlap = overlap;
  options.fault_hooks = std::make_shared<const FaultHooks>(std::move(hooks));
  return options;
}

inline model::SamplingParams greedy_tokens(int max_tokens) {
  model::SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;  // every fault-free request runs to max_tokens
  return p;
}

inline GenerateRequest prompt_request(const std::string& prompt, int max_tokens) {
  GenerateRequest r;
  r.prompt = prompt;
  r.sampling = greedy_tokens(max_tokens);
  return r;
}

struct Drained {
  std::vector<int32_t> tokens;
  TokenEvent last;
  int num_final_events = 0;
};

// Reads the stream until its final event, giving up (a failure) after kNoHangTimeout.
inline Drained drain_stream(RequestStream& stream) {
  Drained out;
  const auto deadline = std::chrono::steady_clock::now() + kNoHangTimeout;
  while (!stream.finished() || out.num_final_events == 0) {
    std::optional<TokenEvent> event = stream.try_next();
    if (!event) {
      if (std::chrono::steady_clock::now() > deadline) {
        ADD_FAILURE() << "request " << stream.request_id() << " never ended";
        break;
      }
      std::this_thread::sleep_for(1ms);
      continue;
    }
    out.tokens.insert(out.tokens.end(), event->token_ids.begin(), event->token_ids.end());
    if (event->finished) {
      ++out.num_final_events;
      out.last = *event;
    }
  }
  while (std::optional<TokenEvent> extra = stream.try_next()) {
    if (extra->finished) ++out.num_final_events;
  }
  return out;
}

// Each prompt alone on a fault-free engine with the same settings: what a request the fault
// does not touch must produce (greedy).
inline std::map<std::string, std::vector<int32_t>> reference_tokens(
    const std::vector<std::string>& prompts, int max_tokens, int max_num_seqs) {
  auto engine = Engine::start(fault_test_config(max_num_seqs));
  std::map<std::string, std::vector<int32_t>> out;
  for (const std::string& prompt : prompts) {
    out[prompt] = drain_stream(*engine->submit(prompt_request(prompt, max_tokens))).tokens;
    EXPECT_EQ(out[prompt].size(), static_cast<size_t>(max_tokens));
  }
  return out;
}

inline bool wait_for_stats(const Engine& engine,
                           const std::function<bool(const EngineStats&)>& done) {
  const auto deadline = std::chrono::steady_clock::now() + kNoHangTimeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done(engine.stats())) return true;
    std::this_thread::sleep_for(2ms);
  }
  return false;
}

inline bool idle_with_every_block_free(const EngineStats& s) {
  return s.num_unfinished_requests == 0 && s.num_running_seqs == 0 && s.num_waiting_seqs == 0 &&
         s.num_swapped_seqs == 0 && s.num_kv_blocks_used == 0 &&
         s.num_kv_blocks_free == s.num_kv_blocks_total && s.num_kv_blocks_total > 0;
}

inline bool is_prefix(const std::vector<int32_t>& head, const std::vector<int32_t>& whole) {
  return head.size() <= whole.size() && std::equal(head.begin(), head.end(), whole.begin());
}

// The request ran as if no fault had happened.
inline void expect_unaffected(const Drained& got, const std::vector<int32_t>& reference,
                              const std::string& what) {
  EXPECT_EQ(got.num_final_events, 1) << what;
  EXPECT_EQ(got.last.finish_reason, "length") << what << ": " << got.last.error;
  EXPECT_TRUE(got.last.error.empty()) << what;
  EXPECT_EQ(got.tokens, reference) << what;
}

// The request ended with an error naming `message_part`, after a prefix of its reference.
inline void expect_failed(const Drained& got, const std::vector<int32_t>& reference,
                          const std::string& message_part, const std::string& what) {
  EXPECT_EQ(got.num_final_events, 1) << what;
  EXPECT_EQ(got.last.finish_reason, "error") << what;
  EXPECT_NE(got.last.error.find(message_part), std::string::npos)
      << what << ": the error was '" << got.last.error << "'";
  EXPECT_LT(got.tokens.size(), reference.size()) << what;
  EXPECT_TRUE(is_prefix(got.tokens, reference)) << what << ": tokens before the fault differ";
}

// After a fault: every block free, and the engine still serves a new request (the prompt of a
// request the fault ended) exactly as a fault-free engine does.
inline void expect_recovered(Engine& engine, const std::string& prompt,
                             const std::vector<int32_t>& reference) {
  EXPECT_TRUE(wait_for_stats(engine, idle_with_every_block_free))
      << "blocks used " << engine.stats().num_kv_blocks_used << ", unfinished "
      << engine.stats().num_unfinished_requests;
  const Drained again =
      drain_stream(*engine.submit(prompt_request(prompt, static_cast<int>(reference.size()))));
  expect_unaffected(again, reference, "a new request after the fault");
  EXPECT_TRUE(wait_for_stats(engine, idle_with_every_block_free));
}

}  // namespace pagedserve::actors::testing_util
