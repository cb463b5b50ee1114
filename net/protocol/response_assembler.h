// ResponseAssembler: turns the actors::TokenEvents of one HTTP completions/chat request (its
// prompts x n choices; choice index = prompt_index * n + event.index) into OpenAI's response:
// one JSON body (non-streaming) or server-sent-event chunks (stream: true). Pure: no I/O, no
// clock. One assembler per HTTP request, used by one thread (the session's strand).
//
// Non-streaming body: {"id": "cmpl-..."|"chatcmpl-...", "object": "text_completion" |
//   "chat.completion", "created", "model", "choices": [{"index", "text" | "message":
//   {"role": "assistant", "content"}, "logprobs": null, "finish_reason"}], "usage":
//   {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details":
//   {"cached_tokens"}}}; with `echo`, a completion's text starts with its prompt.
// Streaming, per choice: (chat) a first chunk with delta {"role": "assistant", "content": ""};
//   content chunks ("text" / delta {"content"}) as tokens arrive (echo: the prompt leads the
//   first); a final chunk with "finish_reason" and empty text / delta {}; after every choice
//   finished, a usage chunk (choices [], only with stream_options.include_usage; the other
//   chunks then carry "usage": null, as OpenAI's) and "data: [DONE]\n\n".
//   Objects: "text_completion" / "chat.completion.chunk".
// Errors: finish_reason "stop" and "length" (and any other reason but the two below) end a
//   choice normally. "error" becomes a 500 (server_error, the engine's message) and "abort" a
//   503 (code "request_aborted"): non-streaming, response() is that error; streaming, as vLLM
//   does, one chunk `data: {"error": {...}}\n\n` then "data: [DONE]\n\n" ends the stream.
//   After failed() the transport must abort the request's other prompts (Engine::abort).
// Logprobs (request.logprobs set; otherwise "logprobs": null everywhere): completions carry
//   {"tokens", "token_logprobs", "top_logprobs", "text_offset"} (completion_logprobs_json),
//   chat {"content": [...]} (chat_logprobs_json); non-streaming for every generated token,
//   streaming per chunk for the tokens of that chunk (a chunk goes out for an event with
//   tokens even when its text is held back, so every token's logprob is sent exactly once).
// Tool calls (request.tool_call_format set, chat only): each choice's text is parsed
//   (tool_calls.h); calls become message.tool_calls (content null when nothing else was
//   said) and a "stop" becomes "tool_calls"; streaming sends delta.tool_calls entries (name
//   first, then argument fragments) and holds back the markup.
// Each choice ends at its engine output's `sequence_finished` event, with that event's
//   finish_reason (streaming: its final chunk goes out then); a prompt's `finished` event ends
//   the choices still open with its finish_reason. Events whose index is not in [0, n) are
//   ignored.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/engine.h"
#include "net/protocol/api_error.h"
#include "net/protocol/generation_request.h"
#include "net/protocol/tool_calls.h"

namespace pagedserve::net {

inline constexpr std::string_view kSseContentType = "text/event-stream";
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// "data: <json>\n\n".
std::string sse_event(const nlohmann::ordered_json& data);

// "cmpl-" or "chatcmpl-" followed by 32 random hex digits.
std::string make_response_id(Endpoint endpoint);
int64_t unix_time_now();  // seconds, for `created`

struct Usage {
  int prompt_tokens = 0;      // over the request's prompts (each counted once, not per choice)
  int completion_tokens = 0;  // generated tokens over the returned choices
  int cached_tokens = 0;      // prompt tokens served by the prefix cache
  // Speculative decoding (docs/speculative-decoding.md): tokens proposed, and accepted.
  int64_t speculative_proposed_tokens = 0;
  int64_t speculative_accepted_tokens = 0;
  int total_tokens() const { return prompt_tokens + completion_tokens; }
};
// {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details":
// {"cached_tokens"}}, plus "speculative_decoding": {"proposed_tokens", "accepted_tokens",
// "acceptance_rate"} when the request had proposals.
nlohmann::ordered_json usage_json(const Usage& usage);

// Logprob values as OpenAI and vLLM send them: never below -9999 (-inf is not JSON).
double clamp_logprob(float logprob);
// Unicode code points in UTF-8 `text` (Python's len(), what vLLM's text_offset counts).
size_t count_code_points(std::string_view text);
// Completions `logprobs` for `tokens`: "tokens" (each token decoded on its own),
// "token_logprobs", "top_logprobs" (per token an object token -> logprob holding the sampled
// token and the top candidates, so up to logprobs + 1 entries) and "text_offset" (the first
// token at `first_offset`, each next one after the code points of the previous token string).
nlohmann::ordered_json completion_logprobs_json(std::span<const actors::TokenLogprobs> tokens,
                                                size_t first_offset);
// Chat `logprobs`: {"content": [{"token", "logprob", "bytes": [raw byte values],
// "top_logprobs": [{"token", "logprob", "bytes"}, ...top_logprobs most likely]}]}.
nlohmann::ordered_json chat_logprobs_json(std::span<const actors::TokenLogprobs> tokens);

// The error a finishing event (finished or sequence_finished) stands for: "error" -> 500,
// "abort" -> 503; nullopt for other events and normal reasons ("stop", "length", ...).
std::optional<ApiError> error_for_finish(const actors::TokenEvent& event);

class ResponseAssembler {
 public:
  // `id` from make_response_id, `created` from unix_time_now (parameters for testability).
  ResponseAssembler(const GenerationRequest& request, std::string id, int64_t created);

  // Feeds one event of request.prompts[prompt_index]. Streaming: returns the SSE text to write
  // now (often one chunk, possibly several or none). Non-streaming: returns "". Events after
  // done() are ignored.
  std::string on_event(size_t prompt_index, const actors::TokenEvent& event);
  // Ends the response with an error the transport ran into (e.g. the engine refused to take
  // the request). Streaming: returns the error chunk and [DONE]; non-streaming: "" and
  // response() becomes the error. No-op (returns "") after done().
  std::string fail(const ApiError& error);

  bool done() const { return done_; }      // every prompt finished, or failed
  bool failed() const { return failed_; }  // an error ended the response
  bool streaming() const { return stream_; }
  // Non-streaming: the 200 body or the error; call once done().
  HttpResponse response() const;
  Usage usage() const;  // so far

 private:
  struct Choice {
    std::string text;                             // generated text (non-streaming only)
    std::vector<actors::TokenLogprobs> logprobs;  // non-streaming, when asked for
    size_t text_chars = 0;                        // streaming: code points sent so far
    int num_tokens = 0;
    bool started = false;  // streaming: its first chunk (role / echo) was sent
    bool finished = false;
    std::string finish_reason;
    // Streaming chat with tools: the choice's text goes through it (content and tool_calls
    // deltas); null otherwise.
    std::shared_ptr<ToolCallStreamParser> tool_parser;
  };
  struct Prompt {
    int num_prompt_tokens = 0;
    int num_cached_tokens = 0;
    int64_t num_proposed_tokens = 0;  // speculative decoding
    int64_t num_accepted_tokens = 0;
    bool finished = false;
  };

  nlohmann::ordered_json chunk_base() const;
  nlohmann::ordered_json choice_chunk(size_t choice, const std::string& text,
                                      const std::string& finish_reason) const;
  std::string stream_text(size_t choice, const std::string& text,
                          std::span<const actors::TokenLogprobs> logprobs = {});
  std::string stream_delta(size_t choice, const ToolCallStreamDelta& delta,
                           std::span<const actors::TokenLogprobs> logprobs);
  nlohmann::ordered_json chat_message(const Choice& choice, std::string& finish_reason) const;
  nlohmann::ordered_json logprobs_json(std::span<const actors::TokenLogprobs> logprobs,
                                       size_t first_offset) const;
  std::string finish_choice(size_t choice, const std::string& reason);
  std::string finish_prompt(size_t prompt_index, const std::string& finish_reason);
  std::string end_with_error(ApiError error);

  Endpoint endpoint_;
  std::string id_;
  int64_t created_;
  std::string model_;
  int n_;
  bool stream_;
  bool include_usage_;
  bool want_logprobs_;
  std::optional<ToolCallFormat> tool_format_;  // chat with tools: outputs parsed for calls
  std::vector<std::string> echo_texts_;        // empty unless echo (completions)
  std::vector<Prompt> prompts_;
  std::vector<Choice> choices_;  // prompt_index * n + index
  size_t num_prompts_finished_ = 0;
  bool done_ = false;
  bool failed_ = false;
  std::optional<ApiError> error_;
};

}  // namespace pagedserve::net
