// The WebSocket connection: a reader coroutine (client frames -> start / cancel / error) and a
// writer coroutine (the send queue -> the socket), both on the connection's strand and sharing
// one WsConnection. Engine events for the connection's requests are posted to the strand and
// turned into frames by net/protocol's WsResponseStream. Frame formats and parsing all live in
// net/protocol/websocket.h; this file owns the live-id table, the bounded send queue and the
// socket's lifetime.
//
// Send queue bound (ws_max_queued_frames): an event whose frames do not fit fails its request
// with "slow_reader" (its unsent frames dropped, the engine request aborted); the error frame
// and a request's final frames go past the bound, so every request ends as the protocol says.
// While the queue is full the reader stops reading, so a flooding client is throttled by TCP.
//
// The "kv" topic (net/protocol/kv_frames.h): a subscribed connection runs a feed coroutine that
// wakes every kKvFeedInterval and, unless its previous kv frame is still queued or being
// written, queues one frame bringing the client to the engine's latest block map. So a client
// gets at most 10 kv frames a second, a slow one fewer (each a larger delta), and a client that
// never reads holds one frame and one snapshot, never a growing queue; the engine never waits.
//
// Timeouts (a watchdog coroutine; Beast's own idle timeout is off: it closes a socket whose
// client is a few seconds late answering a ping even while its requests stream, with no frame
// saying why). A connection is busy while it runs a request or has the kv topic.
// - Not busy: after idle_timeout / 2 without hearing from the client (a frame, a ping or a pong;
//   the end of its last request counts too) the server pings; after idle_timeout it closes the
//   connection with a close frame (going_away, "idle timeout"). A live client answers pings, so
//   only a silent one is closed, as with Beast's keep-alive pings.
// - Busy: never closed for silence; a ping after idle_timeout / 2 without a frame sent (e.g. a
//   request queued behind others) keeps proxies and NATs from dropping the socket.
// - Any state: one frame's write pending for write_timeout means the client stopped reading;
//   the socket closes (its requests are aborted).
#include "net/server/ws_session.h"

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>
#include <chrono>
#include <deque>
#include <map>
#include <optional>

#include "net/protocol/kv_frames.h"
#include "net/protocol/metrics.h"
#include "net/protocol/websocket.h"

namespace pagedserve::net {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using Clock = std::chrono::steady_clock;
constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);
constexpr std::chrono::milliseconds kKvFeedInterval{100};  // <= 10 kv frames a second
constexpr std::chrono::seconds kFinishedLabelTime{2};

// A start frame while --max-ws-streams requests run on this socket: refused, socket kept
// (429-like: the client may retry once one of its streams ended).
ApiError ws_too_many_streams_error(int max_streams) {
  ApiError error = invalid_request(
      "this connection already runs " + std::to_string(max_streams) +
          " requests, the server's limit per WebSocket (--max-ws-streams); wait for one to end",
      "id", "too_many_streams");
  error.status = 429;
  return error;
}

// A timer used as a strand-local condition: wait() returns after notify() (or at once if a
// notify() came since the last wait()).
class Signal {
 public:
  explicit Signal(const asio::any_io_executor& strand) : timer_(strand) {}
  void notify() {
    notified_ = true;
    timer_.cancel();
  }
  asio::awaitable<void> wait() {
    if (!notified_) {
      timer_.expires_after(std::chrono::hours(24));
      co_await timer_.async_wait(kTuple);
    }
    notified_ = false;
  }

 private:
  asio::steady_timer timer_;
  bool notified_ = false;
};

// One connection's state; strand only (except the engine callbacks, which only post).
// Stream: beast::tcp_stream, or an ssl_stream over it (wss://).
template <class Stream>
class WsConnection : public std::enable_shared_from_this<WsConnection<Stream>> {
 public:
  WsConnection(std::shared_ptr<ServerState> state, Stream stream, std::string peer)
      : state_(std::move(state)),
        ws_(std::move(stream)),
        strand_(ws_.get_executor()),
        peer_(std::move(peer)),
        outbox_changed_(strand_),
        space_freed_(strand_),
        writer_done_(strand_),
        kv_feed_(&state_->kv_pool_frames()),
        kv_timer_(strand_),
        watchdog_timer_(strand_),
        last_heard_(Clock::now()),
        last_sent_(last_heard_) {}

  websocket::stream<Stream>& ws() { return ws_; }
  asio::any_io_executor strand() const { return strand_; }
  const std::shared_ptr<ServerState>& state() const { return state_; }

  void on_client_frame(std::string_view text);
  void heard_from_client() { last_heard_ = Clock::now(); }
  void reject_binary_frame() {
    send(0, ws_error_frame("", invalid_request("Binary frames are not supported: send JSON text "
                                               "frames (docs/websocket-protocol.md).")));
  }
  void on_stop(bool hard);
  // The reader ended: abort everything, close the socket, let the writer finish.
  void end();
  asio::awaitable<void> wait_for_room();
  asio::awaitable<void> wait_for_writer() {
    while (!writer_finished_) co_await writer_done_.wait();
  }
  static asio::awaitable<void> run_writer(std::shared_ptr<WsConnection> self);
  static asio::awaitable<void> run_kv_feed(std::shared_ptr<WsConnection> self);
  static asio::awaitable<void> run_watchdog(std::shared_ptr<WsConnection> self);

  using std::enable_shared_from_this<WsConnection<Stream>>::weak_from_this;

 private:
  struct Live {
    WsResponseStream frames;
    std::vector<RequestTimer> timers;                             // per prompt
    std::vector<std::shared_ptr<actors::RequestStream>> streams;  // dropping one aborts it
    Clock::time_point start;
  };
  struct Outgoing {
    uint64_t key = 0;  // the request it belongs to (0: none)
    std::string frame;
    bool kv = false;  // a frame of the "kv" topic
  };

  void start(WsStart start);
  void cancel(const std::string& id);
  void on_event(uint64_t key, size_t prompt_index, actors::TokenEvent event);
  void fail_slow_reader(uint64_t key);
  void finish(uint64_t key, std::string_view how);
  void send(uint64_t key, std::string frame);
  void subscribe(const WsSubscribe& subscription);
  void queue_kv_frame();
  KvRequestLabels kv_request_labels() const;
  static void add_labels(const Live& live, KvRequestLabels& labels);
  void close_socket();
  void close_gracefully(std::string reason);
  bool busy() const { return !live_.empty() || kv_watch_ != nullptr; }
  // After each write (frame or ping), whatever its outcome: what the watchdog times.
  void write_finished() {
    write_started_.reset();
    last_sent_ = Clock::now();
  }
  void check_timeouts(Clock::time_point now);
  actors::TokenCallback callback(uint64_t key, size_t prompt_index);

  std::shared_ptr<ServerState> state_;
  websocket::stream<Stream> ws_;
  asio::any_io_executor strand_;
  std::string peer_;
  std::map<uint64_t, Live> live_;         // by key: ids may be reused, keys never
  std::map<std::string, uint64_t> keys_;  // client id -> key, live requests only
  uint64_t next_key_ = 1;
  std::deque<Outgoing> outbox_;
  Signal outbox_changed_;  // the writer waits on it
  Signal space_freed_;     // the reader waits on it while the outbox is full
  Signal writer_done_;
  bool draining_ = false;  // graceful server stop: refuse new requests, close when idle
  bool closing_ = false;   // send what is queued, then the close frame
  bool ended_ = false;     // the socket is gone
  bool writer_finished_ = false;
  // The "kv" topic: the watch keeps the engine publishing; the feed remembers what was sent.
  std::unique_ptr<actors::KvMapWatch> kv_watch_;
  KvFeed kv_feed_;
  asio::steady_timer kv_timer_;
  bool kv_feed_running_ = false;
  bool kv_frame_pending_ = false;  // a kv frame is queued or being written
  // Requests that ended in the last kFinishedLabelTime, by when they are forgotten: the map a
  // kv frame shows can be one the engine published before their last frame was sent, still
  // holding their blocks, and it should name them as it did while they ran.
  struct FinishedLabel {
    std::string label;
    Clock::time_point until;
  };
  std::map<uint64_t, FinishedLabel> finished_labels_;  // by the engine's request id
  // Timeouts (run_watchdog).
  asio::steady_timer watchdog_timer_;
  Clock::time_point last_heard_;  // the client's last frame (pings and pongs too), or the end
                                  // of its last request (its last frame sent)
  Clock::time_point last_sent_;   // the writer's last finished frame or ping
  std::optional<Clock::time_point> write_started_;  // a frame or ping being written since
  bool ping_wanted_ = false;
  std::string close_reason_;  // sent in the close frame
};

template <class Stream>
actors::TokenCallback WsConnection<Stream>::callback(uint64_t key, size_t prompt_index) {
  return [gate = state_->gate(), self = weak_from_this(), key,
          prompt_index](actors::TokenEvent event) {
    gate->post(self, [key, prompt_index, event = std::move(event)](WsConnection& conn) mutable {
      conn.on_event(key, prompt_index, std::move(event));
    });
  };
}

template <class Stream>
void WsConnection<Stream>::send(uint64_t key, std::string frame) {
  if (ended_ || frame.empty()) return;
  outbox_.push_back(Outgoing{key, std::move(frame)});
  outbox_changed_.notify();
}

template <class Stream>
void WsConnection<Stream>::on_client_frame(std::string_view text) {
  WsClientFrame frame = parse_ws_client_frame(text, state_->served());
  if (auto* start_frame = std::get_if<WsStart>(&frame)) return start(std::move(*start_frame));
  if (auto* cancel_frame = std::get_if<WsCancel>(&frame)) return cancel(cancel_frame->id);
  if (auto* subscription = std::get_if<WsSubscribe>(&frame)) return subscribe(*subscription);
  const WsInvalid& invalid = std::get<WsInvalid>(frame);
  send(0, ws_error_frame(invalid.id, invalid.error));
}

template <class Stream>
void WsConnection<Stream>::subscribe(const WsSubscribe& subscription) {
  if (!subscription.subscribe) {
    kv_watch_.reset();  // the feed ends at its next tick
    last_heard_ = Clock::now();
    return;
  }
  if (!kv_watch_) kv_watch_ = state_->engine().watch_kv_map();
  kv_feed_.reset();  // a (re)subscribe starts with a full snapshot
  if (kv_feed_running_) return;
  kv_feed_running_ = true;
  asio::co_spawn(strand_, run_kv_feed(this->shared_from_this()), asio::detached);
}

template <class Stream>
void WsConnection<Stream>::add_labels(const Live& live, KvRequestLabels& labels) {
  for (size_t i = 0; i < live.streams.size(); ++i) {
    labels[live.streams[i]->request_id()] =
        i == 0 ? live.frames.id() : live.frames.id() + "/" + std::to_string(i);
  }
}

template <class Stream>
KvRequestLabels WsConnection<Stream>::kv_request_labels() const {
  KvRequestLabels labels;
  for (const auto& [request, finished] : finished_labels_) labels[request] = finished.label;
  for (const auto& [key, live] : live_) add_labels(live, labels);
  return labels;
}

// One frame to the engine's latest map, unless the previous one has not left yet: then this
// tick is skipped and the next frame's delta covers both (coalescing).
template <class Stream>
void WsConnection<Stream>::queue_kv_frame() {
  if (kv_frame_pending_ || ended_ || closing_) return;
  const Clock::time_point now = Clock::now();
  std::erase_if(finished_labels_, [now](const auto& entry) { return entry.second.until <= now; });
  actors::Engine& engine = state_->engine();
  const int64_t t_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  std::string frame =
      kv_feed_.next_frame(engine.kv_map(), engine.stats(), kv_request_labels(), t_ms);
  if (frame.empty()) return;  // nothing published yet
  outbox_.push_back(Outgoing{0, std::move(frame), true});
  kv_frame_pending_ = true;
  outbox_changed_.notify();
}

template <class Stream>
asio::awaitable<void> WsConnection<Stream>::run_kv_feed(std::shared_ptr<WsConnection> self) {
  while (!self->ended_ && self->kv_watch_) {
    self->kv_timer_.expires_after(kKvFeedInterval);
    co_await self->kv_timer_.async_wait(kTuple);
    if (self->ended_ || !self->kv_watch_) break;
    self->queue_kv_frame();
  }
  self->kv_feed_running_ = false;
}

template <class Stream>
void WsConnection<Stream>::start(WsStart start) {
  if (keys_.count(start.id))
    return send(0, ws_error_frame(start.id, ws_duplicate_id_error(start.id)));
  if (draining_) return send(0, ws_error_frame(start.id, ws_shutdown_error()));
  // Decided to close for idleness: the close frame may be on its way; never start work now.
  if (closing_) return send(0, ws_error_frame(start.id, ws_closing_error()));
  const int max_streams = state_->config().ws_max_streams;
  if (max_streams > 0 && live_.size() >= static_cast<size_t>(max_streams)) {
    return send(0, ws_error_frame(start.id, ws_too_many_streams_error(max_streams)));
  }
  GenerationRequest& request = start.request;
  std::optional<ApiError> refused = state_->check(request);
  if (!refused) refused = state_->admit(request.prompts.size());
  if (refused) return send(0, ws_error_frame(start.id, *refused));
  const uint64_t key = next_key_++;
  const Clock::time_point now = Clock::now();
  Live& live =
      live_
          .emplace(key, Live{WsResponseStream(start.id, request),
                             std::vector<RequestTimer>(request.prompts.size(),
                                                       RequestTimer(state_->metrics(), now)),
                             {},
                             now})
          .first->second;
  keys_[start.id] = key;
  live.streams = state_->submit(request, [&](size_t i) { return callback(key, i); });
}

template <class Stream>
void WsConnection<Stream>::cancel(const std::string& id) {
  auto it = keys_.find(id);
  if (it == keys_.end()) return;  // unknown or already over: a no-op, as documented
  const uint64_t key = it->second;
  for (std::string& frame : live_.at(key).frames.cancel()) send(key, std::move(frame));
  finish(key, "cancelled");
}

template <class Stream>
void WsConnection<Stream>::on_event(uint64_t key, size_t prompt_index, actors::TokenEvent event) {
  auto it = live_.find(key);
  if (it == live_.end()) return;  // cancelled, failed or the connection ended
  Live& live = it->second;
  live.timers[prompt_index].on_event(event, Clock::now());
  std::vector<std::string> frames = live.frames.on_event(prompt_index, event);
  const bool over = live.frames.done();
  if (!over && outbox_.size() + frames.size() > state_->config().ws_max_queued_frames) {
    return fail_slow_reader(key);
  }
  for (std::string& frame : frames) send(key, std::move(frame));
  if (over) finish(key, live.frames.failed() ? "error" : "done");
}

template <class Stream>
void WsConnection<Stream>::fail_slow_reader(uint64_t key) {
  std::erase_if(outbox_, [key](const Outgoing& out) { return out.key == key; });
  space_freed_.notify();
  send(key, live_.at(key).frames.fail(ws_slow_reader_error()));
  finish(key, "slow_reader");
}

// The request is over (its last frame queued): drop its engine streams (aborting any still
// running) and its id.
template <class Stream>
void WsConnection<Stream>::finish(uint64_t key, std::string_view how) {
  auto it = live_.find(key);
  if (it == live_.end()) return;
  const double ms =
      std::chrono::duration<double, std::milli>(Clock::now() - it->second.start).count();
  state_->log(peer_ + " \"WS " + it->second.frames.id() + "\" " + std::string(how) + " " +
              std::to_string(static_cast<int64_t>(ms)) + "ms");
  keys_.erase(it->second.frames.id());
  if (kv_watch_) {
    KvRequestLabels ended;
    add_labels(it->second, ended);
    const Clock::time_point until = Clock::now() + kFinishedLabelTime;
    for (auto& [request, label] : ended) finished_labels_[request] = {std::move(label), until};
  }
  live_.erase(it);
  last_heard_ = Clock::now();  // the idle timeout counts from the end of the last request
  if (draining_ && live_.empty()) close_gracefully("server shutdown");
}

template <class Stream>
asio::awaitable<void> WsConnection<Stream>::wait_for_room() {
  while (!ended_ && !writer_finished_ && outbox_.size() >= state_->config().ws_max_queued_frames) {
    co_await space_freed_.wait();
  }
}

template <class Stream>
void WsConnection<Stream>::close_socket() {
  beast::error_code ignored;
  beast::get_lowest_layer(ws_).socket().close(ignored);
}

template <class Stream>
void WsConnection<Stream>::on_stop(bool hard) {
  if (ended_) return;
  draining_ = true;
  if (hard) {
    live_.clear();  // aborts the engine requests; the socket closes under them
    keys_.clear();
    close_socket();
    return;
  }
  if (live_.empty()) close_gracefully("server shutdown");
}

// Sends what is queued, then the close frame.
template <class Stream>
void WsConnection<Stream>::close_gracefully(std::string reason) {
  if (closing_) return;
  closing_ = true;
  close_reason_ = std::move(reason);
  outbox_changed_.notify();
}

template <class Stream>
void WsConnection<Stream>::check_timeouts(Clock::time_point now) {
  const HttpServerConfig& config = state_->config();
  if (write_started_ && now - *write_started_ >= config.write_timeout) {
    state_->log(peer_ + " \"WS\" closed: the client read nothing for " +
                std::to_string(config.write_timeout.count()) + "s (write timeout)");
    close_socket();  // the pending write fails; the reader then ends the connection
    return;
  }
  if (closing_ || !outbox_.empty() || write_started_) return;
  const Clock::duration half = Clock::duration(config.idle_timeout) / 2;
  if (!busy() && now - last_heard_ >= config.idle_timeout) {
    close_gracefully("idle timeout");
    return;
  }
  const bool silent = busy() || now - last_heard_ >= half;
  if (silent && now - last_sent_ >= half) {
    ping_wanted_ = true;
    outbox_changed_.notify();
  }
}

template <class Stream>
asio::awaitable<void> WsConnection<Stream>::run_watchdog(std::shared_ptr<WsConnection> self) {
  const HttpServerConfig& config = self->state_->config();
  const Clock::duration shortest = std::min(config.idle_timeout, config.write_timeout);
  const Clock::duration tick = std::clamp<Clock::duration>(
      shortest / 4, std::chrono::milliseconds(50), std::chrono::seconds(5));
  while (!self->ended_) {
    self->watchdog_timer_.expires_after(tick);
    co_await self->watchdog_timer_.async_wait(kTuple);
    if (self->ended_) break;
    self->check_timeouts(Clock::now());
  }
}

template <class Stream>
void WsConnection<Stream>::end() {
  ended_ = true;
  live_.clear();  // drops the streams: the engine aborts what is still running
  keys_.clear();
  outbox_.clear();
  kv_watch_.reset();
  kv_timer_.cancel();
  watchdog_timer_.cancel();
  close_socket();
  outbox_changed_.notify();
  space_freed_.notify();
}

// Sends the queue in order, one frame at a time; then, if closing, the close frame.
template <class Stream>
asio::awaitable<void> WsConnection<Stream>::run_writer(std::shared_ptr<WsConnection> self) {
  while (!self->ended_) {
    if (self->outbox_.empty()) {
      if (self->closing_) {
        const websocket::close_reason reason(websocket::close_code::going_away,
                                             self->close_reason_);
        co_await self->ws_.async_close(reason, kTuple);
        break;
      }
      if (self->ping_wanted_) {
        self->ping_wanted_ = false;
        self->write_started_ = Clock::now();
        auto [ec] = co_await self->ws_.async_ping({}, kTuple);
        self->write_finished();
        if (ec) {
          self->close_socket();
          break;
        }
        continue;
      }
      co_await self->outbox_changed_.wait();
      continue;
    }
    const std::string frame = std::move(self->outbox_.front().frame);
    const bool kv = self->outbox_.front().kv;
    self->outbox_.pop_front();
    self->space_freed_.notify();
    self->write_started_ = Clock::now();
    auto [ec, bytes] = co_await self->ws_.async_write(asio::buffer(frame), kTuple);
    self->write_finished();
    // A slow client's last request ends when its last frame is sent: the idle time counts
    // from there, so such a client is pinged before it can be closed as idle.
    if (!self->busy() && self->outbox_.empty()) self->last_heard_ = self->last_sent_;
    if (kv) self->kv_frame_pending_ = false;
    if (ec) {
      self->close_socket();  // the reader then ends the connection
      break;
    }
  }
  self->writer_finished_ = true;
  self->writer_done_.notify();
  self->space_freed_.notify();  // a reader paused for room must see the writer gone
}

// Reads client frames until the socket closes, pausing while the send queue is full.
template <class Stream>
asio::awaitable<void> read_frames(std::shared_ptr<WsConnection<Stream>> conn) {
  beast::flat_buffer buffer;
  while (true) {
    co_await conn->wait_for_room();
    auto [ec, bytes] = co_await conn->ws().async_read(buffer, kTuple);
    if (ec) break;
    conn->heard_from_client();
    if (conn->ws().got_text()) {
      conn->on_client_frame(beast::buffers_to_string(buffer.data()));
    } else {
      conn->reject_binary_frame();
    }
    buffer.consume(buffer.size());
  }
}

}  // namespace

template <class Stream>
asio::awaitable<void> run_websocket_session(std::shared_ptr<ServerState> state, Stream stream,
                                            http::request<http::string_body> upgrade,
                                            std::string peer) {
  beast::get_lowest_layer(stream).expires_never();  // the WebSocket's own timeouts take over
  auto conn = std::make_shared<WsConnection<Stream>>(state, std::move(stream), std::move(peer));
  // Beast times the handshakes (opening and closing); WsConnection::run_watchdog the rest.
  websocket::stream_base::timeout timeout =
      websocket::stream_base::timeout::suggested(beast::role_type::server);
  timeout.idle_timeout = websocket::stream_base::none();
  timeout.keep_alive_pings = false;
  conn->ws().set_option(timeout);
  conn->ws().read_message_max(state->config().max_body_bytes);
  // Pings and pongs count as hearing from the client (called inside async_read, on the strand).
  conn->ws().control_callback(
      [raw = conn.get()](websocket::frame_type, beast::string_view) { raw->heard_from_client(); });
  conn->ws().text(true);
  // A browser that offered our subprotocol (it may carry its API key: router.h) fails the
  // handshake unless the answer names one it offered; never the key entry.
  if (offers_websocket_protocol(upgrade[http::field::sec_websocket_protocol], kWebSocketProtocol)) {
    conn->ws().set_option(websocket::stream_base::decorator([](websocket::response_type& response) {
      response.set(http::field::sec_websocket_protocol, kWebSocketProtocol);
    }));
  }
  auto [ec] = co_await conn->ws().async_accept(upgrade, kTuple);
  if (ec) co_return;
  const uint64_t id =
      state->add_connection(conn->strand(), [weak = std::weak_ptr(conn)](bool hard) {
        if (auto alive = weak.lock()) alive->on_stop(hard);
      });
  asio::co_spawn(conn->strand(), WsConnection<Stream>::run_writer(conn), asio::detached);
  asio::co_spawn(conn->strand(), WsConnection<Stream>::run_watchdog(conn), asio::detached);
  co_await read_frames(conn);
  conn->end();
  co_await conn->wait_for_writer();
  state->remove_connection(id);
}

template asio::awaitable<void> run_websocket_session(std::shared_ptr<ServerState>,
                                                     beast::tcp_stream,
                                                     http::request<http::string_body>, std::string);
template asio::awaitable<void> run_websocket_session(std::shared_ptr<ServerState>,
                                                     beast::ssl_stream<beast::tcp_stream>,
                                                     http::request<http::string_body>, std::string);

}  // namespace pagedserve::net
