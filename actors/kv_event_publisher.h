// KvEventPublisher: where the prefix-cache actor hands each step's KV-cache events
// (cache/kv_cache_events.h) for a KV-aware router. The interface only: the ZeroMQ publisher
// that `serve --kv-events-endpoint` builds is net/kv_events/zmq_kv_event_publisher.h; tests
// plug in a recording one. publish() is called on the prefix-cache actor's thread, once per
// applied op list that changed the prefix cache, and must not block (that thread is on every
// step's path): an implementation queues the batch and sends it from its own thread.
#pragma once

#include <vector>

#include "cache/kv_cache_events.h"

namespace pagedserve::actors {

// One applied op list's events: what vLLM calls a KVEventBatch.
struct KvEventBatch {
  double timestamp_s = 0;  // wall clock (seconds since the Unix epoch) when the list was applied
  std::vector<cache::KvCacheEvent> events;  // in the order the index changed
};

class KvEventPublisher {
 public:
  virtual ~KvEventPublisher() = default;
  // Thread safety: called from one thread at a time (the prefix-cache actor's).
  virtual void publish(KvEventBatch batch) = 0;
};

}  // namespace pagedserve::actors
