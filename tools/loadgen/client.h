// The load generator's network side: replays prepared requests against an OpenAI-compatible
// server on one Asio event loop (open loop: the arrival clock never waits for the server),
// over HTTP with server-sent events or over pagedserve's WebSocket protocol, and returns one
// record per request. Also a small blocking HTTP fetch for set-up calls (/v1/models,
// /tokenize). The Beast code lives in http_client.cpp and ws_client.cpp only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/loadgen/request_body.h"
#include "tools/loadgen/stats.h"

namespace pagedserve::loadgen {

enum class Protocol { kHttp, kWs };

// "http://host:port/prefix" split up; throws std::invalid_argument (https is not supported).
struct BaseUrl {
  std::string host;
  std::string port = "80";
  std::string path_prefix;  // "" or "/prefix" (no trailing slash)
};
BaseUrl parse_base_url(const std::string& url);

struct RunOptions {
  Protocol protocol = Protocol::kHttp;
  std::string base_url = "http://127.0.0.1:8000";
  std::string api_key;  // sent as "Authorization: Bearer KEY" when set
  std::string ws_path = "/v1/stream";
  int ws_connections = 4;            // requests are spread over this many sockets
  int64_t max_concurrency = 0;       // 0 = no cap; else arrivals beyond it wait in a queue
  double request_timeout_s = 600.0;  // per network operation
  bool progress = true;              // the live progress line on stderr
};

struct RunResult {
  std::vector<RequestRecord> records;  // in request order
  double duration_s = 0.0;             // run start to the last response's end
};

// Sends requests[i] at arrivals_s[i] seconds after the start. Blocks until every request
// ended.
RunResult run_load(const RunOptions& options, const std::vector<OutgoingRequest>& requests,
                   const std::vector<double>& arrivals_s);

struct HttpReply {
  int status = 0;  // 0 when no answer came (see error)
  std::string body;
  std::string error;  // connection or read error
};

// One blocking request (GET when body is empty, else POST with a JSON body).
HttpReply http_fetch(const std::string& base_url, const std::string& path, const std::string& body,
                     const std::string& api_key, double timeout_s);

}  // namespace pagedserve::loadgen
