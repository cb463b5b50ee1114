// WebSocket client-frame parsing and server-frame formatting (see websocket.h).
#include "net/protocol/websocket.h"

#include "net/protocol/structured_output.h"

#include "net/protocol/chat.h"
#include "net/protocol/completions.h"
#include "net/protocol/json_fields.h"

namespace pagedserve::net {

using nlohmann::ordered_json;

namespace {

ordered_json id_json(std::string_view id) {
  return id.empty() ? ordered_json() : ordered_json(std::string(id));
}

// {"type": "subscribe" | "unsubscribe", "topic": "kv"}; an "id" is optional (echoed in errors).
WsClientFrame parse_subscription(FieldReader& fields, bool subscribe, std::string id) {
  std::optional<std::string> topic = fields.string("topic");
  if (fields.failed()) return WsInvalid{id, fields.error()};
  if (!topic) return WsInvalid{id, invalid_request("topic is required", "topic")};
  if (*topic != kWsTopicKv) {
    return WsInvalid{id, invalid_request("unknown topic \"" + *topic + "\": the only topic is \"" +
                                             std::string(kWsTopicKv) + "\"",
                                         "topic", "unknown_topic")};
  }
  return WsSubscribe{*topic, subscribe};
}

}  // namespace

WsClientFrame parse_ws_client_frame(std::string_view text, const ServedModel& served) {
  Result<nlohmann::json> parsed = parse_json_object(text);
  if (!parsed) return WsInvalid{{}, parsed.error()};
  const nlohmann::json& frame = parsed.value();
  FieldReader fields(frame);
  std::optional<std::string> id = fields.string("id");
  std::optional<std::string> type = fields.string("type");
  if (fields.failed()) return WsInvalid{id.value_or(""), fields.error()};
  if (type && (*type == "subscribe" || *type == "unsubscribe")) {
    const bool readable_id = id && id->size() <= kMaxWsClientIdBytes;
    return parse_subscription(fields, *type == "subscribe", readable_id ? *id : std::string());
  }
  if (!id || id->empty()) return WsInvalid{{}, invalid_request("id is required", "id")};
  if (id->size() > kMaxWsClientIdBytes) {
    return WsInvalid{
        {},
        invalid_request("id must be at most " + std::to_string(kMaxWsClientIdBytes) + " bytes",
                        "id")};
  }
  if (!type) return WsInvalid{*id, invalid_request("type is required", "type")};
  if (*type == "cancel") return WsCancel{*id};
  if (*type != "completion" && *type != "chat") {
    return WsInvalid{*id, invalid_request("type must be \"completion\", \"chat\", \"cancel\", "
                                          "\"subscribe\" or \"unsubscribe\", got \"" +
                                              *type + "\"",
                                          "type")};
  }
  // A WebSocket request always streams: drop the HTTP-only fields before parsing.
  nlohmann::json body = frame;
  body.erase("type");
  body.erase("id");
  body.erase("stream");
  body.erase("stream_options");
  const std::optional<nlohmann::ordered_json> ordered = parse_ordered_if_needed(text);
  const nlohmann::ordered_json* keys = ordered ? &*ordered : nullptr;
  Result<GenerationRequest> request = *type == "chat" ? parse_chat_json(body, served, keys)
                                                      : parse_completion_json(body, served, keys);
  if (!request) return WsInvalid{*id, request.error()};
  request.value().stream = true;
  return WsStart{*id, std::move(request.value())};
}

std::string ws_token_frame(std::string_view id, int index, std::span<const int32_t> token_ids,
                           std::string_view text, std::span<const actors::TokenLogprobs> logprobs,
                           bool with_top) {
  ordered_json frame;
  frame["type"] = "token";
  frame["id"] = id_json(id);
  frame["index"] = index;
  frame["token_ids"] = std::vector<int32_t>(token_ids.begin(), token_ids.end());
  frame["text"] = std::string(text);
  if (!logprobs.empty()) {
    ordered_json values = ordered_json::array();
    ordered_json tops = ordered_json::array();
    for (const actors::TokenLogprobs& token : logprobs) {
      values.push_back(clamp_logprob(token.sampled.logprob));
      if (!with_top) continue;
      ordered_json top = ordered_json::array();
      for (const actors::TokenLogprobInfo& candidate : token.top) {
        top.push_back({{"token_id", candidate.token_id},
                       {"token", candidate.token},
                       {"logprob", clamp_logprob(candidate.logprob)}});
      }
      tops.push_back(std::move(top));
    }
    frame["logprobs"] = std::move(values);
    if (with_top) frame["top_logprobs"] = std::move(tops);
  }
  return dump_json(frame);
}

std::string ws_done_frame(std::string_view id, int index, std::string_view finish_reason,
                          const Usage& usage) {
  ordered_json frame;
  frame["type"] = "done";
  frame["id"] = id_json(id);
  frame["index"] = index;
  frame["finish_reason"] = std::string(finish_reason);
  frame["usage"] = usage_json(usage);
  return dump_json(frame);
}

std::string ws_error_frame(std::string_view id, const ApiError& error) {
  ordered_json frame;
  frame["type"] = "error";
  frame["id"] = id_json(id);
  frame["error"] = error_json(error);
  return dump_json(frame);
}

ApiError ws_duplicate_id_error(std::string_view id) {
  return invalid_request("a request with id \"" + std::string(id) + "\" is already running", "id",
                         "duplicate_id");
}

ApiError ws_slow_reader_error() {
  return server_error("the client is not reading fast enough; the request was cancelled", 503,
                      "slow_reader");
}

ApiError ws_shutdown_error() {
  return server_error("the server is shutting down", 503, "server_shutdown");
}

ApiError ws_closing_error() {
  return server_error("this connection is closing (idle timeout): open a new one for new requests",
                      503, "connection_closing");
}

WsResponseStream::WsResponseStream(std::string id, const GenerationRequest& request)
    : id_(std::move(id)),
      n_(request.n),
      logprobs_(request.logprobs),
      prompts_(request.prompts.size()),
      choice_tokens_(request.num_choices(), 0),
      choice_finished_(request.num_choices(), false) {
  for (size_t i = 0; i < prompts_.size(); ++i) {
    prompts_[i].num_prompt_tokens = static_cast<int>(request.prompts[i].prompt_token_ids.size());
  }
}

std::vector<std::string> WsResponseStream::on_event(size_t prompt_index,
                                                    const actors::TokenEvent& event) {
  std::vector<std::string> frames;
  if (done_ || prompt_index >= prompts_.size() || prompts_[prompt_index].finished) return frames;
  PromptState& prompt = prompts_[prompt_index];
  if (event.num_prompt_tokens > 0) prompt.num_prompt_tokens = event.num_prompt_tokens;
  prompt.num_cached_tokens = std::max(prompt.num_cached_tokens, event.num_cached_tokens);
  prompt.num_proposed_tokens = std::max(prompt.num_proposed_tokens, event.num_proposed_tokens);
  prompt.num_accepted_tokens = std::max(prompt.num_accepted_tokens, event.num_accepted_tokens);
  if (std::optional<ApiError> error = error_for_finish(event)) {
    frames.push_back(fail(*error));
    return frames;
  }
  if (event.index >= 0 && event.index < n_) {
    const size_t choice = prompt_index * n_ + event.index;
    if (!event.token_ids.empty() || !event.text.empty()) {
      choice_tokens_[choice] += static_cast<int>(event.token_ids.size());
      std::span<const actors::TokenLogprobs> logprobs;
      if (logprobs_ && event.logprobs.size() == event.token_ids.size()) logprobs = event.logprobs;
      frames.push_back(ws_token_frame(id_, static_cast<int>(choice), event.token_ids, event.text,
                                      logprobs, logprobs_.value_or(0) > 0));
    }
    if (event.sequence_finished) finish_choice(prompt_index, choice, event.finish_reason, frames);
  }
  if (!event.finished) return frames;
  prompt.finished = true;
  for (size_t choice = prompt_index * n_; choice < (prompt_index + 1) * n_; ++choice) {
    finish_choice(prompt_index, choice, event.finish_reason, frames);
  }
  if (++num_prompts_finished_ == prompts_.size()) done_ = true;
  return frames;
}

void WsResponseStream::finish_choice(size_t prompt_index, size_t choice,
                                     const std::string& finish_reason,
                                     std::vector<std::string>& frames) {
  if (choice_finished_[choice]) return;
  choice_finished_[choice] = true;
  Usage usage;
  usage.prompt_tokens = prompts_[prompt_index].num_prompt_tokens;
  usage.cached_tokens = prompts_[prompt_index].num_cached_tokens;
  usage.completion_tokens = choice_tokens_[choice];
  // The request's counters so far (a prompt's choices share them, as its cached tokens).
  usage.speculative_proposed_tokens = prompts_[prompt_index].num_proposed_tokens;
  usage.speculative_accepted_tokens = prompts_[prompt_index].num_accepted_tokens;
  frames.push_back(ws_done_frame(id_, static_cast<int>(choice), finish_reason, usage));
}

std::vector<std::string> WsResponseStream::cancel() {
  std::vector<std::string> frames;
  if (done_) return frames;
  done_ = true;
  for (size_t p = 0; p < prompts_.size(); ++p) {
    for (size_t choice = p * n_; choice < (p + 1) * n_; ++choice) {
      finish_choice(p, choice, "abort", frames);
    }
  }
  return frames;
}

std::string WsResponseStream::fail(const ApiError& error) {
  if (done_) return {};
  done_ = true;
  failed_ = true;
  return ws_error_frame(id_, error);
}

}  // namespace pagedserve::net
