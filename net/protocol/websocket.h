// The WebSocket protocol (docs/websocket-protocol.md) as pure functions: parsing a client's
// text frame, and WsResponseStream, which turns one started request's TokenEvents into server
// frames. The transport owns the socket, the per-connection map of live ids and the bounded
// send buffer; nothing here does I/O. One WsResponseStream per started request, used on the
// connection's strand.
//
// Client frames (JSON text):
//   {"type": "completion", "id": "<client id>", ...POST /v1/completions fields}
//   {"type": "chat", "id": "<client id>", "messages": [...], ...chat fields}
//   {"type": "cancel", "id": "<client id>"}
//   {"type": "subscribe" | "unsubscribe", "topic": "kv"}   the KV block map (kv_frames.h)
// Server frames:
//   {"type": "token", "id", "index", "token_ids": [...], "text"}   one per engine event
//     (+ "logprobs": [per token], and "top_logprobs": [per token [{"token_id", "token",
//     "logprob"}]] when the request asked for top candidates)
//   {"type": "done", "id", "index", "finish_reason", "usage": {...}}  one per choice
//   {"type": "error", "id" (null if unknown), "error": {"message", "type", "param", "code"}}
// `stream` and `stream_options` are ignored (a WebSocket request always streams).
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "actors/engine.h"
#include "net/protocol/api_error.h"
#include "net/protocol/generation_request.h"
#include "net/protocol/response_assembler.h"
#include "net/protocol/served_model.h"

namespace pagedserve::net {

inline constexpr size_t kMaxWsClientIdBytes = 256;

struct WsStart {
  std::string id;             // the client's id for the request (unique among its live ones)
  GenerationRequest request;  // parsed as POST /v1/completions or /v1/chat/completions
};
struct WsCancel {
  std::string id;  // the request to cancel
};
struct WsSubscribe {
  std::string topic;      // "kv": the KV block map and engine gauges (net/protocol/kv_frames.h)
  bool subscribe = true;  // false: unsubscribe
};
struct WsInvalid {
  std::string id;  // the frame's id when it had a readable one, else "" (sent as null)
  ApiError error;  // send ws_error_frame(id, error); the connection stays open
};
using WsClientFrame = std::variant<WsStart, WsCancel, WsSubscribe, WsInvalid>;

// The topics a client may subscribe to.
inline constexpr std::string_view kWsTopicKv = "kv";

WsClientFrame parse_ws_client_frame(std::string_view text, const ServedModel& served);

// Server frames. `id` "" is written as null (error frames for unreadable client frames).
// `logprobs` (one per token, or empty: no logprob fields) adds "logprobs"; with_top also
// "top_logprobs".
std::string ws_token_frame(std::string_view id, int index, std::span<const int32_t> token_ids,
                           std::string_view text,
                           std::span<const actors::TokenLogprobs> logprobs = {},
                           bool with_top = false);
std::string ws_done_frame(std::string_view id, int index, std::string_view finish_reason,
                          const Usage& usage);
std::string ws_error_frame(std::string_view id, const ApiError& error);

// The errors the transport sends for conditions only it sees.
ApiError ws_duplicate_id_error(std::string_view id);  // a start frame reuses a live id (400)
ApiError ws_slow_reader_error();  // the connection's send buffer is full (503, "slow_reader")
ApiError ws_shutdown_error();     // the server is stopping (503, "server_shutdown")
ApiError ws_closing_error();      // the connection is closing, idle (503, "connection_closing")

// The frames for one started request (prompts x n choices, index = prompt_index * n +
// event.index, as over HTTP). A choice's done frame goes out at its engine output's
// sequence_finished event (or, at the latest, its prompt's finished event). The request ends
// after one done frame per choice, or one error frame (then the transport aborts the
// request's remaining engine streams).
class WsResponseStream {
 public:
  WsResponseStream(std::string id, const GenerationRequest& request);

  // Frames to send for one event of request.prompts[prompt_index] (possibly none).
  std::vector<std::string> on_event(size_t prompt_index, const actors::TokenEvent& event);
  // Ends the request with an error (e.g. ws_slow_reader_error()); returns the error frame, or
  // "" when already done.
  std::string fail(const ApiError& error);
  // The client's cancel: a done frame with finish_reason "abort" (and the usage so far) for
  // every unfinished choice; later events are ignored. The transport then calls
  // Engine::abort for the request's prompts. Empty when already done.
  std::vector<std::string> cancel();

  bool done() const { return done_; }
  bool failed() const { return failed_; }
  const std::string& id() const { return id_; }

 private:
  struct PromptState {
    int num_prompt_tokens = 0;
    int num_cached_tokens = 0;
    int64_t num_proposed_tokens = 0;  // speculative decoding: the request's running totals
    int64_t num_accepted_tokens = 0;
    bool finished = false;
  };

  std::string id_;
  int n_;
  std::optional<int> logprobs_;  // the request's logprobs (top candidates wanted when > 0)
  std::vector<PromptState> prompts_;
  // Appends choice's done frame unless it already ended.
  void finish_choice(size_t prompt_index, size_t choice, const std::string& finish_reason,
                     std::vector<std::string>& frames);

  std::vector<int> choice_tokens_;     // generated tokens per choice
  std::vector<bool> choice_finished_;  // its done frame was produced
  size_t num_prompts_finished_ = 0;
  bool done_ = false;
  bool failed_ = false;
};

}  // namespace pagedserve::net
