// What the load generator sends and how it reads what comes back, without I/O: request
// bodies built from trace requests (synthesised token-id prompts, shared prefix, forced
// output length), the server-sent-events splitter, and the reading of one streamed chunk
// (an SSE data payload or a WebSocket frame of docs/websocket-protocol.md).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tools/loadgen/trace.h"

namespace pagedserve::loadgen {

struct PromptOptions {
  std::string model;
  int64_t shared_prefix_tokens = 0;  // the same K ids in front of every synthesised prompt
  int32_t vocab_size = 0;            // ids are drawn from [kFirstOrdinaryId, vocab_size) ...
  std::vector<int32_t> token_pool;   // ... or, when set, from these ids (POST /tokenize)
  uint32_t seed = 0;
};

// Ids 0..2 are <unk>, <s>, </s> in Llama-style vocabularies.
inline constexpr int32_t kFirstOrdinaryId = 3;

// One request ready to send: the JSON fields of /v1/completions or /v1/chat/completions
// (without stream options), and what the report needs to know about it.
struct OutgoingRequest {
  bool chat = false;          // /v1/chat/completions (and a "chat" WebSocket frame)
  nlohmann::json payload;     // model, prompt or messages, max_tokens, ignore_eos, ...
  int64_t prompt_tokens = 0;  // 0 when the prompt is text (the server's usage tells)
  int64_t max_tokens = 0;     // 0 = unset
};

// Throws std::invalid_argument when neither vocab_size > kFirstOrdinaryId nor a token pool
// is given and a prompt must be synthesised.
std::vector<OutgoingRequest> build_requests(const std::vector<TraceRequest>& trace,
                                            const PromptOptions& options);

// The HTTP body: payload + "stream": true + usage in the last chunk.
std::string http_body(const OutgoingRequest& request);

// Splits a text/event-stream into the data of each event ("data: X" lines joined by "\n").
class SseSplitter {
 public:
  // Feeds bytes; returns the data of every event completed by them.
  std::vector<std::string> feed(const char* data, size_t size);

 private:
  std::string pending_;  // bytes of the current, unfinished line
  std::string data_;     // data lines of the current event
  bool has_data_ = false;
};

// What one streamed chunk says.
struct ChunkInfo {
  bool done = false;          // "[DONE]", or a WebSocket "done" frame
  bool has_output = false;    // carries generated text or token ids
  int64_t output_tokens = 0;  // token ids it carries (0 when the server sends text only)
  std::optional<int64_t> usage_prompt_tokens;
  std::optional<int64_t> usage_completion_tokens;
  std::optional<std::string> error;  // the server's error message
  std::string ws_id;                 // WebSocket frames: the request id
};

// An SSE data payload of an OpenAI-compatible stream (completion or chat chunk).
ChunkInfo read_sse_chunk(const std::string& data);
// A WebSocket server frame ("token", "done" or "error").
ChunkInfo read_ws_frame(const std::string& text);

}  // namespace pagedserve::loadgen
