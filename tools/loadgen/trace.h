// Trace input for `pagedserve bench serve`: the request list read from an Azure LLM inference
// trace CSV or a JSONL log, slicing, and fitting lengths to a small model's context. Pure: no
// I/O beyond reading the file, no Asio.
#pragma once

#include <cstdint>
#include <istream>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace pagedserve::loadgen {

// One request of a trace. Exactly one of the prompt forms is set: prompt_tokens alone (a
// synthesised prompt of that many tokens, the Azure CSV), prompt_token_ids, prompt_text or
// messages (a chat request).
struct TraceRequest {
  int64_t line_number = 0;                 // 1-based line in the input file
  std::optional<double> timestamp_s;       // seconds; CSV rows: from the first row of the file
  int64_t prompt_tokens = 0;               // length to synthesise, or the ids' count; 0 = text
  std::vector<int32_t> prompt_token_ids;   // given ids (JSONL prompt_token_ids)
  std::optional<std::string> prompt_text;  // given text (JSONL prompt)
  std::optional<nlohmann::json> messages;  // given chat messages (JSONL messages)
  std::optional<int64_t> max_tokens;       // forced output length (ignore_eos) when set
  nlohmann::json extra = nlohmann::json::object();  // other sampling fields, passed through
};

enum class BadLinePolicy { kSkip, kFail };

// A line that could not be read: its number and why.
struct BadLine {
  int64_t line_number = 0;
  std::string reason;
};

struct TraceReadResult {
  std::vector<TraceRequest> requests;
  std::vector<BadLine> bad_lines;  // skipped lines (policy kSkip)
};

// Thrown by the readers under BadLinePolicy::kFail; what() names the line.
class TraceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// "2023-11-16 18:15:46.6805900" -> seconds since the Unix epoch (UTC, fraction kept).
// nullopt when the text is not in that form.
std::optional<double> parse_azure_timestamp(const std::string& text);

// The Azure trace CSV: header "TIMESTAMP,ContextTokens,GeneratedTokens", then one row per
// request. Timestamps become seconds from the first good row.
TraceReadResult read_azure_csv(std::istream& in, BadLinePolicy policy);

// A lengths CSV (the ShareGPT and Alpaca files of the PagedAttention paper): header
// "input_len,output_len", then one row per request; no timestamps (draw arrivals).
TraceReadResult read_lengths_csv(std::istream& in, BadLinePolicy policy);

// One JSON object per line: "timestamp" (seconds, optional), one of "prompt" (string or list
// of ids), "prompt_token_ids" or "messages"; optional "max_tokens"; any other field (n,
// temperature, top_p, ...) is passed through. Blank lines are ignored.
TraceReadResult read_jsonl(std::istream& in, BadLinePolicy policy);

// Reads a file, choosing the reader by extension (.csv, else JSONL) and a CSV's header. Throws
// TraceError when the file cannot be opened.
TraceReadResult read_trace_file(const std::string& path, BadLinePolicy policy);

// --start / --num-requests (num < 0 = all to the end).
std::vector<TraceRequest> slice(const std::vector<TraceRequest>& requests, int64_t start,
                                int64_t num);

// How lengths beyond the limits are brought within them.
enum class LengthMode {
  kClip,   // min(length, limit)
  kScale,  // every length times limit / (longest in the slice), when the longest exceeds it
};

struct LengthLimits {
  int64_t max_prompt_tokens = 0;  // 0 = no limit
  int64_t max_output_tokens = 0;  // 0 = no limit
  LengthMode mode = LengthMode::kClip;
};

// Applies limits to prompt_tokens (and truncates prompt_token_ids) and max_tokens. Every
// length stays >= 1. Text and chat prompts keep their text (their token count is unknown).
// Returns how many requests were changed.
int64_t apply_length_limits(std::vector<TraceRequest>& requests, const LengthLimits& limits);

// Clips requests whose prompt (+ shared prefix) + output would exceed max_model_len: the
// output first to max_model_len / 2 at most, then the prompt. Returns how many were changed.
int64_t fit_to_context(std::vector<TraceRequest>& requests, int64_t shared_prefix_tokens,
                       int64_t max_model_len);

}  // namespace pagedserve::loadgen
