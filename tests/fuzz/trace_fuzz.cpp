// Fuzzes the load generator's trace readers (tools/loadgen/trace.h): the Azure CSV, the lengths
// CSV (ShareGPT / Alpaca) and JSONL, under both bad-line policies, then the length limits and
// the context fit `bench serve` applies. The first byte picks reader, policy and limits; the
// rest is the file.
//
// Checks: kSkip never throws and kFail throws only TraceError; every request read has exactly
// one prompt form, a line number inside the file, increasing; apply_length_limits keeps every
// length >= 1 and (clip mode) within its limit, with prompt_token_ids cut to prompt_tokens;
// fit_to_context leaves prompt + max_tokens within the room the context leaves.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string_view>

#include "tests/fuzz/fuzz_util.h"
#include "tools/loadgen/trace.h"

using namespace pagedserve;
using namespace pagedserve::loadgen;

namespace {

void check_requests(const std::vector<TraceRequest>& requests, int64_t num_lines) {
  int64_t previous = 0;
  for (const TraceRequest& r : requests) {
    FUZZ_CHECK(r.line_number > previous && r.line_number <= num_lines,
               "line number " + std::to_string(r.line_number));
    previous = r.line_number;
    const int forms = int(r.prompt_text.has_value()) + int(!r.prompt_token_ids.empty()) +
                      int(r.messages.has_value()) +
                      int(r.prompt_token_ids.empty() && r.prompt_tokens > 0);
    FUZZ_CHECK(forms == 1, "line " + std::to_string(r.line_number) + " has " +
                               std::to_string(forms) + " prompt forms");
    FUZZ_CHECK(!r.max_tokens || *r.max_tokens >= 1, "max_tokens < 1");
  }
}

void check_limits(const std::vector<TraceRequest>& requests, const LengthLimits& limits) {
  for (const TraceRequest& r : requests) {
    const bool counted = r.prompt_tokens > 0 || !r.prompt_token_ids.empty();
    if (counted) {
      FUZZ_CHECK(r.prompt_tokens >= 1, "prompt shrank to nothing");
      if (limits.mode == LengthMode::kClip && limits.max_prompt_tokens > 0) {
        FUZZ_CHECK(r.prompt_tokens <= limits.max_prompt_tokens, "prompt over its limit");
      }
    }
    if (!r.prompt_token_ids.empty()) {
      FUZZ_CHECK(static_cast<int64_t>(r.prompt_token_ids.size()) == r.prompt_tokens,
                 "ids and prompt_tokens differ");
    }
    if (r.max_tokens) {
      FUZZ_CHECK(*r.max_tokens >= 1, "max_tokens shrank to nothing");
      if (limits.mode == LengthMode::kClip && limits.max_output_tokens > 0) {
        FUZZ_CHECK(*r.max_tokens <= limits.max_output_tokens, "output over its limit");
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t selector = data[0];
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  const int64_t num_lines = static_cast<int64_t>(std::count(text.begin(), text.end(), '\n')) + 1;
  const BadLinePolicy policy = (selector & 4) ? BadLinePolicy::kFail : BadLinePolicy::kSkip;
  std::istringstream in(text);
  TraceReadResult result;
  try {
    switch (selector & 3) {
      case 0:
        result = read_azure_csv(in, policy);
        break;
      case 1:
        result = read_lengths_csv(in, policy);
        break;
      default:
        result = read_jsonl(in, policy);
        break;
    }
  } catch (const TraceError& e) {
    FUZZ_CHECK(policy == BadLinePolicy::kFail, std::string("kSkip threw: ") + e.what());
    return 0;
  }
  check_requests(result.requests, num_lines);

  static constexpr int64_t kLimits[] = {0, 1, 7, 100};
  LengthLimits limits;
  limits.max_prompt_tokens = kLimits[(selector >> 3) & 3];
  limits.max_output_tokens = kLimits[(selector >> 5) & 3];
  limits.mode = (selector & 0x80) ? LengthMode::kScale : LengthMode::kClip;
  std::vector<TraceRequest> requests = result.requests;
  apply_length_limits(requests, limits);
  check_limits(requests, limits);

  for (const int64_t max_model_len : {int64_t{2}, int64_t{64}, int64_t{4096}}) {
    const int64_t shared_prefix = selector & 1;
    std::vector<TraceRequest> fitted = requests;
    fit_to_context(fitted, shared_prefix, max_model_len);
    for (const TraceRequest& r : fitted) {
      if (max_model_len - shared_prefix < 2) break;
      FUZZ_CHECK(r.prompt_tokens + r.max_tokens.value_or(0) <= max_model_len - shared_prefix,
                 "does not fit the context: line " + std::to_string(r.line_number));
    }
  }
  return 0;
}
