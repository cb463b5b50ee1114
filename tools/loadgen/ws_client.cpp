// WebSocket transport of the load generator (Beast): requests multiplexed over a few
// connections to pagedserve's /v1/stream (docs/websocket-protocol.md), ids = request
// indices, one writer coroutine per connection (Beast allows one write at a time) and one
// reader that routes token / done / error frames to their request. Single-threaded.
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <deque>
#include <map>

#include "tools/loadgen/client_internal.h"
#include "tools/loadgen/connect.h"

namespace pagedserve::loadgen::detail {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;

constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);

// A request waiting for its done frames.
struct LiveRequest {
  RequestRecord record;
  DoneHandler done;
  int64_t choices_left = 1;
  int64_t usage_completion = 0;
  bool saw_usage = false;
};

class WsConnection : public std::enable_shared_from_this<WsConnection> {
 public:
  explicit WsConnection(RunContext& ctx) : ctx_(ctx), ws_(ctx.io) {}

  void start(const OutgoingRequest& request, RequestRecord record, DoneHandler done) {
    const std::string id = std::to_string(record.index);
    nlohmann::json frame = request.payload;
    frame["type"] = request.chat ? "chat" : "completion";
    frame["id"] = id;
    LiveRequest live{std::move(record), std::move(done)};
    if (auto n = request.payload.find("n"); n != request.payload.end() && n->is_number_integer()) {
      live.choices_left = std::max<int64_t>(1, n->get<int64_t>());
    }
    if (failed_) {
      finish(live, "websocket: " + *failed_);
      return;
    }
    live_.emplace(id, std::move(live));
    outbox_.push_back(frame.dump());
    if (!connecting_) {
      connecting_ = true;
      asio::co_spawn(ctx_.io, run(shared_from_this()), asio::detached);
    } else if (open_ && !writing_) {
      asio::co_spawn(ctx_.io, write_loop(shared_from_this()), asio::detached);
    }
  }

  void close() {
    closing_ = true;
    if (open_ && !writing_) asio::co_spawn(ctx_.io, close_now(shared_from_this()), asio::detached);
  }

 private:
  static asio::awaitable<void> run(std::shared_ptr<WsConnection> self) {
    auto& ws = self->ws_;
    beast::get_lowest_layer(ws).expires_after(std::chrono::seconds(30));
    beast::error_code ec =
        co_await connect_first(beast::get_lowest_layer(ws), self->ctx_.endpoints);
    if (!ec) {
      ws.set_option(websocket::stream_base::decorator([&](websocket::request_type& req) {
        if (!self->ctx_.options.api_key.empty()) {
          req.set(beast::http::field::authorization, "Bearer " + self->ctx_.options.api_key);
        }
      }));
      std::tie(ec) = co_await ws.async_handshake(
          self->ctx_.url.host + ":" + self->ctx_.url.port,
          self->ctx_.url.path_prefix + self->ctx_.options.ws_path, kTuple);
    }
    if (ec) co_return self->fail_all("connect: " + ec.message());
    beast::get_lowest_layer(ws).expires_never();
    ws.set_option(websocket::stream_base::timeout::suggested(beast::role_type::client));
    ws.text(true);
    self->open_ = true;
    asio::co_spawn(self->ctx_.io, write_loop(self), asio::detached);
    beast::flat_buffer buffer;
    while (true) {
      auto [read_ec, n] = co_await ws.async_read(buffer, kTuple);
      if (read_ec) {
        self->open_ = false;
        co_return self->fail_all(self->closing_ ? "closed" : "read: " + read_ec.message());
      }
      self->on_frame(beast::buffers_to_string(buffer.data()));
      buffer.consume(buffer.size());
    }
  }

  static asio::awaitable<void> write_loop(std::shared_ptr<WsConnection> self) {
    self->writing_ = true;
    while (!self->outbox_.empty() && self->open_) {
      const std::string frame = std::move(self->outbox_.front());
      self->outbox_.pop_front();
      auto [ec, n] = co_await self->ws_.async_write(asio::buffer(frame), kTuple);
      if (ec) break;  // the reader sees the broken connection and fails the live requests
    }
    self->writing_ = false;
    if (self->closing_ && self->open_) co_await close_now(self);
  }

  static asio::awaitable<void> close_now(std::shared_ptr<WsConnection> self) {
    self->open_ = false;
    co_await self->ws_.async_close(websocket::close_code::normal, kTuple);
  }

  void on_frame(const std::string& text) {
    const ChunkInfo info = read_ws_frame(text);
    auto it = live_.find(info.ws_id);
    if (it == live_.end()) return;  // e.g. an error frame with a null id
    LiveRequest& live = it->second;
    const double now = ctx_.now_s();
    if (info.error) {
      finish(live, "server: " + *info.error);
      live_.erase(it);
      return;
    }
    if (info.has_output) {
      live.record.chunk_s.push_back(now);
      ctx_.tokens_received += std::max<int64_t>(1, info.output_tokens);
    }
    if (info.done) {
      if (info.usage_completion_tokens) {
        live.usage_completion += *info.usage_completion_tokens;
        live.saw_usage = true;
      }
      if (info.usage_prompt_tokens && live.record.prompt_tokens == 0) {
        live.record.prompt_tokens = *info.usage_prompt_tokens;
      }
      if (--live.choices_left == 0) {
        finish(live, "");
        live_.erase(it);
      }
    }
  }

  void finish(LiveRequest& live, const std::string& error) {
    live.record.end_s = ctx_.now_s();
    live.record.ok = error.empty();
    live.record.error = error;
    live.record.output_tokens =
        live.saw_usage ? live.usage_completion : static_cast<int64_t>(live.record.chunk_s.size());
    live.done(std::move(live.record));
  }

  void fail_all(const std::string& reason) {
    failed_ = reason;
    outbox_.clear();
    auto live = std::move(live_);
    live_.clear();
    for (auto& [id, request] : live) finish(request, "websocket: " + reason);
  }

  RunContext& ctx_;
  websocket::stream<beast::tcp_stream> ws_;
  std::map<std::string, LiveRequest> live_;
  std::deque<std::string> outbox_;
  std::optional<std::string> failed_;
  bool connecting_ = false, open_ = false, writing_ = false, closing_ = false;
};

class WsPoolImpl : public WsPool {
 public:
  explicit WsPoolImpl(RunContext& ctx) {
    for (int i = 0; i < std::max(1, ctx.options.ws_connections); ++i) {
      connections_.push_back(std::make_shared<WsConnection>(ctx));
    }
  }
  void start(const OutgoingRequest& request, RequestRecord record, DoneHandler done) override {
    const size_t k = static_cast<size_t>(record.index) % connections_.size();
    connections_[k]->start(request, std::move(record), std::move(done));
  }
  void close() override {
    for (auto& c : connections_) c->close();
  }

 private:
  std::vector<std::shared_ptr<WsConnection>> connections_;
};

}  // namespace

std::shared_ptr<WsPool> make_ws_pool(RunContext& ctx) { return std::make_shared<WsPoolImpl>(ctx); }

}  // namespace pagedserve::loadgen::detail
