// `serve`'s KV-cache event flags (--kv-events-endpoint, --kv-events-replay-endpoint,
// --kv-events-pod-id): the ZeroMQ publisher they describe, or none. docs/kv-events.md.
#pragma once

#include <memory>
#include <set>
#include <string>

#include "net/kv_events/zmq_kv_event_publisher.h"
#include "tools/cli_flags.h"

namespace pagedserve::tools {

extern const std::set<std::string> kKvEventsValueFlags;
extern const char* const kKvEventsFlagsHelp;

// Null without --kv-events-endpoint (nothing is recorded or sent). Throws UsageError for a
// replay endpoint or pod id without an endpoint, or a pod id or model name holding '@', and
// std::runtime_error when ZeroMQ refuses an endpoint. Logs the resolved endpoints and topic.
std::shared_ptr<net::ZmqKvEventPublisher> kv_event_publisher_from_flags(
    const CliFlags& flags, const std::string& served_model_name, int block_size);

}  // namespace pagedserve::tools
