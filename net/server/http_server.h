// HttpServer: the network actor. Serves the OpenAI-compatible HTTP API (completions and chat,
// JSON or server-sent events), the small endpoints, Prometheus /metrics and the WebSocket
// stream (GET /v1/stream) for one in-process actors::Engine, over plain TCP or TLS. No Boost
// or OpenSSL in this header (pimpl): Beast, Asio and OpenSSL live only in net/server/*.cpp.
//
// Threads: start() runs the listener on a thread of its own and `num_io_threads` threads on one
// io_context; every connection runs on
// its own strand, and the engine's token callbacks (on the tokenizer thread) only post to that
// strand. start(), run_until_signal() and stop() are called from one controlling thread
// (never from an io thread).
//
// Shutdown (stop(), or SIGINT/SIGTERM in run_until_signal()): stop accepting; close idle
// connections; let responses in flight finish for up to `drain_timeout`; then abort what is
// left (engine abort, sockets closed), wait for the engine's final events, join the threads.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "actors/engine.h"
#include "net/protocol/request_limits.h"

namespace pagedserve::net {

struct HttpServerConfig {
  std::string host = "127.0.0.1";  // loopback unless told otherwise
  uint16_t port = 8000;            // 0: an ephemeral port (start() returns it)
  std::string served_model_name;   // `model` clients send; empty: the model folder's name
  // Accepted API keys (--api-key, repeatable, and --api-key-file); empty: no authentication.
  // A request carries one as "Authorization: Bearer KEY" or "X-Api-Key: KEY".
  std::vector<std::string> api_keys;
  // Browser origins allowed to call the API (--allowed-origins): an exact origin such as
  // "https://app.example.com", or "*" for any. Empty: CORS off (no Access-Control-* headers).
  std::vector<std::string> allowed_origins;
  // TLS (--ssl-certfile, --ssl-keyfile): PEM files; both empty: plain HTTP. start() throws
  // std::runtime_error for an unreadable file or a key that does not match the certificate.
  std::string tls_cert_file;
  std::string tls_key_file;
  // How tool calls are written and parsed: "hermes", "llama3_json", "mistral" (vLLM's
  // --tool-call-parser names); empty: what the chat template shows, else hermes.
  std::string tool_call_parser;
  // Requests in flight beyond what the engine runs at once (max_num_seqs) count as waiting;
  // a request that would make more than this many wait gets 429 (Retry-After: 1) at once.
  int max_queued_requests = 256;
  RequestLimits request_limits;             // n, best_of, prompt tokens: 400 beyond
  size_t max_body_bytes = size_t{4} << 20;  // larger bodies get 413
  size_t max_header_bytes = 8192;           // request line + headers; larger get 431
  // Keep-alive: the N-th request on one connection is answered with "Connection: close" and
  // the connection closes; 0: unlimited.
  int max_requests_per_connection = 0;
  // Generation requests running at once on one WebSocket; a start frame beyond gets an error
  // frame (code "too_many_streams") and the connection stays open. 0: unlimited.
  int ws_max_streams = 0;
  std::chrono::seconds idle_timeout{60};           // keep-alive, headers, body, WS silence
  std::chrono::seconds write_timeout{30};          // one response write (SSE chunk included)
  std::chrono::milliseconds drain_timeout{10000};  // shutdown: wait for streams in flight
  size_t ws_max_queued_frames = 4096;              // per WebSocket: token frames waiting to be sent
  // Per SSE response: engine events waiting while the client does not read (the socket write
  // is blocked); at least twice the response's choices. One more cancels the response's
  // requests (blocks freed at once) and ends the stream with a "slow_reader" error event.
  size_t sse_max_queued_events = 4096;
  int num_io_threads = 1;
  // The kernel's queue of connections not yet accepted (listen(2)); 0: the system's maximum.
  int listen_backlog = 0;
  std::chrono::milliseconds stats_log_interval{10000};  // periodic engine line; 0: off
  // The playground page (GET /, GET /ui/*; docs/playground.md), open without a key: it asks
  // for one. false (--no-ui): those paths are 404 like any unknown path.
  bool serve_ui = true;
  // --metrics-compat vllm: /metrics also shows vLLM's series (vllm:*), so routers configured
  // for vLLM (the llm-d EPP's defaults, vLLM production-stack) read pagedserve unchanged.
  bool metrics_vllm_compat = false;
  // One line per request and the periodic engine line; default: stderr.
  std::function<void(std::string_view)> log;
};

// The EngineOptions the server needs: submit() must never block an io thread, so the
// engine's own limit sits above the server's admission limit (max_num_seqs +
// max_queued_requests).
actors::EngineOptions engine_options_for(const HttpServerConfig& config,
                                         const actors::EngineConfig& engine_config);

// The model name clients send (and KV-cache event topics carry): --served-model-name, else the
// model folder's name.
std::string served_model_name_for(const HttpServerConfig& config,
                                  const std::filesystem::path& model_dir);

class HttpServer {
 public:
  // `engine` must outlive the server. Throws model::ChatTemplateError for a chat template
  // that does not parse.
  HttpServer(actors::Engine& engine, HttpServerConfig config);
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;
  ~HttpServer();  // stop()

  // Loads the TLS files (if any), binds, listens and starts the io threads; returns the bound
  // port. Throws std::runtime_error when a TLS file is missing or bad (before binding) or the
  // address cannot be bound.
  uint16_t start();
  // Blocks until SIGINT or SIGTERM (or stop() from another thread), then stops. `on_ready`
  // runs once the signals are caught (e.g. to print "serving"): a supervisor that signals as
  // soon as it reads that line gets a graceful stop, not the default action's kill.
  void run_until_signal(const std::function<void()>& on_ready = {});
  // The graceful shutdown above; idempotent, blocking.
  void stop();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace pagedserve::net
