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

#include "net/server/server_state.h"

namespace pagedserve::net {

// Accepts the upgrade and serves the socket until either side closes it.
asio::awaitable<void> run_websocket_session(
    std::shared_ptr<ServerState> state, boost::beast::tcp_stream stream,
    boost::beast::http::request<boost::beast::http::string_body> upgrade, std::string peer);

}  // namespace pagedserve::net
