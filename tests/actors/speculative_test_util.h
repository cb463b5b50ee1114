// What the speculative-decoding engine tests share: requests run to completion in an LlmEngine
// (the block manager's invariants checked after every step, every block free at the end) and
// compared with the same requests' outputs from another configuration; story prompts of
// stories260K, one of them grounded (its continuation repeats it).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "actors/engine.h"
#include "actors/llm_engine.h"
#include "tests/actors/engine_test_util.h"

namespace pagedserve::actors::spec_testing {

using testing_util::greedy;
using Tokens = std::vector<int32_t>;

struct Request {
  Tokens prompt;
  model::SamplingParams params;
};

struct EngineRun {
  std::vector<testing_util::Finished> outputs;  // in request order
  SchedulerStats stats;
};

// Runs the requests (all added at once) to completion, checking the block manager's
// invariants after every step and that every block is free at the end.
inline EngineRun run(const EngineConfig& config, const std::vector<Request>& requests,
                     bool overlap = false) {
  LlmEngine engine(config, overlap);
  std::vector<uint64_t> ids;
  for (const Request& r : requests) ids.push_back(engine.add_request(r.prompt, r.params));
  std::map<uint64_t, testing_util::Finished> done;
  for (int guard = 0; engine.has_unfinished_requests(); ++guard) {
    if (guard >= 100000) {
      ADD_FAILURE() << "engine made no progress";
      break;
    }
    testing_util::collect(done, engine.step());
    const std::string broken = engine.scheduler().block_manager().check_invariants();
    if (!broken.empty()) {
      ADD_FAILURE() << "step " << guard << ": " << broken;
      break;
    }
  }
  testing_util::expect_all_blocks_free(engine);
  EngineRun out;
  for (uint64_t id : ids) out.outputs.push_back(done[id]);
  out.stats = engine.stats();
  return out;
}

inline void expect_same_outputs(const EngineRun& expected, const EngineRun& got,
                                const std::string& what) {
  ASSERT_EQ(expected.outputs.size(), got.outputs.size());
  for (size_t i = 0; i < expected.outputs.size(); ++i) {
    const testing_util::Finished& e = expected.outputs[i];
    const testing_util::Finished& g = got.outputs[i];
    ASSERT_TRUE(g.finished) << what << ": request " << i;
    EXPECT_EQ(g.streamed, e.streamed) << what << ": request " << i;
    EXPECT_EQ(g.streamed_text, e.streamed_text) << what << ": request " << i;
    ASSERT_EQ(g.last.outputs.size(), e.last.outputs.size()) << what << ": request " << i;
    for (size_t o = 0; o < e.last.outputs.size(); ++o) {
      EXPECT_EQ(g.last.outputs[o].token_ids, e.last.outputs[o].token_ids) << what << " " << i;
      EXPECT_EQ(g.last.outputs[o].text, e.last.outputs[o].text) << what << " " << i;
      EXPECT_EQ(g.last.outputs[o].finish_reason, e.last.outputs[o].finish_reason) << what;
      // NaN (not computed) unless the request ranks by it or asked for logprobs.
      const double e_cumulative = e.last.outputs[o].cumulative_logprob;
      const double g_cumulative = g.last.outputs[o].cumulative_logprob;
      if (std::isnan(e_cumulative)) {
        EXPECT_TRUE(std::isnan(g_cumulative)) << what << " " << i << ": " << g_cumulative;
      } else {
        EXPECT_NEAR(g_cumulative, e_cumulative, 1e-3) << what << " " << i;
      }
    }
  }
}

inline const std::vector<std::string> kPrompts = {
    "Once upon a time",   "Lily and Tom",    "The cat sat", "One day, a little bird",
    "Tim had a red ball", "The sun was hot", "Mom said",    "A big dog ran to the park and"};

// A prompt whose continuation repeats it: stories260K's own greedy continuation of a story
// start (it loops), so n-gram proposals from the prompt are mostly right.
inline Tokens grounded_prompt(int length) {
  LlmEngine engine(testing_util::stories_config());
  Tokens prompt = engine.tokenizer().encode("Once upon a time");
  model::SamplingParams params = greedy(length);
  params.ignore_eos = true;
  engine.add_request(prompt, params);
  const auto done = testing_util::run_to_completion(engine);
  const Tokens& out = done.begin()->second.tokens();
  prompt.insert(prompt.end(), out.begin(), out.end());
  return prompt;
}

inline std::vector<Request> story_requests(int max_tokens, int grounded_len = 100) {
  LlmEngine tokenizing(testing_util::stories_config());
  std::vector<Request> requests;
  for (const std::string& p : kPrompts) {
    requests.push_back({tokenizing.tokenizer().encode(p), greedy(max_tokens)});
  }
  requests.push_back({grounded_prompt(grounded_len), greedy(max_tokens)});
  return requests;
}

// Runs the requests through the actor Engine (threads, overlap) and expects each stream's
// tokens to be `expected`'s; returns the engine's counters.
inline EngineStats expect_actor_engine_outputs(const EngineConfig& config,
                                               const std::vector<Request>& requests,
                                               const EngineRun& expected) {
  auto engine = Engine::start(config);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const Request& r : requests) {
    GenerateRequest g;
    g.prompt_token_ids = r.prompt;
    g.sampling = r.params;
    streams.push_back(engine->submit(std::move(g)));
  }
  for (size_t i = 0; i < streams.size(); ++i) {
    Tokens tokens;
    while (std::optional<TokenEvent> event = streams[i]->next()) {
      tokens.insert(tokens.end(), event->token_ids.begin(), event->token_ids.end());
    }
    EXPECT_EQ(tokens, expected.outputs[i].tokens()) << "request " << i;
  }
  const EngineStats stats = engine->stats();
  engine->shutdown();
  return stats;
}

}  // namespace pagedserve::actors::spec_testing
