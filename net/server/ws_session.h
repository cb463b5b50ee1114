// The WebSocket connection (net/server/ws_session.cpp): GET /v1/stream upgraded, many
// requests multiplexed on one socket (docs/websocket-protocol.md), cancel frames, and a
// bounded send queue per socket (a slow reader gets its requests failed with "slow_reader"
// and stops being read). Runs on the connection's strand. Internal to net/server.
#pragma once

#include <memory>
#include <string>

#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

#include "net/server/server_state.h"

namespace pagedserve::net {

// Accepts the upgrade and serves the socket until either side closes it. Stream:
// boost::beast::tcp_stream or boost::beast::ssl_stream over it (both instantiated in the .cpp).
template <class Stream>
asio::awaitable<void> run_websocket_session(
    std::shared_ptr<ServerState> state, Stream stream,
    boost::beast::http::request<boost::beast::http::string_body> upgrade, std::string peer);

extern template asio::awaitable<void> run_websocket_session(
    std::shared_ptr<ServerState>, boost::beast::tcp_stream,
    boost::beast::http::request<boost::beast::http::string_body>, std::string);
extern template asio::awaitable<void> run_websocket_session(
    std::shared_ptr<ServerState>, boost::beast::ssl_stream<boost::beast::tcp_stream>,
    boost::beast::http::request<boost::beast::http::string_body>, std::string);

}  // namespace pagedserve::net
