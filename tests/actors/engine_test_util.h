// Helpers shared by the LlmEngine tests: run to completion collecting every request's
// streamed tokens and final output, the stories260K config, greedy params, block checks.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "actors/llm_engine.h"
#include "tests/test_paths.h"

namespace pagedserve::actors::testing_util {

struct Finished {
  std::map<int, std::vector<int32_t>> streamed;  // tokens from the deltas, by sequence index
  std::map<int, std::string> streamed_text;      // text deltas, by sequence index
  RequestOutput last;                            // the finished output
  bool finished = false;

  // Sequence 0's streamed tokens: the whole output of an n = 1 request.
  const std::vector<int32_t>& tokens() const {
    static const std::vector<int32_t> kEmpty;
    auto it = streamed.find(0);
    return it == streamed.end() ? kEmpty : it->second;
  }
  FinishReason finish_reason() const {
    return last.outputs.empty() ? FinishReason::kNone : last.outputs.front().finish_reason;
  }
};

inline void collect(std::map<uint64_t, Finished>& out, std::vector<RequestOutput> outputs) {
  for (RequestOutput& o : outputs) {
    Finished& f = out[o.request_id];
    for (const SequenceOutput& d : o.deltas) {
      auto& tokens = f.streamed[d.index];
      tokens.insert(tokens.end(), d.new_token_ids.begin(), d.new_token_ids.end());
      f.streamed_text[d.index] += d.text_delta;
    }
    if (o.finished) {
      EXPECT_FALSE(f.finished) << "request " << o.request_id << " finished twice";
      f.finished = true;
      f.last = std::move(o);
    }
  }
}

inline std::map<uint64_t, Finished> run_to_completion(LlmEngine& engine) {
  std::map<uint64_t, Finished> out;
  for (int guard = 0; engine.has_unfinished_requests(); ++guard) {
    if (guard >= 100000) {
      ADD_FAILURE() << "engine made no progress";
      break;
    }
    collect(out, engine.step());
  }
  return out;
}

inline EngineConfig stories_config() {
  EngineConfig config;
  config.model_dir = testing::stories260k_dir();
  config.num_kv_blocks = 256;
  return config;
}

inline void expect_all_blocks_free(const LlmEngine& engine) {
  const auto& blocks = engine.scheduler().block_manager();
  EXPECT_EQ(blocks.num_free_device_blocks(), blocks.num_total_device_blocks());
  EXPECT_EQ(blocks.num_free_cpu_blocks(), blocks.num_total_cpu_blocks());
  EXPECT_EQ(blocks.check_invariants(), "");
}

inline model::SamplingParams greedy(int max_tokens) {
  model::SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  return p;
}

}  // namespace pagedserve::actors::testing_util
