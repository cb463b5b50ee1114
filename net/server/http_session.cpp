// The HTTP connection coroutine: one per accepted socket, on that socket's strand. It only does
// I/O: routing and every body come from router.h and net/protocol. Owns keep-alive, the
// 400/413/431 answers for requests Beast cannot parse, generation (engine submit, the peer
// watch that aborts a request whose client left, SSE streaming with one HTTP chunk per batch
// of events as they arrive) and the per-request log line.
//
// SSE framing: HTTP/1.1 responses use Transfer-Encoding: chunked (the connection stays
// usable afterwards); HTTP/1.0 ones are written raw and end with the connection.
//
// TLS: every function is a template over the stream (beast::tcp_stream, or ssl_stream over
// it), so HTTP, SSE and the WebSocket hand-over share one code path; timeouts, the stop hook
// and the peer watch always act on the TCP layer underneath.
#include "net/server/http_session.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/core/detect_ssl.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <boost/beast/websocket/rfc6455.hpp>
#include <chrono>
#include <cstdio>
#include <string>

#include "net/protocol/endpoints.h"
#include "net/protocol/metrics.h"
#include "net/protocol/response_assembler.h"
#include "net/protocol/websocket.h"
#include "net/server/event_inbox.h"
#include "net/server/router.h"
#include "net/server/ws_session.h"

namespace pagedserve::net {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using Request = http::request<http::string_body>;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;
constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);

// What the server's stop hook reaches; strand only. Outlives the session (a posted hook may
// run after it ended), hence `stream` is cleared when the session lets go of the socket.
struct SessionControl {
  beast::tcp_stream* stream = nullptr;
  std::shared_ptr<EventInbox> inbox;  // the generation in flight, if any
  bool idle = true;                   // between requests
  bool close_after = false;           // graceful stop: close after the current response
  bool hard_stopped = false;          // hard stop: abort the generation, close now

  void on_stop(bool hard) {
    close_after = true;
    hard_stopped = hard_stopped || hard;
    if (inbox && hard) inbox->wake();
    if (stream && (idle || hard)) {
      beast::error_code ignored;
      stream->socket().close(ignored);
    }
  }
};

// The peer watch of one generation: set on the strand by the watch's handler.
struct PeerWatch {
  bool active = true;  // cleared when the generation ends (the handler then does nothing)
  bool gone = false;   // EOF or an error on the socket: the client left
};

template <class Stream>
struct Session {
  Session(std::shared_ptr<ServerState> state_in, Stream stream_in)
      : state(std::move(state_in)), stream(std::move(stream_in)) {}

  std::shared_ptr<ServerState> state;
  Stream stream;  // beast::tcp_stream or TlsStream
  beast::flat_buffer buffer;
  std::string peer;
  std::shared_ptr<SessionControl> control = std::make_shared<SessionControl>();
  int num_requests = 0;  // requests read on this connection (--max-requests-per-connection)
  // The current request's Access-Control-Allow-Origin (its Origin, when allowed), else empty.
  std::string cors_origin;

  beast::tcp_stream& tcp() { return beast::get_lowest_layer(stream); }
};

// One engine generation behind one HTTP request.
struct Generation {
  Generation(const GenerationRequest& request, Metrics& metrics, Clock::time_point start,
             const asio::any_io_executor& strand)
      : assembler(request, make_response_id(request.endpoint), unix_time_now()),
        timers(request.prompts.size(), RequestTimer(metrics, start)),
        inbox(std::make_shared<EventInbox>(strand)) {}

  ResponseAssembler assembler;
  std::vector<RequestTimer> timers;  // per prompt
  std::shared_ptr<EventInbox> inbox;
  std::shared_ptr<PeerWatch> watch = std::make_shared<PeerWatch>();
  std::vector<std::shared_ptr<actors::RequestStream>> streams;  // dropping one aborts it
};

std::string peer_name(const tcp::socket& socket) {
  beast::error_code ec;
  const tcp::endpoint endpoint = socket.remote_endpoint(ec);
  if (ec) return "?";
  return endpoint.address().to_string() + ":" + std::to_string(endpoint.port());
}

template <class Stream>
void log_request(const Session<Stream>& s, const Request& req, int status, Clock::time_point start,
                 const std::string& extra) {
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  char elapsed[32];
  std::snprintf(elapsed, sizeof elapsed, "%.1fms", ms);
  s.state->log(s.peer + " \"" + std::string(req.method_string()) + " " + std::string(req.target()) +
               "\" " + std::to_string(status) + " " + elapsed + (extra.empty() ? "" : " " + extra));
}

template <class Stream>
bool keep_alive_after(const Session<Stream>& s, const Request& req) {
  const int max_requests = s.state->config().max_requests_per_connection;
  const bool under_limit = max_requests <= 0 || s.num_requests < max_requests;
  return req.keep_alive() && under_limit && !s.control->close_after && !s.state->stopping();
}

// Server and CORS headers, on every response (errors and SSE included: a browser shows the
// page nothing of a response without Access-Control-Allow-Origin).
template <class Stream, class Message>
void set_common_headers(const Session<Stream>& s, Message& res) {
  res.set(http::field::server, "pagedserve/" + std::string(kServerVersion));
  if (!s.cors_origin.empty()) {
    res.set(http::field::access_control_allow_origin, s.cors_origin);
    res.set(http::field::vary, "Origin");
  }
}

template <class Stream>
http::response<http::string_body> make_response(const Session<Stream>& s, const Request& req,
                                                const HttpResponse& response) {
  http::response<http::string_body> res{static_cast<http::status>(response.status), req.version()};
  set_common_headers(s, res);
  if (!response.content_type.empty()) res.set(http::field::content_type, response.content_type);
  if (response.status == 429) res.set(http::field::retry_after, "1");
  if (response.status == 401) res.set(http::field::www_authenticate, "Bearer");
  res.keep_alive(keep_alive_after(s, req));
  res.body() = response.body;
  res.prepare_payload();
  if (req.method() == http::verb::head) res.body().clear();  // Content-Length stays
  return res;
}

// Writes a complete response; true when the connection may serve another request.
template <class Stream>
asio::awaitable<bool> write_message(Session<Stream>& s, http::response<http::string_body>& res) {
  s.tcp().expires_after(s.state->config().write_timeout);
  auto [ec, bytes] = co_await http::async_write(s.stream, res, kTuple);
  co_return !ec && res.keep_alive();
}

template <class Stream>
asio::awaitable<bool> write_response(Session<Stream>& s, const Request& req,
                                     const HttpResponse& response, Clock::time_point start,
                                     std::string extra = {}) {
  http::response<http::string_body> res = make_response(s, req, response);
  log_request(s, req, response.status, start, extra);  // before: the client may look at once
  co_return co_await write_message(s, res);
}

// 204 to an allowed origin's preflight: which methods and headers the real request may use.
template <class Stream>
asio::awaitable<bool> write_preflight(Session<Stream>& s, const Request& req,
                                      Clock::time_point start) {
  http::response<http::string_body> res{http::status::no_content, req.version()};
  set_common_headers(s, res);
  res.set(http::field::access_control_allow_methods, kCorsAllowMethods);
  res.set(http::field::access_control_allow_headers, kCorsAllowHeaders);
  res.set(http::field::access_control_max_age, kCorsMaxAgeSeconds);
  res.keep_alive(keep_alive_after(s, req));
  log_request(s, req, 204, start, "cors preflight");
  co_return co_await write_message(s, res);
}

// Arms a one-shot readiness wait: EOF or an error while the request generates means the client
// left (the generation is then aborted); readable data is a pipelined request (stop watching).
void watch_peer(tcp::socket& socket, const std::shared_ptr<PeerWatch>& watch,
                const std::shared_ptr<EventInbox>& inbox) {
  socket.async_wait(tcp::socket::wait_read, [&socket, watch, inbox](beast::error_code ec) {
    if (!watch->active || ec == asio::error::operation_aborted) return;
    if (!ec) {
      char byte = 0;
      beast::error_code peek;
      const size_t n = socket.receive(asio::buffer(&byte, 1), tcp::socket::message_peek, peek);
      if (!peek && n > 0) return;
      if (peek == asio::error::would_block) return watch_peer(socket, watch, inbox);
    }
    watch->gone = true;
    inbox->wake();
  });
}

// Feeds the queued events to the assembler and the timers; returns the SSE text to send.
std::string feed_events(Generation& g) {
  std::string out;
  const Clock::time_point now = Clock::now();
  for (PromptEvent& item : g.inbox->take()) {
    if (g.assembler.done()) break;
    g.timers[item.prompt_index].on_event(item.event, now);
    out += g.assembler.on_event(item.prompt_index, item.event);
  }
  // An error ended the response: the other prompts are of no use any more.
  if (g.assembler.failed()) {
    for (auto& stream : g.streams) stream->abort();
  }
  return out;
}

template <class Stream>
bool interrupted(const Session<Stream>& s, const Generation& g) {
  return g.watch->gone || s.control->hard_stopped;
}

// Streams the response as server-sent events; true when the connection may be reused.
template <class Stream>
asio::awaitable<bool> stream_events(Session<Stream>& s, const Request& req, Generation& g) {
  const bool chunked = req.version() >= 11;
  http::response<http::empty_body> res{http::status::ok, req.version()};
  set_common_headers(s, res);
  res.set(http::field::content_type, kSseContentType);
  res.set(http::field::cache_control, "no-cache");
  res.keep_alive(chunked && keep_alive_after(s, req));
  res.chunked(chunked);
  http::response_serializer<http::empty_body> serializer{res};
  s.tcp().expires_after(s.state->config().write_timeout);
  auto [header_ec, header_bytes] = co_await http::async_write_header(s.stream, serializer, kTuple);
  if (header_ec) co_return false;
  while (!g.assembler.done()) {
    co_await g.inbox->wait();
    if (interrupted(s, g)) co_return false;
    // A reader too slow for the bounded inbox: its requests were aborted at the overflow; it
    // gets the error event and [DONE] (once it reads again, within write_timeout).
    const std::string text =
        g.inbox->overflowed() ? g.assembler.fail(ws_slow_reader_error()) : feed_events(g);
    if (text.empty()) continue;
    s.tcp().expires_after(s.state->config().write_timeout);
    beast::error_code ec;
    if (chunked) {
      std::tie(ec, std::ignore) =
          co_await asio::async_write(s.stream, http::make_chunk(asio::buffer(text)), kTuple);
    } else {
      std::tie(ec, std::ignore) = co_await asio::async_write(s.stream, asio::buffer(text), kTuple);
    }
    if (ec) co_return false;
  }
  if (!chunked) co_return false;
  s.tcp().expires_after(s.state->config().write_timeout);
  auto [last_ec, last_bytes] =
      co_await asio::async_write(s.stream, http::make_chunk_last(), kTuple);
  co_return !last_ec && !g.inbox->overflowed() && keep_alive_after(s, req);
}

std::string usage_note(const Generation& g) {
  const Usage usage = g.assembler.usage();
  return "prompt_tokens=" + std::to_string(usage.prompt_tokens) +
         " completion_tokens=" + std::to_string(usage.completion_tokens) +
         " cached_tokens=" + std::to_string(usage.cached_tokens) +
         (g.inbox->overflowed() ? " slow_reader" : "") + (g.assembler.done() ? "" : " aborted");
}

// Submits the request's prompts and answers it (JSON once done, or SSE as it goes).
template <class Stream>
asio::awaitable<bool> serve_generation(Session<Stream>& s, const Request& req,
                                       GenerationRequest gen, Clock::time_point start) {
  if (s.state->stopping()) {
    co_return co_await write_response(s, req, error_response(ws_shutdown_error()), start);
  }
  std::optional<ApiError> refused = s.state->check(gen);
  if (!refused) refused = s.state->admit(gen.prompts.size());
  if (refused) co_return co_await write_response(s, req, error_response(*refused), start);
  Generation g(gen, s.state->metrics(), start, s.stream.get_executor());
  // A step brings up to one event per choice at once, before the session wakes: the bound
  // leaves room for two such bursts, so only a reader that stopped keeping up trips it.
  const size_t max_queued_events =
      std::max(s.state->config().sse_max_queued_events, 2 * gen.num_choices());
  g.streams = s.state->submit(gen, [&](size_t i) { return g.inbox->callback(s.state->gate(), i); });
  if (g.assembler.streaming()) {
    std::vector<std::weak_ptr<actors::RequestStream>> streams(g.streams.begin(), g.streams.end());
    g.inbox->limit(max_queued_events, [streams] {
      for (const auto& weak : streams) {
        if (auto stream = weak.lock()) stream->abort();
      }
    });
  }
  s.control->inbox = g.inbox;
  watch_peer(s.tcp().socket(), g.watch, g.inbox);
  bool keep_alive = false;
  if (g.assembler.streaming()) {
    keep_alive = co_await stream_events(s, req, g);
    // 499: nginx's "client closed request" (the stream broke before its end).
    log_request(s, req, g.assembler.done() ? 200 : 499, start, usage_note(g));
  } else {
    while (!g.assembler.done() && !interrupted(s, g)) {
      co_await g.inbox->wait();
      if (!interrupted(s, g)) feed_events(g);
    }
    if (g.assembler.done()) {
      keep_alive = co_await write_response(s, req, g.assembler.response(), start, usage_note(g));
    } else {
      log_request(s, req, 499, start, usage_note(g));
    }
  }
  g.watch->active = false;
  s.control->inbox.reset();
  beast::error_code ignored;
  s.tcp().socket().cancel(ignored);  // the peer watch
  co_return keep_alive;
}

HttpResponse metrics_response(ServerState& state) {
  EngineGauges gauges = gauges_from_stats(state.engine().stats());
  gauges.scrape_unix_s =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  return HttpResponse{200, std::string(kPrometheusContentType),
                      render_prometheus(state.metrics(), gauges, state.metrics_exposition())};
}

// Answers one request; false when the connection must close (or was handed to a WebSocket).
template <class Stream>
asio::awaitable<bool> handle_request(Session<Stream>& s, Request& req) {
  const Clock::time_point start = Clock::now();
  const RouteInput input{req.method_string(),
                         req.target(),
                         req[http::field::authorization],
                         req.body(),
                         beast::websocket::is_upgrade(req),
                         req["X-Api-Key"],
                         req[http::field::origin],
                         req[http::field::access_control_request_method],
                         req[http::field::sec_websocket_protocol]};
  const AccessPolicy& access = s.state->access();
  s.cors_origin = cors_allowed_origin(access.allowed_origins, input.origin).value_or("");
  Route route = route_request(input, s.state->served(), access);
  if (std::holds_alternative<RoutePreflight>(route)) {
    co_return co_await write_preflight(s, req, start);
  }
  if (auto* response = std::get_if<HttpResponse>(&route)) {
    co_return co_await write_response(s, req, *response, start);
  }
  if (std::holds_alternative<RouteMetrics>(route)) {
    co_return co_await write_response(s, req, metrics_response(*s.state), start);
  }
  if (auto* generate = std::get_if<RouteGenerate>(&route)) {
    co_return co_await serve_generation(s, req, std::move(generate->request), start);
  }
  log_request(s, req, 101, start, "websocket");
  s.control->stream = nullptr;  // the WebSocket session takes the socket and its own hook
  co_await run_websocket_session(s.state, std::move(s.stream), std::move(req), s.peer);
  co_return false;
}

// Answers a request Beast could not read (400/413/431); the connection then closes. After 413
// the rest of the body is read and dropped for a moment, so the client sees the answer
// instead of a reset.
template <class Stream>
asio::awaitable<void> answer_unreadable(Session<Stream>& s, beast::error_code ec) {
  const Clock::time_point start = Clock::now();
  Request req{http::verb::get, "-", 11};
  req.method_string("-");
  s.cors_origin.clear();  // the headers were not read
  HttpResponse response = error_response(bad_http_error(ec.message()));
  if (ec == http::error::body_limit) {
    response = error_response(body_too_large_error(s.state->config().max_body_bytes));
  } else if (ec == http::error::header_limit) {
    response = error_response(header_too_large_error(s.state->config().max_header_bytes));
  }
  req.keep_alive(false);
  co_await write_response(s, req, response, start, "unreadable: " + ec.message());
  if constexpr (std::is_same_v<Stream, beast::tcp_stream>) {
    // Half-close so the client reads the answer; over TLS the record layer cannot half-close,
    // so the draining read below does the same job.
    beast::error_code ignored;
    s.tcp().socket().shutdown(tcp::socket::shutdown_send, ignored);
  }
  s.tcp().expires_after(std::chrono::seconds(2));
  std::array<char, 16384> sink;
  for (size_t dropped = 0; dropped < (size_t{64} << 20);) {
    auto [read_ec, n] = co_await s.stream.async_read_some(asio::buffer(sink), kTuple);
    if (read_ec) break;
    dropped += n;
  }
}

bool is_http_parse_error(beast::error_code ec) {
  return ec.category() == beast::http::make_error_code(http::error::bad_target).category() &&
         ec != http::error::end_of_stream && ec != http::error::partial_message;
}

// Over TLS: the handshake, bounded by the idle timeout. A client that speaks plain HTTP to
// the TLS port gets a 400 (an OpenAI error body) saying so (the first bytes tell: a TLS record
// starts 0x16), then the connection closes; the server is unaffected.
asio::awaitable<bool> tls_handshake(Session<TlsStream>& s) {
  s.tcp().expires_after(s.state->config().idle_timeout);
  auto [detect_ec, is_tls] = co_await beast::async_detect_ssl(s.tcp(), s.buffer, kTuple);
  if (detect_ec) co_return false;
  if (!is_tls) {
    s.state->log(s.peer + " plain HTTP on the TLS port: 400");
    const HttpResponse response = error_response(
        invalid_request("This port speaks HTTPS: the request was sent as plain HTTP."));
    http::response<http::string_body> res{http::status::bad_request, 11};
    res.set(http::field::server, "pagedserve/" + std::string(kServerVersion));
    res.set(http::field::content_type, response.content_type);
    res.keep_alive(false);
    res.body() = response.body;
    res.prepare_payload();
    s.tcp().expires_after(s.state->config().write_timeout);
    co_await http::async_write(s.tcp(), res, kTuple);
    co_return false;
  }
  auto [ec, used] =
      co_await s.stream.async_handshake(asio::ssl::stream_base::server, s.buffer.data(), kTuple);
  if (ec) {
    s.state->log(s.peer + " TLS handshake failed: " + ec.message());
    co_return false;
  }
  s.buffer.consume(used);
  co_return true;
}

template <class Stream>
asio::awaitable<void> serve_connection(Session<Stream>& s) {
  const std::shared_ptr<ServerState>& state = s.state;
  s.peer = peer_name(s.tcp().socket());
  s.control->stream = &s.tcp();
  const uint64_t id = state->add_connection(
      s.stream.get_executor(), [control = s.control](bool hard) { control->on_stop(hard); });
  const HttpServerConfig& config = state->config();
  bool ready = true;
  if constexpr (std::is_same_v<Stream, TlsStream>) ready = co_await tls_handshake(s);
  while (ready && !s.control->close_after && !state->stopping()) {
    s.control->idle = true;
    http::request_parser<http::string_body> parser;
    parser.body_limit(config.max_body_bytes);
    parser.header_limit(
        static_cast<uint32_t>(std::min<size_t>(config.max_header_bytes, UINT32_MAX)));
    s.tcp().expires_after(config.idle_timeout);
    auto [ec, bytes] = co_await http::async_read(s.stream, s.buffer, parser, kTuple);
    s.control->idle = false;
    if (is_http_parse_error(ec)) co_await answer_unreadable(s, ec);
    if (ec) break;
    ++s.num_requests;
    Request req = parser.release();
    if (!co_await handle_request(s, req)) break;
  }
  if (s.control->stream) {
    s.control->stream = nullptr;
    beast::error_code ignored;
    if constexpr (std::is_same_v<Stream, TlsStream>) {
      // close_notify, so the client knows the response was not truncated; bounded, as a
      // client that went away never answers it. Not after a failed handshake.
      if (ready) {
        s.tcp().expires_after(std::chrono::seconds(2));
        co_await s.stream.async_shutdown(kTuple);
      }
    }
    s.tcp().socket().shutdown(tcp::socket::shutdown_send, ignored);
    s.tcp().close();
  }
  state->remove_connection(id);
}

}  // namespace

asio::awaitable<void> run_http_session(std::shared_ptr<ServerState> state, tcp::socket socket,
                                       asio::ssl::context* tls) {
  beast::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);  // SSE chunks leave at once
  socket.non_blocking(true, ignored);               // the peer watch's peek must not block
  if (tls) {
    Session<TlsStream> s(state, TlsStream(std::move(socket), *tls));
    co_await serve_connection(s);
  } else {
    Session<beast::tcp_stream> s(state, beast::tcp_stream(std::move(socket)));
    co_await serve_connection(s);
  }
}

}  // namespace pagedserve::net
