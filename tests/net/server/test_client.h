// Blocking HTTP, server-sent-event and WebSocket clients for the server's end-to-end tests
// (Beast, in test_client.cpp only, so the test files compile without it), and TestServer:
// an Engine on stories260K plus an HttpServer on an ephemeral loopback port. Each client
// object belongs to one test thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "actors/engine.h"
#include "actors/fault_hooks.h"
#include "net/server/http_server.h"

namespace pagedserve::net::testing {

using Headers = std::map<std::string, std::string>;

struct HttpResult {
  int status = 0;
  Headers headers;  // names lower-cased
  std::string body;
};

// One request on a fresh connection.
HttpResult http_request(uint16_t port, const std::string& method, const std::string& target,
                        const std::string& body = "", const Headers& headers = {});
// Sends raw bytes and returns everything the server wrote until it closed the connection.
std::string raw_exchange(uint16_t port, const std::string& bytes);

// Several requests on one keep-alive connection.
class HttpConnection {
 public:
  explicit HttpConnection(uint16_t port);
  ~HttpConnection();
  HttpResult request(const std::string& method, const std::string& target,
                     const std::string& body = "", const Headers& headers = {});
  // Writes a request without reading the answer.
  void send(const std::string& method, const std::string& target, const std::string& body = "");
  // True when the server closed the connection (reads EOF) within `timeout`.
  bool closed_by_server(std::chrono::milliseconds timeout);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A POST whose response is read incrementally, one server-sent event at a time.
class SseClient {
 public:
  // receive_buffer_bytes > 0: the socket's SO_RCVBUF, set before connecting (a slow reader
  // whose kernel buffer fills quickly).
  SseClient(uint16_t port, const std::string& target, const std::string& body,
            const Headers& headers = {}, int receive_buffer_bytes = 0);
  ~SseClient();
  int status() const;
  const Headers& headers() const;
  // The next event's data ("[DONE]" included); nullopt once the response or connection ended.
  std::optional<std::string> next_event();
  std::string rest_of_body();  // a non-streaming answer (e.g. an error body)
  void disconnect();           // closes the socket at once (RST when data is unread)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class WsClient {
 public:
  // receive_buffer_bytes > 0: the socket's SO_RCVBUF, as for SseClient.
  explicit WsClient(uint16_t port, const std::string& target = "/v1/stream",
                    const Headers& headers = {}, int receive_buffer_bytes = 0);
  ~WsClient();
  void send(const std::string& text);
  void send_binary(const std::string& data);
  std::optional<std::string> read();  // nullopt once the connection closed
  void disconnect();                  // closes the TCP socket without a close frame
  // How the connection ended, once read() returned nullopt: the server's close frame (code and
  // reason), or code 0 and the read's error when it ended without one (EOF, reset).
  struct Ending {
    int close_code = 0;
    std::string close_reason;
    std::string error;
  };
  const Ending& ending() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Reads the server's WebSocket handshake answer for an upgrade request (status only).
int ws_handshake_status(uint16_t port, const std::string& target, const Headers& headers = {});
// The same, with the answer's headers (names lower-cased).
HttpResult ws_handshake(uint16_t port, const std::string& target, const Headers& headers = {});

// The engine on stories260K (a small KV pool) and the server on 127.0.0.1:0.
class TestServer {
 public:
  // fault_hooks: for tests that hold or fail engine steps (actors/fault_hooks.h).
  explicit TestServer(HttpServerConfig config = {}, int max_num_seqs = 256,
                      int num_kv_blocks = 1024,
                      std::shared_ptr<const actors::FaultHooks> fault_hooks = nullptr);
  ~TestServer();
  uint16_t port() const { return port_; }
  actors::Engine& engine() { return *engine_; }
  HttpServer& server() { return *server_; }
  std::vector<std::string> log_lines() const;
  // Called on the logging (io) thread after each log line is kept; a test may block in it.
  void set_log_hook(std::function<void()> hook);
  // Polls the engine until no request is unfinished and every KV block is free.
  bool wait_until_idle(std::chrono::milliseconds timeout = std::chrono::seconds(20));

 private:
  mutable std::mutex log_mu_;
  std::vector<std::string> log_;
  std::function<void()> log_hook_;
  std::unique_ptr<actors::Engine> engine_;
  std::unique_ptr<HttpServer> server_;
  uint16_t port_ = 0;
};

// A metric's value from Prometheus text (first sample whose name matches exactly).
std::optional<double> metric_value(const std::string& text, const std::string& name);

}  // namespace pagedserve::net::testing
