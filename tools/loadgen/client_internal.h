// Shared between the load generator's runner (runner.cpp) and its two transports
// (http_client.cpp, ws_client.cpp): the per-run context and the transport entry points.
// Everything here lives on the run's single io_context thread, so nothing is locked.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <functional>
#include <memory>

#include "tools/loadgen/client.h"

namespace pagedserve::loadgen::detail {

struct RunContext {
  boost::asio::io_context& io;
  RunOptions options;
  BaseUrl url;
  boost::asio::ip::tcp::resolver::results_type endpoints;
  std::chrono::steady_clock::time_point start;
  int64_t tokens_received = 0;  // for the progress line's tokens/s

  double now_s() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
};

using DoneHandler = std::function<void(RequestRecord)>;

// Streams one request over its own HTTP connection; calls done exactly once.
void start_http_request(RunContext& ctx, const OutgoingRequest& request, RequestRecord record,
                        DoneHandler done);

// A few WebSocket connections carrying every request of the run.
class WsPool {
 public:
  virtual ~WsPool() = default;
  virtual void start(const OutgoingRequest& request, RequestRecord record, DoneHandler done) = 0;
  virtual void close() = 0;  // after the last request ended
};
std::shared_ptr<WsPool> make_ws_pool(RunContext& ctx);

// "http 503: message" from a failed response body (OpenAI error JSON or text).
std::string http_error_reason(int status, const std::string& body);

}  // namespace pagedserve::loadgen::detail
