// `pagedserve serve`: the OpenAI-compatible HTTP/SSE/WebSocket server (net/server) in front of
// one in-process Engine. Runs until SIGINT or SIGTERM, then drains the streams in flight (a
// bounded wait) and exits 0.
#include <fstream>
#include <iostream>
#include <sstream>

#include "actors/engine.h"
#include "net/protocol/tool_calls.h"
#include "net/server/http_server.h"
#include "tools/cli_flags.h"
#include "tools/engine_flags.h"
#include "tools/kv_events_flags.h"
#include "tools/subcommands.h"

namespace pagedserve::tools {
namespace {

const char* const kServeHelp =
    "usage: pagedserve serve --model DIR [options]\n"
    "  --host ADDR                  address to listen on (default 127.0.0.1)\n"
    "  --port N                     TCP port (default 8000; 0 picks a free one)\n"
    "  --served-model-name NAME     the `model` clients send (default: the model folder)\n"
    "  --tool-call-parser NAME      hermes, llama3_json or mistral: how tool calls are written\n"
    "                               (default: what the chat template shows, else hermes)\n"
    "  --api-key KEY                require 'Authorization: Bearer KEY' or 'X-Api-Key: KEY' (not\n"
    "                               on /health and /metrics); repeat for several keys\n"
    "  --api-key-file PATH          more keys, one per line (blank lines and # comments skipped)\n"
    "  --allowed-origins LIST       CORS: comma-separated browser origins allowed to call the API\n"
    "                               (e.g. https://app.example.com), or '*'; default: CORS off\n"
    "  --ssl-certfile PATH          serve HTTPS/WSS with this PEM certificate chain ...\n"
    "  --ssl-keyfile PATH           ... and this PEM private key (both or neither)\n"
    "  --max-queued-requests N      waiting requests beyond which new ones get 429 (default\n"
    "                               256)\n"
    "  --max-prompt-tokens N        longer prompts get 400 (default: the model's context)\n"
    "  --max-n N                    largest `n` a request may ask for (default 128)\n"
    "  --max-best-of N              largest `best_of` (and beam width) (default 128)\n"
    "  --max-ws-streams N           requests running at once per WebSocket; more get an error\n"
    "                               frame, the socket stays open (default 0 = unlimited)\n"
    "  --max-body-bytes BYTES       larger request bodies get 413 (default 4M)\n"
    "  --max-header-bytes BYTES     larger request lines + headers get 431 (default 8K)\n"
    "  --max-requests-per-connection N  keep-alive: close after N requests (default 0 =\n"
    "                               unlimited)\n"
    "  --io-threads N               network threads (default 1)\n"
    "  --drain-timeout SECONDS      on SIGINT/SIGTERM, how long streams may finish (default 10)\n"
    "  --idle-timeout SECONDS       close connections silent this long (default 60)\n"
    "  --log-interval SECONDS       period of the engine log line, 0 = off (default 10)\n"
    "  --no-ui                      do not serve the playground page at GET / "
    "(docs/playground.md)\n"
    "  --metrics-compat vllm        /metrics also shows vLLM's series (vllm:num_requests_waiting,\n"
    "                               vllm:kv_cache_usage_perc, ...) for routers set up for vLLM\n"
    "  --check-args                 check the flags, print 'arguments OK' and exit (loads\n"
    "                               no model)\n"
    "endpoints: POST /v1/completions, POST /v1/chat/completions, GET /v1/models, GET /health,\n"
    "  GET /version, POST /tokenize, POST /detokenize, GET /metrics, WebSocket GET /v1/stream,\n"
    "  POST /v1/completions/render, POST /v1/chat/completions/render\n";

// --api-key-file: one key per line; surrounding whitespace, blank lines and lines starting
// with '#' are ignored. An unreadable file, or one without a key, is a usage error.
std::vector<std::string> read_api_key_file(const std::string& path) {
  std::ifstream file(path);
  if (!file) throw UsageError("--api-key-file '" + path + "' cannot be read");
  std::vector<std::string> keys;
  std::string line;
  while (std::getline(file, line)) {
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    const size_t last = line.find_last_not_of(" \t\r");
    keys.push_back(line.substr(first, last - first + 1));
  }
  if (keys.empty()) throw UsageError("--api-key-file '" + path + "' holds no key");
  return keys;
}

std::vector<std::string> api_keys_from_flags(const CliFlags& flags) {
  std::vector<std::string> keys;
  for (const std::string& key : flags.all("api-key")) {
    if (key.empty()) throw UsageError("--api-key must not be empty");
    keys.push_back(key);
  }
  for (const std::string& path : flags.all("api-key-file")) {
    for (std::string& key : read_api_key_file(path)) keys.push_back(std::move(key));
  }
  return keys;
}

std::vector<std::string> origins_from_flag(const CliFlags& flags) {
  std::vector<std::string> origins;
  for (const std::string& list : flags.all("allowed-origins")) {
    std::stringstream items(list);
    std::string origin;
    while (std::getline(items, origin, ',')) {
      const size_t first = origin.find_first_not_of(' ');
      if (first == std::string::npos) continue;
      origin = origin.substr(first, origin.find_last_not_of(' ') - first + 1);
      // Browsers send an origin without a path: "https://host:port" (no trailing slash).
      if (origin != "*" && origin.find("://") == std::string::npos) {
        throw UsageError(
            "--allowed-origins expects origins such as https://app.example.com or "
            "'*', got '" +
            origin + "'");
      }
      if (origin.size() > 1 && origin.back() == '/') origin.pop_back();
      origins.push_back(origin);
    }
  }
  return origins;
}

void read_limit_flags(const CliFlags& flags, net::HttpServerConfig& config) {
  net::RequestLimits& limits = config.request_limits;
  limits.max_prompt_tokens =
      static_cast<int>(flags.get_int("max-prompt-tokens", 0, 1, int64_t{1} << 30));
  limits.max_n =
      static_cast<int>(flags.get_int("max-n", limits.max_n, 1, net::kMaxSequencesPerPrompt));
  limits.max_best_of = static_cast<int>(
      flags.get_int("max-best-of", limits.max_best_of, 1, net::kMaxSequencesPerPrompt));
  config.ws_max_streams = static_cast<int>(flags.get_int("max-ws-streams", 0, 0, 1 << 20));
  config.max_body_bytes = static_cast<size_t>(flags.get_bytes("max-body-bytes", 4 << 20));
  const int64_t header_bytes =
      flags.get_bytes("max-header-bytes", static_cast<int64_t>(config.max_header_bytes));
  if (header_bytes < 1024 || header_bytes > (int64_t{64} << 20)) {
    throw UsageError("--max-header-bytes must be between 1K and 64M, got " +
                     flags.get("max-header-bytes", ""));
  }
  config.max_header_bytes = static_cast<size_t>(header_bytes);
  config.max_requests_per_connection =
      static_cast<int>(flags.get_int("max-requests-per-connection", 0, 0, INT32_MAX));
}

// What routers in front of replicas read (docs/scale-out.md).
void read_router_flags(const CliFlags& flags, net::HttpServerConfig& config) {
  const std::string compat = flags.get("metrics-compat", "");
  if (!compat.empty() && compat != "vllm") {
    throw UsageError("--metrics-compat must be vllm, got '" + compat + "'");
  }
  config.metrics_vllm_compat = compat == "vllm";
}

net::HttpServerConfig server_config_from_flags(const CliFlags& flags) {
  net::HttpServerConfig config;
  config.host = flags.get("host", config.host);
  config.port = static_cast<uint16_t>(flags.get_int("port", config.port, 0, 65535));
  config.served_model_name = flags.get("served-model-name", "");
  config.tool_call_parser = flags.get("tool-call-parser", "");
  if (!config.tool_call_parser.empty() && !net::parse_tool_call_format(config.tool_call_parser)) {
    throw UsageError("--tool-call-parser must be hermes, llama3_json or mistral, got '" +
                     config.tool_call_parser + "'");
  }
  config.api_keys = api_keys_from_flags(flags);
  config.allowed_origins = origins_from_flag(flags);
  config.tls_cert_file = flags.get("ssl-certfile", "");
  config.tls_key_file = flags.get("ssl-keyfile", "");
  if (config.tls_cert_file.empty() != config.tls_key_file.empty()) {
    throw UsageError(
        "--ssl-certfile and --ssl-keyfile go together (got only " +
        std::string(config.tls_cert_file.empty() ? "--ssl-keyfile" : "--ssl-certfile") + ")");
  }
  config.max_queued_requests = static_cast<int>(
      flags.get_int("max-queued-requests", config.max_queued_requests, 0, 1 << 20));
  read_limit_flags(flags, config);
  config.num_io_threads = static_cast<int>(flags.get_int("io-threads", 1, 1, 64));
  config.drain_timeout = std::chrono::seconds(flags.get_int("drain-timeout", 10, 0, 3600));
  config.idle_timeout = std::chrono::seconds(flags.get_int("idle-timeout", 60, 1, 86400));
  config.stats_log_interval = std::chrono::seconds(flags.get_int("log-interval", 10, 0, 86400));
  config.serve_ui = !flags.has("no-ui");
  read_router_flags(flags, config);
  return config;
}

}  // namespace

int run_serve(const std::vector<std::string>& args) {
  std::set<std::string> value_flags = kEngineValueFlags;
  value_flags.insert({"host",
                      "port",
                      "served-model-name",
                      "tool-call-parser",
                      "api-key",
                      "api-key-file",
                      "allowed-origins",
                      "ssl-certfile",
                      "ssl-keyfile",
                      "max-queued-requests",
                      "max-prompt-tokens",
                      "max-n",
                      "max-best-of",
                      "max-ws-streams",
                      "max-body-bytes",
                      "max-header-bytes",
                      "max-requests-per-connection",
                      "io-threads",
                      "drain-timeout",
                      "idle-timeout",
                      "log-interval"});
  value_flags.insert(kKvEventsValueFlags.begin(), kKvEventsValueFlags.end());
  std::set<std::string> bool_flags = kEngineBoolFlags;
  bool_flags.insert("help");
  bool_flags.insert("no-ui");
  value_flags.insert("metrics-compat");  // scale-out: routers (docs/scale-out.md)
  bool_flags.insert("check-args");
  const CliFlags flags(args, value_flags, bool_flags);
  if (flags.has("help")) {
    std::cout << kServeHelp << kEngineFlagsHelp << kKvEventsFlagsHelp;
    return 0;
  }
  const actors::EngineConfig engine_config = engine_config_from_flags(flags);
  const net::HttpServerConfig server_config = server_config_from_flags(flags);
  if (flags.has("check-args")) {  // e.g. a deployment manifest's args, checked offline
    std::cout << "pagedserve serve: arguments OK" << std::endl;
    return 0;
  }
  actors::EngineOptions engine_options = net::engine_options_for(server_config, engine_config);
  // KV-cache events (docs/kv-events.md): the publisher outlives the engine that feeds it.
  engine_options.kv_event_publisher = kv_event_publisher_from_flags(
      flags, net::served_model_name_for(server_config, engine_config.model_dir),
      engine_config.block_size);
  std::unique_ptr<actors::Engine> engine = actors::Engine::start(engine_config, engine_options);
  {
    net::HttpServer server(*engine, server_config);
    const uint16_t port = server.start();
    const char* scheme = server_config.tls_cert_file.empty() ? "http://" : "https://";
    server.run_until_signal([&] {
      std::cerr << "pagedserve: serving " << engine_config.model_dir.string() << " on " << scheme
                << server_config.host << ":" << port << " (Ctrl-C to stop)" << std::endl;
      if (server_config.serve_ui) {
        std::cerr << "pagedserve: playground at " << scheme << server_config.host << ":" << port
                  << "/" << std::endl;
      }
    });
  }
  engine->shutdown();
  std::cerr << "pagedserve: stopped" << std::endl;
  return 0;
}

}  // namespace pagedserve::tools
