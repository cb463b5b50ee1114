// OpenAI response bodies and SSE chunks from TokenEvents (see response_assembler.h).
#include "net/protocol/response_assembler.h"

#include <algorithm>
#include <cassert>
#include <chrono>
#include <random>

namespace pagedserve::net {

using nlohmann::ordered_json;

std::string sse_event(const ordered_json& data) { return "data: " + dump_json(data) + "\n\n"; }

std::string make_response_id(Endpoint endpoint) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id = endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-";
  for (int half = 0; half < 2; ++half) {
    uint64_t bits = rng();
    for (int i = 0; i < 16; ++i, bits >>= 4) id += kHex[bits & 0xF];
  }
  return id;
}

int64_t unix_time_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

ordered_json usage_json(const Usage& usage) {
  ordered_json out;
  out["prompt_tokens"] = usage.prompt_tokens;
  out["completion_tokens"] = usage.completion_tokens;
  out["total_tokens"] = usage.total_tokens();
  out["prompt_tokens_details"] = {{"cached_tokens", usage.cached_tokens}};
  if (usage.speculative_proposed_tokens > 0) {
    out["speculative_decoding"] = {
        {"proposed_tokens", usage.speculative_proposed_tokens},
        {"accepted_tokens", usage.speculative_accepted_tokens},
        {"acceptance_rate", static_cast<double>(usage.speculative_accepted_tokens) /
                                static_cast<double>(usage.speculative_proposed_tokens)}};
  }
  return out;
}

double clamp_logprob(float logprob) { return std::max(static_cast<double>(logprob), -9999.0); }

size_t count_code_points(std::string_view text) {
  size_t count = 0;
  for (char c : text) count += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return count;
}

ordered_json completion_logprobs_json(std::span<const actors::TokenLogprobs> tokens,
                                      size_t first_offset) {
  ordered_json strings = ordered_json::array();
  ordered_json values = ordered_json::array();
  ordered_json tops = ordered_json::array();
  ordered_json offsets = ordered_json::array();
  size_t offset = first_offset;
  for (const actors::TokenLogprobs& token : tokens) {
    strings.push_back(token.sampled.token);
    values.push_back(clamp_logprob(token.sampled.logprob));
    // vLLM's dict: the sampled token first, then the candidates (a repeated string keeps the
    // first value it got).
    ordered_json top = ordered_json::object();
    top[token.sampled.token] = clamp_logprob(token.sampled.logprob);
    for (const actors::TokenLogprobInfo& candidate : token.top) {
      if (!top.contains(candidate.token)) top[candidate.token] = clamp_logprob(candidate.logprob);
    }
    tops.push_back(std::move(top));
    offsets.push_back(offset);
    offset += count_code_points(token.sampled.token);
  }
  ordered_json out;
  out["tokens"] = std::move(strings);
  out["token_logprobs"] = std::move(values);
  out["top_logprobs"] = std::move(tops);
  out["text_offset"] = std::move(offsets);
  return out;
}

namespace {

ordered_json byte_values(const std::string& bytes) {
  ordered_json out = ordered_json::array();
  for (char c : bytes) out.push_back(static_cast<int>(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

ordered_json chat_logprobs_json(std::span<const actors::TokenLogprobs> tokens) {
  ordered_json content = ordered_json::array();
  for (const actors::TokenLogprobs& token : tokens) {
    ordered_json entry;
    entry["token"] = token.sampled.token;
    entry["logprob"] = clamp_logprob(token.sampled.logprob);
    entry["bytes"] = byte_values(token.sampled.bytes);
    entry["top_logprobs"] = ordered_json::array();
    for (const actors::TokenLogprobInfo& candidate : token.top) {
      entry["top_logprobs"].push_back({{"token", candidate.token},
                                       {"logprob", clamp_logprob(candidate.logprob)},
                                       {"bytes", byte_values(candidate.bytes)}});
    }
    content.push_back(std::move(entry));
  }
  ordered_json out;
  out["content"] = std::move(content);
  return out;
}

std::optional<ApiError> error_for_finish(const actors::TokenEvent& event) {
  if (!event.finished && !event.sequence_finished) return std::nullopt;
  if (event.finish_reason == "error") {
    return server_error(event.error.empty() ? "the request failed" : event.error);
  }
  if (event.finish_reason == "abort") {
    return server_error("the request was aborted", 503, "request_aborted");
  }
  return std::nullopt;
}

ResponseAssembler::ResponseAssembler(const GenerationRequest& request, std::string id,
                                     int64_t created)
    : endpoint_(request.endpoint),
      id_(std::move(id)),
      created_(created),
      model_(request.model),
      n_(request.n),
      stream_(request.stream),
      include_usage_(request.stream && request.include_usage),
      want_logprobs_(request.logprobs.has_value()),
      prompts_(request.prompts.size()),
      choices_(request.num_choices()) {
  if (request.echo && endpoint_ == Endpoint::kCompletions) echo_texts_ = request.prompt_texts;
  if (endpoint_ == Endpoint::kChat) tool_format_ = request.tool_call_format;
  if (tool_format_ && stream_) {
    for (Choice& choice : choices_) {
      choice.tool_parser = std::make_shared<ToolCallStreamParser>(*tool_format_);
    }
  }
  for (size_t i = 0; i < prompts_.size(); ++i) {
    prompts_[i].num_prompt_tokens = static_cast<int>(request.prompts[i].prompt_token_ids.size());
  }
}

ordered_json ResponseAssembler::chunk_base() const {
  ordered_json chunk;
  chunk["id"] = id_;
  chunk["object"] = endpoint_ == Endpoint::kChat ? "chat.completion.chunk" : "text_completion";
  chunk["created"] = created_;
  chunk["model"] = model_;
  return chunk;
}

// One chunk for one choice: content `text` (chat: delta {"content"}; empty text and a finish
// reason: delta {}), finish_reason null unless given.
ordered_json ResponseAssembler::choice_chunk(size_t choice, const std::string& text,
                                             const std::string& finish_reason) const {
  ordered_json entry;
  entry["index"] = choice;
  if (endpoint_ == Endpoint::kChat) {
    entry["delta"] = ordered_json::object();
    if (!text.empty() || finish_reason.empty()) entry["delta"]["content"] = text;
  } else {
    entry["text"] = text;
  }
  entry["logprobs"] = nullptr;
  entry["finish_reason"] = finish_reason.empty() ? ordered_json() : ordered_json(finish_reason);
  ordered_json chunk = chunk_base();
  chunk["choices"] = ordered_json::array({std::move(entry)});
  if (include_usage_) chunk["usage"] = nullptr;
  return chunk;
}

ordered_json ResponseAssembler::logprobs_json(std::span<const actors::TokenLogprobs> logprobs,
                                              size_t first_offset) const {
  if (endpoint_ == Endpoint::kChat) return chat_logprobs_json(logprobs);
  return completion_logprobs_json(logprobs, first_offset);
}

// The chunks for new text (and the logprobs of the tokens behind it) of one choice, opening
// it first (chat role, echo) if needed.
std::string ResponseAssembler::stream_text(size_t choice, const std::string& text,
                                           std::span<const actors::TokenLogprobs> logprobs) {
  std::string out;
  std::string content = text;
  if (!choices_[choice].started) {
    choices_[choice].started = true;
    if (endpoint_ == Endpoint::kChat) {
      ordered_json chunk = choice_chunk(choice, "", "");
      chunk["choices"][0]["delta"] = {{"role", "assistant"}, {"content", ""}};
      out += sse_event(chunk);
    } else if (!echo_texts_.empty()) {
      content = echo_texts_[choice / n_] + content;
    }
  }
  if (choices_[choice].tool_parser) {
    return out + stream_delta(choice, choices_[choice].tool_parser->feed(content), logprobs);
  }
  if (!content.empty() || !logprobs.empty()) {
    ordered_json chunk = choice_chunk(choice, content, "");
    if (!logprobs.empty()) {
      chunk["choices"][0]["logprobs"] = logprobs_json(logprobs, choices_[choice].text_chars);
    }
    out += sse_event(chunk);
  }
  choices_[choice].text_chars += count_code_points(content);
  return out;
}

// A tool parser's output for one choice: a chunk with the content and/or tool_calls it
// released (none when it released nothing and there are no logprobs to send).
std::string ResponseAssembler::stream_delta(size_t choice, const ToolCallStreamDelta& delta,
                                            std::span<const actors::TokenLogprobs> logprobs) {
  if (delta.empty() && logprobs.empty()) return {};
  ordered_json chunk = choice_chunk(choice, delta.content, "");
  ordered_json& delta_json = chunk["choices"][0]["delta"];
  if (delta.content.empty()) delta_json.erase("content");
  if (!delta.tool_calls.empty()) delta_json["tool_calls"] = delta.tool_calls;
  if (!logprobs.empty()) {
    chunk["choices"][0]["logprobs"] = logprobs_json(logprobs, choices_[choice].text_chars);
  }
  choices_[choice].text_chars += count_code_points(delta.content);
  return sse_event(chunk);
}

// Ends one choice (streaming: opens it if it never produced text, flushes what a tool parser
// held back, then its final chunk).
std::string ResponseAssembler::finish_choice(size_t choice, const std::string& reason) {
  Choice& state = choices_[choice];
  if (state.finished) return {};
  state.finished = true;
  state.finish_reason = reason;
  if (!stream_) return {};
  std::string out = stream_text(choice, "");
  if (state.tool_parser) {
    out += stream_delta(choice, state.tool_parser->finish(), {});
    if (state.tool_parser->num_calls() > 0 && (reason == "stop" || reason == "length")) {
      state.finish_reason = "tool_calls";
    }
  }
  return out + sse_event(choice_chunk(choice, "", state.finish_reason));
}

// Ends a prompt: its choices still open take `reason`; after the last prompt, the usage chunk
// and [DONE].
std::string ResponseAssembler::finish_prompt(size_t prompt_index, const std::string& reason) {
  std::string out;
  prompts_[prompt_index].finished = true;
  ++num_prompts_finished_;
  for (size_t c = prompt_index * n_; c < (prompt_index + 1) * n_; ++c) {
    out += finish_choice(c, reason);
  }
  if (num_prompts_finished_ == prompts_.size()) {
    done_ = true;
    if (stream_) {
      if (include_usage_) {
        ordered_json chunk = chunk_base();
        chunk["choices"] = ordered_json::array();
        chunk["usage"] = usage_json(usage());
        out += sse_event(chunk);
      }
      out += kSseDone;
    }
  }
  return out;
}

std::string ResponseAssembler::end_with_error(ApiError error) {
  done_ = true;
  failed_ = true;
  std::string out;
  if (stream_) {
    ordered_json body;
    body["error"] = error_json(error);
    out = sse_event(body) + std::string(kSseDone);
  }
  error_ = std::move(error);
  return out;
}

std::string ResponseAssembler::on_event(size_t prompt_index, const actors::TokenEvent& event) {
  assert(prompt_index < prompts_.size());
  if (done_ || prompt_index >= prompts_.size()) return {};
  Prompt& prompt = prompts_[prompt_index];
  if (prompt.finished) return {};
  if (event.num_prompt_tokens > 0) prompt.num_prompt_tokens = event.num_prompt_tokens;
  prompt.num_cached_tokens = std::max(prompt.num_cached_tokens, event.num_cached_tokens);
  prompt.num_proposed_tokens = std::max(prompt.num_proposed_tokens, event.num_proposed_tokens);
  prompt.num_accepted_tokens = std::max(prompt.num_accepted_tokens, event.num_accepted_tokens);
  if (std::optional<ApiError> error = error_for_finish(event)) {
    return end_with_error(std::move(*error));
  }
  std::string out;
  if (event.index >= 0 && event.index < n_) {
    const size_t c = prompt_index * n_ + event.index;
    choices_[c].num_tokens += static_cast<int>(event.token_ids.size());
    // Logprobs only when asked for (and then one per token; anything else is dropped).
    std::span<const actors::TokenLogprobs> logprobs;
    if (want_logprobs_ && event.logprobs.size() == event.token_ids.size()) {
      logprobs = event.logprobs;
    }
    if (stream_) {
      if (!event.text.empty() || !logprobs.empty()) out += stream_text(c, event.text, logprobs);
    } else {
      choices_[c].text += event.text;
      choices_[c].logprobs.insert(choices_[c].logprobs.end(), logprobs.begin(), logprobs.end());
    }
    if (event.sequence_finished) out += finish_choice(c, event.finish_reason);
  }
  if (event.finished) out += finish_prompt(prompt_index, event.finish_reason);
  return out;
}

std::string ResponseAssembler::fail(const ApiError& error) {
  if (done_) return {};
  return end_with_error(error);
}

Usage ResponseAssembler::usage() const {
  Usage usage;
  for (const Prompt& prompt : prompts_) {
    usage.prompt_tokens += prompt.num_prompt_tokens;
    usage.cached_tokens += prompt.num_cached_tokens;
    usage.speculative_proposed_tokens += prompt.num_proposed_tokens;
    usage.speculative_accepted_tokens += prompt.num_accepted_tokens;
  }
  for (const Choice& choice : choices_) usage.completion_tokens += choice.num_tokens;
  return usage;
}

// A non-streamed chat choice's message; with tools, its calls parsed out of the text (and a
// "stop" finish_reason becomes "tool_calls").
ordered_json ResponseAssembler::chat_message(const Choice& choice,
                                             std::string& finish_reason) const {
  ordered_json message = {{"role", "assistant"}, {"content", choice.text}};
  if (!tool_format_) return message;
  ParsedToolCalls parsed = parse_tool_calls(choice.text, *tool_format_);
  if (parsed.calls.empty()) return message;
  message["content"] = parsed.content.empty() ? ordered_json() : ordered_json(parsed.content);
  message["tool_calls"] = ordered_json::array();
  for (const ToolCall& call : parsed.calls) message["tool_calls"].push_back(tool_call_json(call));
  // Calls were made: "tool_calls", also when max_tokens ended the turn after them.
  if (finish_reason == "stop" || finish_reason == "length") finish_reason = "tool_calls";
  return message;
}

HttpResponse ResponseAssembler::response() const {
  if (error_) return error_response(*error_);
  ordered_json body = chunk_base();
  body["object"] = endpoint_ == Endpoint::kChat ? "chat.completion" : "text_completion";
  body["choices"] = ordered_json::array();
  for (size_t c = 0; c < choices_.size(); ++c) {
    const Choice& choice = choices_[c];
    ordered_json entry;
    entry["index"] = c;
    std::string finish_reason = choice.finish_reason;
    if (endpoint_ == Endpoint::kChat) {
      entry["message"] = chat_message(choice, finish_reason);
    } else {
      entry["text"] = echo_texts_.empty() ? choice.text : echo_texts_[c / n_] + choice.text;
    }
    entry["logprobs"] = want_logprobs_ ? logprobs_json(choice.logprobs, 0) : ordered_json();
    entry["finish_reason"] = choice.finished ? ordered_json(finish_reason) : ordered_json();
    body["choices"].push_back(std::move(entry));
  }
  body["usage"] = usage_json(usage());
  return json_response(body);
}

}  // namespace pagedserve::net
