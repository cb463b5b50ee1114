// SamplingParams: how one request picks its tokens and when it stops, as in vLLM's
// SamplingParams and OpenAI's request fields.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pagedserve::model {

struct SamplingParams {
  float temperature = 1.0f;      // 0 = greedy
  float top_p = 1.0f;            // (0, 1]; 1 = off
  int top_k = 0;                 // 0 or -1 = off
  float min_p = 0.0f;            // [0, 1]; 0 = off
  std::optional<uint64_t> seed;  // same seed and prompt -> same output
  int max_tokens = 16;
  int min_tokens = 0;  // EOS and stop ids are ignored until this many tokens exist
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;

  // Empty when valid, else a message naming the bad field, e.g. "top_p must be in (0, 1], got 2".
  std::string validate() const;
  bool is_greedy() const { return temperature < 1e-5f || top_k == 1; }
};

}  // namespace pagedserve::model
