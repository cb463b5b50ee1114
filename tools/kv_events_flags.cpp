// `serve --kv-events-*`: builds the ZeroMQ KV-cache event publisher (see kv_events_flags.h).
#include "tools/kv_events_flags.h"

#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <stdexcept>

namespace pagedserve::tools {

const std::set<std::string> kKvEventsValueFlags = {"kv-events-endpoint",
                                                   "kv-events-replay-endpoint", "kv-events-pod-id"};

const char* const kKvEventsFlagsHelp =
    "KV-cache events (vLLM's ZeroMQ/msgpack format, for llm-d's precise prefix-cache routing):\n"
    "  --kv-events-endpoint ADDR    publish on a ZeroMQ PUB socket: bound for a wildcard\n"
    "                               (tcp://*:5557, tcp://127.0.0.1:* for any port), else\n"
    "                               connected (tcp://indexer:5557); default: no events\n"
    "  --kv-events-replay-endpoint ADDR  ROUTER socket answering replay requests for missed\n"
    "                               sequence numbers (e.g. tcp://*:5558)\n"
    "  --kv-events-pod-id ID        topic kv@ID@MODEL (default: $POD_NAME, else the hostname)\n";

namespace {

std::string default_pod_id() {
  if (const char* pod = std::getenv("POD_NAME"); pod != nullptr && *pod != '\0') return pod;
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) == 0 && host[0] != '\0') return host;
  return "pagedserve";
}

}  // namespace

std::shared_ptr<net::ZmqKvEventPublisher> kv_event_publisher_from_flags(
    const CliFlags& flags, const std::string& served_model_name, int block_size) {
  if (!flags.has("kv-events-endpoint")) {
    for (const char* flag : {"kv-events-replay-endpoint", "kv-events-pod-id"}) {
      if (flags.has(flag)) {
        throw UsageError(std::string("--") + flag + " needs --kv-events-endpoint");
      }
    }
    return nullptr;
  }
  net::ZmqKvEventPublisherConfig config;
  config.endpoint = flags.get("kv-events-endpoint", "");
  config.replay_endpoint = flags.get("kv-events-replay-endpoint", "");
  if (config.endpoint.empty()) throw UsageError("--kv-events-endpoint must not be empty");
  try {
    config.topic =
        net::kv_events_topic(flags.get("kv-events-pod-id", default_pod_id()), served_model_name);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  config.wire.block_size = block_size;
  auto publisher = std::make_shared<net::ZmqKvEventPublisher>(std::move(config));
  std::cerr << "pagedserve: KV-cache events on " << publisher->endpoint() << " topic "
            << publisher->topic();
  if (!publisher->replay_endpoint().empty()) {
    std::cerr << ", replay on " << publisher->replay_endpoint();
  }
  std::cerr << std::endl;
  return publisher;
}

}  // namespace pagedserve::tools
