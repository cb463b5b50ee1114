// connect_first: connects a Beast tcp_stream to the first resolved endpoint that accepts,
// trying them one at a time. Asio's range connect (tcp_stream::async_connect(results)) trips
// UndefinedBehaviorSanitizer inside Boost 1.81's range_connect_op when an endpoint refuses
// (e.g. "localhost" resolving to ::1 while the server listens on 127.0.0.1); one endpoint per
// call avoids that code path. Only the two Beast translation units include this.
#pragma once

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/tcp_stream.hpp>

namespace pagedserve::loadgen::detail {

inline boost::asio::awaitable<boost::beast::error_code> connect_first(
    boost::beast::tcp_stream& stream, boost::asio::ip::tcp::resolver::results_type endpoints) {
  boost::beast::error_code ec = boost::asio::error::host_not_found;
  for (const auto& entry : endpoints) {
    if (stream.socket().is_open()) {
      boost::beast::error_code ignored;
      stream.socket().close(ignored);
    }
    std::tie(ec) = co_await stream.async_connect(entry.endpoint(),
                                                 boost::asio::as_tuple(boost::asio::use_awaitable));
    if (!ec) break;
  }
  co_return ec;
}

}  // namespace pagedserve::loadgen::detail
