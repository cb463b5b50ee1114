// Shared by the chaos clients' two Beast files (chaos_client.cpp: HTTP kinds and the
// dispatcher; chaos_ws.cpp: the WebSocket cancel): the run's context. Single-threaded: all of
// it lives on the run's io_context thread.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <nlohmann/json.hpp>

#include "tools/loadgen/chaos_client.h"
#include "tools/loadgen/client.h"

namespace pagedserve::loadgen::detail {

struct ChaosEnv {
  boost::asio::io_context& io;
  ChaosClientOptions options;
  BaseUrl url;
  boost::asio::ip::tcp::resolver::results_type endpoints;
  std::chrono::steady_clock::time_point start;

  double now_s() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  std::chrono::steady_clock::duration deadline() const {
    return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(options.request_timeout_s));
  }
};

// Sends `frame` (a "completion" start frame with id "chaos") over a fresh WebSocket, reads
// cut_after_events token frames, cancels, and reads until every one of `choices` done frames
// (or an error frame) came.
boost::asio::awaitable<ChaosObservation> play_ws_cancel(const ChaosEnv& env, nlohmann::json frame,
                                                        int64_t choices, int64_t cut_after_events);

}  // namespace pagedserve::loadgen::detail
