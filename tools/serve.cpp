// `pagedserve serve`: the OpenAI-compatible HTTP/SSE/WebSocket server (net/server) in front of
// one in-process Engine. Runs until SIGINT or SIGTERM, then drains the streams in flight (a
// bounded wait) and exits 0.
#include <iostream>

#include "actors/engine.h"
#include "net/protocol/tool_calls.h"
#include "net/server/http_server.h"
#include "tools/cli_flags.h"
#include "tools/engine_flags.h"
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
    "  --api-key KEY                require 'Authorization: Bearer KEY' (not on /health and\n"
    "                               /metrics)\n"
    "  --max-queued-requests N      waiting requests beyond which new ones get 429 (default\n"
    "                               256)\n"
    "  --max-body-bytes BYTES       larger request bodies get 413 (default 4M)\n"
    "  --io-threads N               network threads (default 1)\n"
    "  --drain-timeout SECONDS      on SIGINT/SIGTERM, how long streams may finish (default 10)\n"
    "  --idle-timeout SECONDS       close connections silent this long (default 60)\n"
    "  --log-interval SECONDS       period of the engine log line, 0 = off (default 10)\n"
    "endpoints: POST /v1/completions, POST /v1/chat/completions, GET /v1/models, GET /health,\n"
    "  GET /version, POST /tokenize, POST /detokenize, GET /metrics, WebSocket GET /v1/stream\n";

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
  config.api_key = flags.get("api-key", "");
  config.max_queued_requests = static_cast<int>(
      flags.get_int("max-queued-requests", config.max_queued_requests, 0, 1 << 20));
  config.max_body_bytes = static_cast<size_t>(flags.get_bytes("max-body-bytes", 4 << 20));
  config.num_io_threads = static_cast<int>(flags.get_int("io-threads", 1, 1, 64));
  config.drain_timeout = std::chrono::seconds(flags.get_int("drain-timeout", 10, 0, 3600));
  config.idle_timeout = std::chrono::seconds(flags.get_int("idle-timeout", 60, 1, 86400));
  config.stats_log_interval = std::chrono::seconds(flags.get_int("log-interval", 10, 0, 86400));
  return config;
}

}  // namespace

int run_serve(const std::vector<std::string>& args) {
  std::set<std::string> value_flags = kEngineValueFlags;
  value_flags.insert({"host", "port", "served-model-name", "tool-call-parser", "api-key",
                      "max-queued-requests", "max-body-bytes", "io-threads", "drain-timeout",
                      "idle-timeout", "log-interval"});
  std::set<std::string> bool_flags = kEngineBoolFlags;
  bool_flags.insert("help");
  const CliFlags flags(args, value_flags, bool_flags);
  if (flags.has("help")) {
    std::cout << kServeHelp << kEngineFlagsHelp;
    return 0;
  }
  const actors::EngineConfig engine_config = engine_config_from_flags(flags);
  const net::HttpServerConfig server_config = server_config_from_flags(flags);
  std::unique_ptr<actors::Engine> engine =
      actors::Engine::start(engine_config, net::engine_options_for(server_config, engine_config));
  {
    net::HttpServer server(*engine, server_config);
    const uint16_t port = server.start();
    std::cerr << "pagedserve: serving " << engine_config.model_dir.string() << " on http://"
              << server_config.host << ":" << port << " (Ctrl-C to stop)" << std::endl;
    server.run_until_signal();
  }
  engine->shutdown();
  std::cerr << "pagedserve: stopped" << std::endl;
  return 0;
}

}  // namespace pagedserve::tools
