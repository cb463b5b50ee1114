// The HTTP connection coroutine (net/server/http_session.cpp): reads requests, routes them
// (router.h, pure), writes responses, streams server-sent events, and hands a WebSocket
// upgrade to run_websocket_session. Runs on the connection's strand (the socket's executor).
// Internal to net/server.
#pragma once

#include <memory>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "net/server/server_state.h"

namespace pagedserve::net {

asio::awaitable<void> run_http_session(std::shared_ptr<ServerState> state,
                                       asio::ip::tcp::socket socket);

}  // namespace pagedserve::net
