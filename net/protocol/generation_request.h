// GenerationRequest: a parsed POST /v1/completions or /v1/chat/completions body (or a
// WebSocket start frame): one actors::GenerateRequest per prompt, ready for Engine::submit,
// plus the response-shaping fields the engine never sees (stream, echo, n, ...).
// Also the sampling-field reader the two endpoints share.
//
// Prompts are tokenized here (prompt_token_ids is always filled) because the context-length
// check needs the count; the engine then skips its own encode.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "actors/engine.h"
#include "model/sampling_params.h"
#include "net/protocol/api_error.h"
#include "net/protocol/json_fields.h"
#include "net/protocol/served_model.h"
#include "net/protocol/tool_calls.h"

namespace pagedserve::net {

enum class Endpoint {
  kCompletions,  // POST /v1/completions: object "text_completion", ids "cmpl-..."
  kChat,         // POST /v1/chat/completions: object "chat.completion", ids "chatcmpl-..."
};

// Largest `logprobs` (completions) or `top_logprobs` (chat) accepted, as vLLM's default.
inline constexpr int kMaxLogprobs = model::kMaxLogprobs;

struct GenerationRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;  // the served model's name, echoed in every response
  // One per prompt, in request order; prompt_token_ids filled, sampling complete (n included).
  std::vector<actors::GenerateRequest> prompts;
  // Each prompt's text: the string sent, the decoded ids (only when echo), or for chat the
  // rendered conversation. Same length as `prompts`.
  std::vector<std::string> prompt_texts;
  int n = 1;                   // choices per prompt (also in each prompt's sampling.n)
  bool stream = false;         // answer with server-sent events
  bool include_usage = false;  // stream_options.include_usage: a usage chunk before [DONE]
  bool echo = false;           // completions: each choice's text starts with its prompt

  // Also copied into each prompt's sampling, where the engine acts on them: logprobs makes it
  // report every generated token's raw logprob and this many top candidates, the penalties
  // change the logits the sampler draws from.
  std::optional<int> logprobs;      // completions `logprobs`; chat `top_logprobs` (0 if only
                                    // `logprobs: true`)
  float presence_penalty = 0.0f;    // [-2, 2]
  float frequency_penalty = 0.0f;   // [-2, 2]
  float repetition_penalty = 1.0f;  // (0, 2]
  std::string user;                 // OpenAI's end-user id; only logged
  // Chat with tools (tool_choice not "none"): each choice's text is parsed for tool calls in
  // this format (message.tool_calls, finish_reason "tool_calls"); nullopt: plain text.
  std::optional<ToolCallFormat> tool_call_format;

  size_t num_choices() const { return prompts.size() * static_cast<size_t>(n); }
};

// `model` must be absent or the served name: else 404 "The model `X` does not exist.".
void check_model_field(FieldReader& fields, const ServedModel& served);

// Reads the sampling and response fields both endpoints share (everything but the prompt,
// the messages and max_tokens) into `sampling` and `out`. Errors go to `fields`.
void read_shared_fields(FieldReader& fields, const ServedModel& served,
                        model::SamplingParams& sampling, GenerationRequest& out);

// Once the prompts are tokenized: sets max_tokens (`max_tokens` given, else `default_max`,
// else what the context leaves for the longest prompt), checks every prompt + max_tokens
// against max_model_len (vLLM's message, code "context_length_exceeded"), runs
// SamplingParams::validate, and copies `sampling` into every prompt.
void finish_generation_request(FieldReader& fields, const ServedModel& served,
                               std::optional<int64_t> max_tokens, std::optional<int> default_max,
                               const model::SamplingParams& sampling, GenerationRequest& out);

// 400 unless every id is in [0, vocab_size); `param` names the field.
std::optional<ApiError> check_token_ids(const std::vector<int32_t>& ids, const ServedModel& served,
                                        const std::string& param);

}  // namespace pagedserve::net
