// The HTTP connection coroutine (net/server/http_session.cpp): reads requests, routes them
// (router.h, pure), writes responses, streams server-sent events, and hands a WebSocket
// upgrade to run_websocket_session. Runs on the connection's strand (the socket's executor).
// With a TLS context, the connection is TLS (handshake first; plain HTTP gets a 400).
// Internal to net/server.
#pragma once

#include <memory>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "net/server/server_state.h"

namespace boost::asio::ssl {
class context;
}

namespace pagedserve::net {

// `tls`: nullptr for plain HTTP; else it must outlive the session (the server owns it).
asio::awaitable<void> run_http_session(std::shared_ptr<ServerState> state,
                                       asio::ip::tcp::socket socket, asio::ssl::context* tls);

}  // namespace pagedserve::net
