// The chaos soak's WebSocket client (Beast): one request on its own /v1/stream connection,
// cancelled after a few token frames (docs/websocket-protocol.md: the server answers a cancel
// with a done frame, finish_reason "abort", for every choice still running).
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>

#include "tools/loadgen/chaos_internal.h"
#include "tools/loadgen/connect.h"

namespace pagedserve::loadgen::detail {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;

namespace {

constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);

std::string ws_error(const char* operation, const beast::error_code& ec) {
  if (ec == beast::error::timeout) return std::string("deadline: ws ") + operation;
  return std::string("ws ") + operation + ": " + ec.message();
}

// Folds one server frame into `seen`; true when the request is over.
bool on_frame(const std::string& text, int64_t choices, ChaosObservation& seen) {
  const nlohmann::json frame = nlohmann::json::parse(text, nullptr, false);
  const std::string type = frame.is_object() ? frame.value("type", "") : "";
  if (type == "token") {
    ++seen.events_read;
    return false;
  }
  if (type == "done") {
    seen.finish_reasons.push_back(frame.value("finish_reason", ""));
    seen.completed = static_cast<int64_t>(seen.finish_reasons.size()) >= choices;
    return seen.completed;
  }
  if (type == "error") {
    const nlohmann::json& error = frame["error"];
    seen.error_body = error.is_object() && error.contains("message");
    seen.stream_error_code =
        error.is_object() && error.contains("code") && error["code"].is_string()
            ? error["code"].get<std::string>()
            : "error";
    return true;
  }
  seen.transport_error = "ws: unexpected frame";
  return true;
}

}  // namespace

asio::awaitable<ChaosObservation> play_ws_cancel(const ChaosEnv& env, nlohmann::json frame,
                                                 int64_t choices, int64_t cut_after_events) {
  ChaosObservation seen;
  const auto executor = co_await asio::this_coro::executor;
  websocket::stream<beast::tcp_stream> ws(executor);
  auto& tcp = beast::get_lowest_layer(ws);
  beast::error_code ec;
  size_t n = 0;
  tcp.expires_after(env.deadline());
  ec = co_await connect_first(tcp, env.endpoints);
  if (ec) {
    seen.transport_error = ws_error("connect", ec);
    co_return seen;
  }
  tcp.expires_after(env.deadline());
  std::tie(ec) = co_await ws.async_handshake(env.url.host + ":" + env.url.port,
                                             env.url.path_prefix + env.options.ws_path, kTuple);
  if (ec) {
    seen.transport_error = ws_error("handshake", ec);
    co_return seen;
  }
  seen.status = 101;
  ws.text(true);
  const std::string start = frame.dump();
  const std::string cancel = nlohmann::json{{"type", "cancel"}, {"id", frame["id"]}}.dump();
  tcp.expires_after(env.deadline());
  std::tie(ec, n) = co_await ws.async_write(asio::buffer(start), kTuple);
  bool cancelled = false, over = false;
  beast::flat_buffer buffer;
  while (!ec && !over) {
    tcp.expires_after(env.deadline());
    std::tie(ec, n) = co_await ws.async_read(buffer, kTuple);
    if (ec) break;
    over = on_frame(beast::buffers_to_string(buffer.data()), choices, seen);
    buffer.consume(buffer.size());
    if (!over && !cancelled && seen.events_read >= cut_after_events) {
      cancelled = true;
      tcp.expires_after(env.deadline());
      std::tie(ec, n) = co_await ws.async_write(asio::buffer(cancel), kTuple);
    }
  }
  if (ec) {
    seen.transport_error = ws_error("read/write", ec);
    co_return seen;
  }
  tcp.expires_after(env.deadline());
  std::tie(ec) = co_await ws.async_close(websocket::close_code::normal, kTuple);
  co_return seen;
}

}  // namespace pagedserve::loadgen::detail
